"""The evidence behind the gain as typed records (``bakeoff.decide.evidence.gather``; reports/metrics.json's
``where``): where the best prompt and the recommended run differ (per field, per label, or the score's quartiles),
a few test items side by side, and the prompts each baseline sent. A row keyed by run names is an OPEN record
(``rec[name]``). Read and written back key for key (``bakeoff.core.record.Record``).

    e = Evidence.from_dict(evidence.gather(...))
    e.where.kind, e.where.largest.field, e.where.largest[e.run], e.samples[0].answers["lora"].score
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.core.record import Record


@dataclass
class Largest(Record):
    """The field with the largest gap, and each of the two runs' accuracy on it (keyed by run name)."""

    OPEN = True
    field: str | None = None
    gap: float | None = None


@dataclass
class LabelRow(Record):
    """A true label: its items, and how many each of the two runs gets right (keyed by run name)."""

    OPEN = True
    label: str | None = None
    n: int | None = None


@dataclass
class Confusion(Record):
    """A true label answered as another, and how often."""

    true: str | None = None
    answered: str | None = None
    count: int | None = None


@dataclass
class Quartiles(Record):
    """The spread of one run's per-item scores."""

    min: float | None = None
    q1: float | None = None
    median: float | None = None
    q3: float | None = None
    max: float | None = None
    n: int | None = None


@dataclass
class Where(Record):
    """Where the gain comes from, by what the task is (``kind``: fields, labels or quartiles); ``table``: run → field
    → accuracy (fields) or run → quartiles."""

    kind: str | None = None
    fields: list[str] | None = None
    table: dict | None = None
    gaps: dict[str, float] | None = None
    largest: Largest | None = None
    labels: list[LabelRow] | None = None
    confusions: dict[str, list[Confusion]] | None = None

    def quartiles(self) -> dict[str, Quartiles]:
        return {n: Quartiles.from_dict(q) for n, q in (self.table or {}).items()}


@dataclass
class Answer(Record):
    answer: str | None = None
    score: float | None = None


@dataclass
class Sample(Record):
    """A test item shown side by side: why it was chosen, its input and reference, every run's answer."""

    id: int | None = None
    source: str | None = None
    why: str | None = None
    input: str | None = None
    reference: str | None = None
    answers: dict[str, Answer] | None = None


@dataclass
class PromptSent(Record):
    """A prompting baseline's turns for the first test item (``error``: not recorded)."""

    name: str | None = None
    item: int | str | None = None
    rule: str | None = None
    instruction: str | None = None
    messages: list[dict] | None = None
    error: str | None = None


@dataclass
class Evidence(Record):
    """The best prompt and the run set against it, the rule that chose the samples, and what was found; ``error``
    where it could not be gathered."""

    prompt: str | None = None
    run: str | None = None
    rule: str | None = None
    prompts: list[PromptSent] | None = None
    where: Where | None = None
    samples: list[Sample] | None = None
    error: str | None = None

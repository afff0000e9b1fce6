"""The verdict as typed records (``bakeoff.decide.decision.Decision.verdict``): the decision with its gain and
interval, the tie that was broken, each knowledge-or-format finding, the runs that did not move, what was measured on
(``Scope``) and the recommendation with every cheaper run it weighed. ``bakeoff.report.verdict`` adds the words
(``reason``, a finding's ``line``, the recommendation's ``line``, ``measured`` and ``projected``) in their places.
Read and written back key for key (``bakeoff.core.record.Record``): a field that is None was absent.

    v = Verdict.from_dict(facts)
    v.decision, v.gain, v.scope.model, v.recommendation.run, v.recommendation.choice.considered[0].p_holm
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.core.record import Record


@dataclass
class Tie(Record):
    """Runs tied for the lead on the choosing split, and the rule that broke the tie."""

    runs: list[str] | None = None
    at: float | None = None
    split: str | None = None
    rule: str | None = None


@dataclass
class Ran(Record):
    """The prompt a prompting arm ran with."""

    shots: int | None = None
    selection: str | None = None
    instruction: str | None = None


@dataclass
class Finding(Record):
    """A prompting arm whose answers contain the reference far more often than they match it: the facts
    (``ran``, ``fixes``, ``tried_by``, ``labels_left``) and, once worded, what was tried and left, and its ``line``."""

    baseline: str | None = None
    contains_reference: float | None = None
    quality: float | None = None
    ran: Ran | None = None
    label_choice: float | None = None
    fixes: dict[str, str] | None = None
    tried_by: dict[str, list[str]] | None = None
    labels_left: bool | None = None
    tried: list[str] | None = None
    tried_elsewhere: list[str] | None = None
    left: list[str] | None = None
    line: str | None = None


@dataclass
class Unmoved(Record):
    """A derived run that gave its parent's answers on every test item."""

    parent: str | None = None
    identical: int | None = None
    pref_loss: float | None = None


@dataclass
class Scope(Record):
    """What the verdict was measured on: the model, the split and its items, the machine; the sizing target."""

    model: str | None = None
    split: str | None = None
    n: int | None = None
    machine: str | None = None
    target: str | None = None


@dataclass
class Considered(Record):
    """A cheaper run against the best (``bakeoff.decide.rule.Shortfall`` as written)."""

    run: str | None = None
    against: str | None = None
    n: int | None = None
    diff: float | None = None
    low: float | None = None
    high: float | None = None
    margin: float | None = None
    p: float | None = None
    p_holm: float | None = None
    shown: bool | None = None
    items_needed: int | None = None
    saving: float | None = None


@dataclass
class ChoiceRecord(Record):
    """The rule's choice (``bakeoff.decide.rule.Choice`` as written): the best, the pick, every contender."""

    best: str | None = None
    pick: str | None = None
    margin: float | None = None
    replaced: bool | None = None
    considered: list[Considered] | None = None


@dataclass
class Recommendation(Record):
    """One thing to do (``bakeoff.decide.recommend.recommend``), and, once worded, its ``line`` with what was
    measured and what projected."""

    action: str | None = None
    run: str | None = None
    kind: str | None = None
    best: str | None = None
    line: str | None = None
    measured: list[str] | None = None
    projected: list[str] | None = None
    max_loss: float | None = None
    saving_unit: str | None = None
    examples_needed: int | None = None
    choice: ChoiceRecord | None = None
    still_improving: list[str] | None = None
    compared: list[str] | None = None


@dataclass
class Verdict(Record):
    """Fine-tune, prompting is enough or inconclusive (``bakeoff.decide.verdict.verdict``), with everything the
    decision added to it."""

    decision: str | None = None
    missing: str | None = None
    variant: str | None = None
    baseline: str | None = None
    gain: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    min_gain: float | None = None
    n_test: int | None = None
    chosen_on: str | None = None
    tie: Tie | None = None
    baseline_figure: str | None = None
    examples_needed: int | None = None
    reason: str | None = None
    diagnosis: list[Finding] | None = None
    rank_groups: str | None = None
    alpha: float | None = None
    scope: Scope | None = None
    unmoved: dict[str, Unmoved] | None = None
    recommendation: Recommendation | None = None
    families: dict | None = None  # prompt / RAG / fine-tune / fine-tune + RAG (bakeoff.decide.families.Families)

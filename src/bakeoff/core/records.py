"""Typed records that pass between stages, read from the JSON each stage writes: a search's record
(``runs/<name>/tuned.json``) as ``Search``, its trials as ``Trial``, its plain recipe as ``Recipe`` and each range it
widened as ``Widened``. The JSON on disk is as the tune stage writes it: a record from an older run, with fewer keys,
loads (the missing fields take their defaults), and a key no field names is kept in ``extra``.

    s = read_search("lora")           # a Search; Search() where the arm was never searched
    s.values, s.status, s.shared_from, [t.tokens_seen for t in s.spent()]
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from bakeoff.core import runs
from bakeoff.core.record import Record


def _load(cls, d: dict | None, renamed: dict[str, str] | None = None) -> dict:
    """``d``'s keys as ``cls``'s fields (``renamed``: JSON key → field), the rest under ``extra``."""
    names = {f.name for f in fields(cls)} - {"extra"}
    renamed = renamed or {}
    known, extra = {}, {}
    for k, x in (d or {}).items():
        key = renamed.get(k, k)
        (known if key in names else extra)[key if key in names else k] = x
    return {**known, "extra": extra}


@dataclass(frozen=True)
class Trial:
    """One trial of a search: its number, Optuna state, validation score, values, and what it cost."""

    number: int | None = None
    state: str | None = None
    value: float | None = None
    values: dict = field(default_factory=dict)
    wall_s: float | None = None
    tokens_seen: int | None = None
    val_curve: list = field(default_factory=list)  # [{"step", "loss", ...}] at each validation pass
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict | None) -> Trial:
        return cls(**_load(cls, d))

    @property
    def steps(self) -> int:
        """The optimizer steps it ran to its last validation pass."""
        return max([p["step"] for p in self.val_curve] or [0])


@dataclass(frozen=True)
class Recipe:
    """The plain recipe (params.yaml's values), run first by every search, and its validation score."""

    values: dict = field(default_factory=dict)
    state: str | None = None
    value: float | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Widened:
    """A range the search widened after a choice at its edge (``from`` in the JSON), and how many trials ran beyond."""

    param: str = ""
    side: str = ""
    from_: float | None = None
    to: float | None = None
    trials_outside: int | None = None
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Search:
    """An arm's search (``bakeoff.search``): its status (``ok``, ``off``, ``failed``, ``oom``; None in a record from
    before statuses), the values chosen, the trials, what it was judged by, and what it cost."""

    status: str | None = None
    values: dict = field(default_factory=dict)
    trials: tuple[Trial, ...] = ()
    objective: str | None = None  # val_loss | metric
    best_value: float | None = None
    best_trial: int | None = None
    trial_steps: int | None = None
    recipe: Recipe | None = None
    beat_recipe: bool | None = None
    widened: tuple[Widened, ...] = ()
    shared_from: str | None = None  # the arm whose search it takes (tune.share)
    skipped: str | None = None  # why there was no search
    error: str | None = None
    tune_tokens: float = 0
    tune_wall_s: float = 0.0
    token_budget: float | None = None
    token_budget_from: str | None = None
    adopt: dict = field(default_factory=dict)  # the trial that is the arm's own training run ({"trial": n, ...})
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: dict | None) -> Search:
        got = _load(cls, d)
        got["trials"] = tuple(Trial.from_json(t) for t in got.get("trials") or [])
        got["recipe"] = Recipe(**_load(Recipe, got["recipe"])) if got.get("recipe") else None
        got["widened"] = tuple(Widened(**_load(Widened, w, {"from": "from_"})) for w in got.get("widened") or [])
        got["adopt"] = got.get("adopt") or {}
        return cls(**got)

    @property
    def searched(self) -> bool:
        return bool(self.trials)

    @property
    def stopped(self) -> bool:
        """The search ran and did not finish (it crashed, or ran out of memory): the arm trained unsearched."""
        return self.status not in (None, "ok", "off")

    def spent(self) -> list[Trial]:
        """The trials its cost counts: every one but the trial adopted as the arm's own training run."""
        return [t for t in self.trials if t.number != self.adopt.get("trial")]


def read_search(name: str) -> Search:
    """``runs/<name>/tuned.json`` as a ``Search`` (``Search()`` where there is none)."""
    return Search.from_json(runs.read_json(runs.tuned_record(name)))


@dataclass
class BaseModel(Record):
    """Where the base model came from (``models/base/bakeoff_source.json``): an alias's wheel and note, or a hub id or
    folder (``source``), with its shape. OPEN: a later field is kept as written."""

    OPEN = True
    kind: str | None = None
    alias: str | None = None
    source: str | None = None
    wheel: str | None = None
    note: str | None = None
    base: str | None = None
    architecture: list[str] | None = None
    params: int | None = None
    dtype: str | None = None
    vocab_size: int | None = None
    hidden_size: int | None = None
    num_layers: int | None = None

    @property
    def name(self) -> str | None:
        """The model's name as the report says it: its alias, else where it came from."""
        return self.alias or self.source


@dataclass
class Provenance(Record):
    """What a result traces back to (``bakeoff.core.runs.provenance``): the data's hash, the commit, Python and the
    machine, the libraries' versions, the base model."""

    data_hash: str | None = None
    git_commit: str | None = None
    python: str | None = None
    machine: str | None = None
    device: str | None = None
    versions: dict[str, str | None] | None = None
    base_model: BaseModel | None = None


@dataclass
class LossPoint(Record):
    """A loss at an optimizer step (``se``: its standard error over the validation rows, where measured). OPEN: a
    later figure is kept as written."""

    OPEN = True
    step: int | None = None
    loss: float | None = None
    se: float | None = None


@dataclass
class TaskResult(Record):
    """A standard lm-eval task's result for a run: ``ok`` with its figures (kept as named, OPEN), or why not."""

    OPEN = True
    status: str | None = None
    reason: str | None = None


@dataclass
class SideCheck(Record):
    """A side check of an evaluation (lm-eval, the probe, KL) that did not finish, and why."""

    status: str | None = None
    error: str | None = None


@dataclass
class Engine(Record):
    """An endpoint baseline's engine: the model that answered and how label choice was made. OPEN."""

    OPEN = True
    model: str | None = None
    label_choice: str | None = None


@dataclass
class SeedRun(Record):
    """A variant's extra training seed: its seed, MLflow run, status and its headline figures (OPEN)."""

    OPEN = True
    seed: int | None = None
    run_id: str | None = None
    status: str | None = None
    error: str | None = None


@dataclass
class RunRecord(Record):
    """A run's record as its stage writes it (``runs/<name>/train.json``, ``eval.json``): what ran, its status (and
    why not ok), its MLflow run, its figures (``metrics``) and loss curves. OPEN: a later key is kept as written.

    rec = read_run(runs.eval_record("lora"))   # RunRecord(); empty where the stage never wrote one
    """

    OPEN = True
    name: str | None = None
    kind: str | None = None
    technique: str | None = None
    backend: str | None = None
    parent: str | None = None
    prompt_sent: dict | None = None
    run_id: str | None = None
    history: list[LossPoint] | None = None
    val_curve: list[LossPoint] | None = None
    kernel_choice: dict | None = None
    seeds: list[SeedRun] | None = None
    engine: Engine | None = None
    lm_eval_tasks: dict[str, TaskResult] | None = None
    status: str | None = None
    error: str | None = None
    metrics: dict | None = None
    side_checks: dict[str, SideCheck] | None = None
    mlflow_run_id: str | None = None
    mlflow_error: str | None = None
    device: str | None = None
    torch_threads: int | None = None


def metric(rec: RunRecord, name: str):
    """One figure of a run's record (``metrics[name]``; None where it has none)."""
    return (rec.metrics or {}).get(name)


def read_run(path) -> RunRecord:
    """A run's record from ``path`` (``runs.train_record(name)``, ``runs.eval_record(name)``); empty where it has
    none."""
    return RunRecord.from_dict(runs.read_json(path) or {})


@dataclass
class Longest(Record):
    """A split's longest reference answer in tokens, and where it is."""

    tokens: int | None = None
    source: str | None = None


@dataclass
class Generation(Record):
    """The generation budget the data stage set (``max_new_tokens`` where ``auto``), the longest answers, and whether
    the budget cuts any (``warning`` says so)."""

    OPEN = True
    max_new_tokens: int | None = None
    longest_answer: dict[str, Longest] | None = None
    truncates: bool | None = None
    warning: str | None = None


@dataclass
class DataStats(Record):
    """The data stage's record (``data/prepared/stats.json``): each split's rows, the data's hash, token counts, the
    closed label set (None: free text), the generation budget and every check's finding. OPEN: a later key kept.

    stats = read_stats()    # DataStats(); empty before the data stage ran
    """

    OPEN = True
    splits: dict[str, int] | None = None
    data_hash: str | None = None
    tokens: dict | None = None
    labels: list[str] | None = None
    generation: Generation | None = None
    checks: dict | None = None


def read_stats(path=None) -> DataStats:
    """The data stage's record (``path``: its stats.json, the prepared folder's by default); empty where none."""
    return DataStats.from_dict(runs.read_json(path or runs.PREPARED / "stats.json") or {})


@dataclass
class PointRecord(Record):
    """One data-value curve point as the curve stage writes it (``reports/curve/<arm>-<share>/point.json``): the arm,
    the share, the run it was drawn for and how that run was chosen, its status (and why not ok) and its figures.
    OPEN: a later key kept as written."""

    OPEN = True
    arm: str | None = None
    share: float | None = None
    run: str | None = None
    chosen_as: str | None = None
    kind: str | None = None
    status: str | None = None
    error: str | None = None
    metrics: dict | None = None
    mlflow_run_id: str | None = None
    mlflow_error: str | None = None

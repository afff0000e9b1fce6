"""Which family answers the task: prompting, retrieval (RAG), fine-tuning, or fine-tuning with retrieval. The
question before any money is spent on training is often "or is RAG enough?"; this answers it on the user's task.

    f = families(df, params, items)     # a Families record, or None where fewer than two families finished

A run's family: a baseline is ``prompt``, or ``rag`` with ``passages``; a variant is ``finetune``, or
``finetune_rag`` with ``passages`` (LoRA + retrieval at test time, or RAFT). Each family's leader is its best run
on the choosing split (validation, as for the verdict); the winner is the best leader there. On the test split, the
winner against every other family's leader: the paired difference with its 95% bootstrap interval and the paired
test of the pairwise table (``recommend.pairwise``: exact McNemar on 0/1 items, else a permutation test),
Holm-adjusted over those comparisons. A family cheaper than the winner (in the order above) takes its place only
when its shortfall is shown within ``verdict.max_loss`` (``bakeoff.decide.rule.shortfall``, Holm over the cheaper
ones), the rule the recommendation keeps. Why it wins is read from the facts: retrieval against no retrieval, and
the recall@k of the passages where the task names its gold documents. Pure arithmetic over the runs' items;
``bakeoff.report`` words it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import pandas as pd

from bakeoff.decide.figures import as_number, choosing_split, prompting_quality
from bakeoff.decide.run_record import rows_of

if TYPE_CHECKING:
    from bakeoff.core.sections import Params

FAMILIES = ("prompt", "rag", "finetune", "finetune_rag")  # cheapest to set up and serve first
RETRIEVING = ("rag", "finetune_rag")
ALPHA = 0.05


def family_of(kind: str, passages: int) -> str:
    if kind == "baseline":
        return "rag" if passages else "prompt"
    return "finetune_rag" if passages else "finetune"


@dataclass(frozen=True)
class Leader:
    family: str
    run: str  # the family's best run on the choosing split
    chosen_by: float  # its figure on the choosing split
    quality: float  # its figure on the test split (the verdict's items)
    recall: float | None = None  # recall@k of its passages, where the task names its gold documents


@dataclass(frozen=True)
class Gap:
    """The winner against one other family's leader, on the test split."""

    family: str
    run: str
    diff: float  # the winner minus this leader
    low: float  # 95% paired bootstrap interval
    high: float
    p: float  # the pairwise table's paired test
    p_holm: float = 1.0  # over the winner's comparisons with the other families
    within: bool = False  # a cheaper family whose shortfall is shown within verdict.max_loss

    @property
    def separated(self) -> bool:
        return self.low > 0 and self.p_holm < ALPHA


@dataclass(frozen=True)
class Families:
    winner: str  # the family whose leader is best on the choosing split
    pick: str  # the winner, or the cheapest family shown within max_loss of it
    chosen_on: str  # validation | test
    leaders: list[Leader] = field(default_factory=list)  # in FAMILIES order
    gaps: list[Gap] = field(default_factory=list)  # the winner against each other leader, in FAMILIES order
    not_run: dict = field(default_factory=dict)  # family → [its run, status, first line of why] where none finished
    margin: float = 0.02
    why: str = ""  # knowledge | behaviour | "" (not read from these runs)

    def leader(self, family: str) -> Leader | None:
        return next((x for x in self.leaders if x.family == family), None)

    def to_dict(self) -> dict:
        return asdict(self)


def _passages(params: Params, name: str) -> int:
    arm = params.baselines.get(name) or params.variants.get(name)
    return int(getattr(arm, "passages", 0) or 0)


def families(df: pd.DataFrame, params: Params, items: dict, pw: pd.DataFrame, resamples: int = 2000) -> Families | None:
    """The family verdict over the finished runs (``items``: each run's primary test items, ``primary_items``;
    ``pw``: the pairwise table, whose paired test each gap takes); None where fewer than two families have a
    finished run, or no run retrieves (nothing to tell apart)."""
    from bakeoff.core.scoring import METRICS

    split = choosing_split(df)
    leaders, not_run = {}, {}
    for r in rows_of(df):
        fam = family_of(r.kind, _passages(params, r.name))
        if r.status != "ok" or not items.get(r.name):
            why = r.error.splitlines()[0] if isinstance(r.error, str) and r.error else ""
            not_run.setdefault(fam, [str(r.name), str(r.status), why])
            continue
        if r.kind == "baseline":
            score, test = prompting_quality(r, split), prompting_quality(r)
        else:
            score, test = as_number(r.val_quality if split == "val" else r.quality), as_number(r.quality)
        recall = r.retrieval_recall
        if fam not in leaders or score > leaders[fam].chosen_by:
            known = isinstance(recall, float) and recall == recall  # NaN where the run retrieved nothing
            leaders[fam] = Leader(fam, str(r.name), score, test, recall if known else None)
    not_run = {f: why for f, why in not_run.items() if f not in leaders}
    if len(leaders) < 2 or not any(f in leaders or f in not_run for f in RETRIEVING):
        return None
    ordered = [leaders[f] for f in FAMILIES if f in leaders]
    top = max(ordered, key=lambda x: (x.chosen_by, -FAMILIES.index(x.family)))
    gaps = _gaps(top, ordered, (items, pw), METRICS[params.task.metric].figure, params.verdict.max_loss, resamples)
    cheaper = [g for g in gaps if g.within and FAMILIES.index(g.family) < FAMILIES.index(top.family)]
    pick = cheaper[0].family if cheaper else top.family
    return Families(
        winner=top.family,
        pick=pick,
        chosen_on="validation" if split == "val" else "test",
        leaders=ordered,
        gaps=gaps,
        not_run={f: not_run[f] for f in FAMILIES if f in not_run},
        margin=params.verdict.max_loss,
        why=_why(top, leaders, gaps),
    )


def _gaps(top: Leader, ordered: list[Leader], tested: tuple, figure, margin: float, resamples: int) -> list[Gap]:
    """``tested``: (each run's items, the pairwise table)."""
    from bakeoff.decide.figures import correctness
    from bakeoff.decide.recommend import p_between
    from bakeoff.decide.rule import shortfall
    from bakeoff.decide.statistics import bootstrap_ci, holm

    items, pw = tested
    mine = items[top.run]
    ids = sorted(mine)
    a = [mine[k] for k in ids]
    raw, falls = [], []
    for x in ordered:
        if x.family == top.family:
            continue
        b = [items[x.run][k] for k in ids]
        diff, lo, hi = bootstrap_ci(a, figure, b, resamples)
        raw.append(Gap(x.family, x.run, diff, lo, hi, p_between(pw, top.run, x.run, "p")))
        if FAMILIES.index(x.family) < FAMILIES.index(top.family):
            cb, ca = [correctness(v) for v in b], [correctness(v) for v in a]
            falls.append((len(raw) - 1, shortfall(cb, ca, margin, x.run, top.run)))
    adjusted = holm([g.p for g in raw]) if raw else []
    within = holm([s.p for _, s in falls]) if falls else []
    shown = {i for (i, _), q in zip(falls, within) if q < ALPHA}
    return [
        Gap(g.family, g.run, g.diff, g.low, g.high, g.p, q, i in shown) for i, (g, q) in enumerate(zip(raw, adjusted))
    ]


def _why(top: Leader, leaders: dict, gaps: list[Gap]) -> str:
    """``knowledge`` where a retrieving family wins and is separated from every family without retrieval (the
    answers are in the documents, not the model); ``behaviour`` where a fine-tune without retrieval wins and is
    separated from every retrieving family (training on the task's answers beats reading the documents); else ""."""
    apart = {g.family: g.separated for g in gaps}
    plain = [f for f in leaders if f not in RETRIEVING]
    retrieving = [f for f in leaders if f in RETRIEVING]
    if top.family in RETRIEVING and plain and all(apart.get(f) for f in plain):
        return "knowledge"
    if top.family == "finetune" and retrieving and all(apart.get(f) for f in retrieving):
        return "behaviour"
    return ""


def from_dict(d: dict | None) -> Families | None:
    """A Families record read back (``Verdict.families``)."""
    if not d:
        return None
    typed = {"leaders": Leader, "gaps": Gap}
    return Families(**{k: [typed[k](**x) for x in v] if k in typed else v for k, v in d.items()})


def summary(f: Families) -> dict:
    """reports/metrics.json's ``families``: the winner, the pick, why, and each leader with its gap to the winner."""
    gaps = {g.family: g for g in f.gaps}
    return {
        "winner": f.winner,
        "pick": f.pick,
        "why": f.why or None,
        "chosen_on": f.chosen_on,
        "leaders": {
            x.family: {
                "run": x.run,
                "quality": round(x.quality, 4),
                **({"retrieval_recall": x.recall} if x.recall is not None else {}),
                **(
                    {
                        "winner_minus": round(gaps[x.family].diff, 4),
                        "ci95": [round(gaps[x.family].low, 4), round(gaps[x.family].high, 4)],
                        "p_holm": round(gaps[x.family].p_holm, 5),
                    }
                    if x.family in gaps
                    else {}
                ),
            }
            for x in f.leaders
        },
        "not_run": f.not_run,
    }

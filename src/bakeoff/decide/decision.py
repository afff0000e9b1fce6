"""The decision the compare stage reports and the export stage ships: every run's figures with intervals, the
verdict, costs, the pairwise tests, rank groups, equivalence and the recommendation.

    d = decide(params, flips_dir)      # a Decision: d.runs, d.verdict (with the recommendation), d.pairwise, ...
    d.picked                           # what `export` ships when the recommendation names a fine-tuned variant

Deterministic (seeded bootstraps), so two stages that call it on the same runs reach the same recommendation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from bakeoff.core import runs
from bakeoff.core.records import BaseModel, DataStats, Provenance, RunRecord, read_run, read_search, read_stats
from bakeoff.core.spaces import as_run
from bakeoff.decide import costs, families, figures, memory, recommend, sizing, verdict
from bakeoff.decide.sizing_record import AllIn, Money, Sizing, Spend
from bakeoff.decide.verdict_record import Recommendation, Verdict

if TYPE_CHECKING:
    from bakeoff.core.sections import Params
    from bakeoff.decide.curve_record import Curve
    from bakeoff.decide.evidence_record import Evidence
    from bakeoff.decide.shipped_record import Shipped


def baselines_as_run(params: Params) -> dict:
    """Each baseline as ``baseline@<name>`` ran it (its search's choice, its space kept): what the diagnosis reads."""
    return {n: as_run(params, n)[0] for n in params.baselines}


@dataclass
class Decision:
    """Everything the compare stage reports and the export stage ships, computed once by ``decide``."""

    runs: pd.DataFrame  # one row per run: its figures, intervals, gains over the best prompt, rank group
    verdict: Verdict  # the verdict, its diagnosis, scope, equivalence and the recommendation
    pairwise: pd.DataFrame  # every pair of runs tested on the same test items
    records: dict[str, RunRecord]  # each variant's training record (runs/<name>/train.json)
    sizing: Sizing  # the memory model's calibration and every fit (reports/sizing.json)
    data_stats: DataStats  # the data stage's record (data/prepared/stats.json)
    budget: dict[str, Spend]  # every arm's search as spent (a shared search split among its users)
    costs: dict[str, AllIn]  # each variant all in on the sizing target, and bought alone
    serving_card: object | None  # the card that would serve the fine-tuned target
    money: Money  # the recommendation's serving cost against prompting, and the break-even
    provenance: Provenance  # data hash, commit, versions, the machine
    curve: Curve | None = None  # the data-value curve (reports/curve.json; compare only: bakeoff.decide.data_value)
    evidence: Evidence | None = None  # where the gain comes from, answers side by side, the prompts (compare only)
    searches: dict = field(default_factory=dict)  # each run's search (runs/<name>/tuned.json), a Search
    evaluations: dict = field(default_factory=dict)  # each run's evaluation record (runs/<name>/eval.json)

    @property
    def picked(self) -> str | None:
        return picked(self.verdict)


def decide(params: Params, flips_dir: Path | None = None, shipped: Shipped | None = None) -> Decision:
    """The verdict's chain, in order: the runs and their intervals, the verdict, sizing and costs, the tests between
    runs, and one recommendation, priced. The compare stage adds the data-value curve and the evidence behind the
    gain (``bakeoff.decide.data_value.with_curve``), which nothing else imports: the curve stages, which train, do
    not depend on the curve's fit."""
    df, v, records, sized, stats = _verdict(params, flips_dir, shipped)
    target = params.sizing.target or (params.sizing.targets[0]["name"] if params.sizing.targets else None)
    priced, spent, card = _priced(params, df, records, sized, target)
    pw, prov, v = _recommend(params, df, v, priced, stats, target)
    rec = picked(v)
    money = verdict.cost(
        df,
        v.with_(variant=rec) if rec else v,
        params.cost.usd_per_1k_prompt_tokens,
        priced,
        card.__dict__ if card else None,
    )
    names = list(df["name"])
    return Decision(
        runs=df,
        verdict=v,
        pairwise=pw,
        records=records,
        sizing=sized,
        data_stats=stats,
        budget=spent,
        costs=priced,
        serving_card=card,
        money=Money.from_dict(money),
        provenance=prov,
        searches=search_records(names),
        evaluations=eval_records(names),
    )


def search_records(names) -> dict:
    """Each run's search record (``runs/<name>/tuned.json``, a ``bakeoff.core.records.Search``; ``Search()`` where it
    has none): what the report says of it."""
    return {n: read_search(n) for n in names}


def eval_records(names) -> dict[str, RunRecord]:
    """Each run's evaluation record (``runs/<name>/eval.json``; empty where it has none)."""
    return {n: read_run(runs.eval_record(n)) for n in names}


def _verdict(params: Params, flips_dir, shipped):
    """The runs, their intervals and gains over the best prompting baseline, the verdict and its diagnosis."""
    df = figures.collect(list(params.baselines), list(params.variants))
    figures.use_interleaved(df, shipped.latency_interleaved if shipped else None)  # the export's latencies, one process
    figures.add_confidence(df, params.task.metric, params.eval.bootstrap_resamples, flips_dir)
    parents = {n: x.parent for n, x in params.variants.items() if x.parent}
    unmoved = verdict.did_not_move(df, parents)  # a derived run equal to its parent is said so, not "converged"
    records = {n: read_run(runs.train_record(n)) for n in params.variants}
    stats = read_stats()
    sized = Sizing.from_dict(
        sizing.report_data(
            params, json.loads((runs.BASE / "config.json").read_text()), records, sizing.longest_answer(stats)
        )
    )
    v = verdict.verdict(df, params.verdict.min_gain)
    # the runs that did not move are placed with the recommendation's keys by _recommend
    v = v.with_(diagnosis=verdict.diagnose(df, baselines_as_run(params), stats.labels), unmoved=unmoved)
    return df, v, records, sized, stats


def _priced(params: Params, df, records, sized, target):
    """Every arm's search budget as spent (a shared search split among its users), each variant all in, and the card
    that would serve the fine-tuned target."""
    parents = {n: x.parent for n, x in params.variants.items() if x.parent}
    fits = {f.variant: f for f in sized.fits if f.target == target}
    idle = set(df.loc[df["status"].isin(["skipped", "missing"]), "name"])
    spent = costs.budget(list(params.baselines) + list(params.variants), idle)
    seen = {n: ((r.metrics or {}).get("tokens_seen") or 0) for n, r in records.items()}
    priced = {n: c for n in params.variants if (c := costs.all_in(n, fits, spent, seen, parents))}
    shape = next((t for t in sizing.targets(params) if t.name == target), None)
    card = (
        costs.serving_card(
            shape,
            sizing.catalog(params),
            params.sizing.margin,
            params.sizing.cuda_overhead_gb * memory.GB,
            params.cost.serve_gpu,
        )
        if shape
        else None
    )
    return priced, spent, card


def _recommend(params: Params, df, v, priced, stats, target):
    """Which differences are real: every pair tested, runs grouped (a display), one thing to do by the one rule
    (``bakeoff.decide.rule``, written into ``v``); returns the pairwise table and the provenance."""
    pw = recommend.pairwise(df, params.task.metric)
    groups = recommend.rank_groups(df, pw)
    df["rank_group"] = df["name"].map({n: chr(65 + i) for i, g in enumerate(groups) for n in g})
    prov = Provenance.from_dict(runs.provenance(stats.data_hash, runs.BASE))
    src = prov.base_model or BaseModel()
    scope = {
        "model": src.name or params.model.base,
        "split": "test",
        "n": int(df["n_test"].max()) if "n_test" in df and df["n_test"].notna().any() else 0,
        "machine": runs.measured_on(list(params.baselines) + list(params.variants), prov.device),
        "target": target,
    }
    v = v.without("unmoved").with_(
        rank_groups=recommend.group_line(groups),
        alpha=recommend.ALPHA,
        scope=scope,
        unmoved=v.unmoved,
        recommendation=recommend.recommend(df, v, priced, params.verdict.max_loss),
    )
    fam = families.families(df, params, figures.primary_items(df), pw, params.eval.bootstrap_resamples)
    return pw, prov, v.with_(families=fam.to_dict()) if fam else v


def picked(v: Verdict) -> str | None:
    """The fine-tuned variant the recommendation names: its pick, or the leading variant of an inconclusive one
    (shipped so it can be tried; the report says the decision is open). None when it recommends prompting."""
    rec = v.recommendation or Recommendation()
    if rec.action == "inconclusive":
        return rec.run if rec.kind == "variant" else None
    return rec.run if rec.action == "fine-tune" else None


def curve_arm(params: Params, arm: str) -> tuple[str | None, str]:
    """The run a data-value curve arm (``curve.arms``) names, and how it was chosen (None: no such run finished;
    ``bakeoff.report.curve.CHOSEN_AS`` words it): ``recommended``, the recommended variant (``best_variant``, the best
    fine-tuned one chosen on validation, when the recommendation is not to fine-tune); ``best_prompt``, the best
    prompting baseline, chosen on validation; else the run named (``named``)."""
    if arm == "best_prompt":
        return figures.best_baseline(figures.collect(list(params.baselines), list(params.variants))), "best_prompt"
    if arm != "recommended":
        return arm, "named"
    try:  # no decision to read (a record missing or broken): the point's status, never the pipeline's end
        d = decide(params)
    except Exception as e:
        return None, f"no_recommendation ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
    if d.picked:
        return d.picked, "recommended"
    return d.verdict.variant, "best_variant"  # the recommendation is not to fine-tune

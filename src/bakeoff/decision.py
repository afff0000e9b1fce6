"""The decision the compare stage reports and the export stage ships: every run's figures with intervals, the
verdict, costs, the pairwise tests, rank groups, equivalence and the recommendation.

    d = decide(params, flips_dir)      # d.df, d.v (verdict + recommendation), d.pw, d.costs, d.card, ...
    d.v["recommendation"]["run"]       # what `export` ships when it names a fine-tuned variant

Deterministic (seeded bootstraps), so two stages that call it on the same runs reach the same recommendation.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from bakeoff import costs as costs_, ranking, runs, sizing, verdict
from bakeoff.tune import as_run


def baselines_as_run(params) -> dict:
    """Each baseline as ``baseline@<name>`` ran it (its search's choice, its space kept): what the diagnosis reads."""
    return {n: as_run(params, n)[0] for n in params.baselines}


def decide(params, flips_dir: Path | None = None, shipped: dict | None = None) -> SimpleNamespace:
    # long: the verdict's chain, in order
    # the runs, their intervals and gains over the best prompting baseline, the verdict and its cost
    df = verdict.collect(list(params.baselines), list(params.variants))
    verdict.use_interleaved(df, (shipped or {}).get("latency_interleaved"))  # the export's latencies, one process
    verdict.add_confidence(df, params.task.metric, params.eval.bootstrap_resamples, flips_dir)
    parents = {n: x.parent for n, x in params.variants.items() if x.parent}
    unmoved = verdict.did_not_move(df, parents)  # a derived run equal to its parent is said so, not "converged"
    records = {n: runs.read_json(runs.train_record(n)) or {} for n in params.variants}
    sized = sizing.report_data(params, json.loads((runs.BASE / "config.json").read_text()), records)
    v = verdict.verdict(df, params.verdict.min_gain)
    stats = runs.read_json(runs.PREPARED / "stats.json") or {}
    v["diagnosis"] = verdict.diagnose(df, baselines_as_run(params), stats.get("labels"))
    target = params.sizing.target or (params.sizing.targets[0]["name"] if params.sizing.targets else None)
    fits = {f["variant"]: f for f in sized["fits"] if f["target"] == target}
    # every arm's search budget as spent (a shared search split among its users), and each variant all in
    idle = set(df.loc[df["status"].isin(["skipped", "missing"]), "name"])
    spent = costs_.budget(list(params.baselines) + list(params.variants), idle)
    seen = {n: ((r.get("metrics") or {}).get("tokens_seen") or 0) for n, r in records.items()}
    costs = {n: c for n in params.variants if (c := costs_.all_in(n, fits, spent, seen, parents))}
    shape = next((t for t in sizing.targets(params) if t.name == target), None)
    card = costs_.serving_card(shape, sizing.catalog(params), params.sizing.margin,
                               params.sizing.cuda_overhead_gb * sizing.GB, params.cost.serve_gpu) if shape else None
    # which differences are real: every pair tested, runs grouped, equivalence where shown, one thing to do
    pw = ranking.pairwise(df, params.task.metric)
    groups = ranking.rank_groups(df, pw)
    df["rank_group"] = df["name"].map({n: chr(65 + i) for i, g in enumerate(groups) for n in g})
    eq = ranking.equivalence(df, groups, params.verdict.min_gain)
    prov = runs.provenance(stats, runs.BASE)
    src = prov.get("base_model") or {}
    scope = {"model": src.get("alias") or src.get("source") or params.model.base, "split": "test",
             "n": int(df["n_test"].max()) if "n_test" in df and df["n_test"].notna().any() else 0,
             "machine": runs.measured_on(list(params.baselines) + list(params.variants), prov["device"]),
             "target": target}
    v.update(rank_groups=ranking.group_line(groups), alpha=ranking.ALPHA, scope=scope, equivalence=eq, unmoved=unmoved,
             recommendation=ranking.recommend(df, v, groups, costs, eq, scope, params.verdict.min_gain))
    return SimpleNamespace(df=df, v=v, records=records, sized=sized, stats=stats, spent=spent, costs=costs,
                           card=card, pw=pw, prov=prov)


def picked(v: dict) -> str | None:
    """The fine-tuned variant the recommendation names (None when it recommends prompting or is inconclusive)."""
    rec = v.get("recommendation") or {}
    return rec.get("run") if rec.get("action") == "fine-tune" else None

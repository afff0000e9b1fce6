"""Stage `compare`: the verdict, the table with intervals, GPU sizing, plots and one self-contained page.

    python stages/compare.py reports

Writes reports/comparison.{md,csv,html}, reports/metrics.json (DVC metrics), reports/sizing.json,
reports/plots/*.png (DVC plots), reports/flips/<variant>.jsonl, and a summary MLflow run holding them all.
"""

import json
import sys
from pathlib import Path

from bakeoff import ranking, report, runs, sizing, tracking, verdict
from bakeoff.config import load_params
from bakeoff.errors import cli
from bakeoff.tune import as_run


def baselines_as_run(params) -> dict:
    """Each baseline as ``baseline@<name>`` ran it (its search's choice, its space kept): what the diagnosis reads."""
    return {n: as_run(params, n)[0] for n in params.baselines}


@cli
def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "reports")
    params = load_params()
    # the runs, their intervals and gains over the best prompting baseline, the verdict and its cost
    df = verdict.collect(list(params.baselines), list(params.variants))
    verdict.add_confidence(df, params.task.metric, params.eval.bootstrap_resamples, runs.fresh_dir(out / "flips"))
    records = {n: runs.read_json(runs.train_record(n)) or {} for n in params.variants}
    sized = sizing.report_data(params, json.loads((runs.BASE / "config.json").read_text()), records)
    v = verdict.verdict(df, params.verdict.min_gain)
    stats = runs.read_json(runs.PREPARED / "stats.json") or {}
    v["diagnosis"] = verdict.diagnose(df, baselines_as_run(params), stats.get("labels"))
    target = params.sizing.target or (params.sizing.targets[0]["name"] if params.sizing.targets else None)
    fits = {f["variant"]: f for f in sized["fits"] if f["target"] == target}
    parent = params.variants[v["variant"]].parent if v.get("variant") else None
    c = verdict.cost(df, v, params.cost.usd_per_1k_prompt_tokens, fits.get(v.get("variant")), fits.get(parent))
    # which differences are real: every pair tested, runs grouped, one thing to do
    pw = ranking.pairwise(df, params.task.metric)
    groups = ranking.rank_groups(df, pw)
    df["rank_group"] = df["name"].map({n: chr(65 + i) for i, g in enumerate(groups) for n in g})
    v.update(rank_groups=ranking.group_line(groups), alpha=ranking.ALPHA,
             recommendation=ranking.recommend(df, v, groups, fits))
    # the files, then the summary run that holds them
    histories = {n: r.get("history") or [] for n, r in records.items()}
    images = report.plots(df, histories, runs.fresh_dir(out / "plots"), params.task.metric, pw)
    paths = report.write_all(out, df, params, v, c, sized, runs.provenance(stats, runs.BASE), images, stats, pw)
    tracking.summary_run(params, list(df["name"]),
                         tags={"verdict": v["decision"], "best_variant": v.get("variant", ""),
                               "best_baseline": v.get("baseline", ""), "winners_chosen_on": v.get("chosen_on", ""),
                               "rank_groups": v["rank_groups"],
                               "recommendation": (v["recommendation"] or {}).get("line", "")},
                         metrics={k: v[k] for k in ("gain", "ci_low", "ci_high") if k in v},
                         files=list(paths.values()), folders={"plots": out / "plots", "flips": out / "flips"},
                         tables={"pairwise.json": pw})
    print(paths["md"].read_text())


if __name__ == "__main__":
    main()

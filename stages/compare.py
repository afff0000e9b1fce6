"""Stage `compare`: the verdict, the table with intervals, GPU sizing, plots and one self-contained page.

    python stages/compare.py reports

Writes reports/comparison.{md,csv,html}, reports/metrics.json (DVC metrics), reports/sizing.json,
reports/plots/*.png (DVC plots), reports/flips/<variant>.jsonl, and a summary MLflow run holding them all.
"""

import json
import sys
from pathlib import Path

from bakeoff import costs as costs_, ranking, report, runs, sizing, tracking, verdict
from bakeoff.config import load_params
from bakeoff.errors import cli
from bakeoff.tune import as_run


def baselines_as_run(params) -> dict:
    """Each baseline as ``baseline@<name>`` ran it (its search's choice, its space kept): what the diagnosis reads."""
    return {n: as_run(params, n)[0] for n in params.baselines}


def champion_of(params, rec: dict) -> dict | None:
    """Register the recommended run (its weights or adapter, its records, params.yaml) as the champion."""
    name = rec.get("run")
    ev = runs.read_json(runs.eval_record(name)) if name else None
    if not ev or not ev.get("run_id"):
        return None
    files = {p.name: p for p in (runs.eval_record(name), runs.train_record(name), runs.tuned_record(name),
                                 runs.predictions(name), Path("params.yaml")) if p.exists()}
    folder = runs.variant_dir(name) if name in params.variants and runs.variant_dir(name).exists() else None
    try:  # a store without a model registry, or a failed upload, leaves the report and the runs as they are
        return tracking.register_champion(params, ev["run_id"], files, folder)
    except Exception as e:  # noqa: BLE001
        print(f"MLflow: the champion was not registered ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
        return None


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
    # every arm's search budget as spent (a shared search split among its users), and each variant all in
    idle = set(df.loc[df["status"].isin(["skipped", "missing"]), "name"])
    spent = costs_.budget(list(params.baselines) + list(params.variants), idle)
    seen = {n: ((r.get("metrics") or {}).get("tokens_seen") or 0) for n, r in records.items()}
    parents = {n: x.parent for n, x in params.variants.items() if x.parent}
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
             "machine": prov["device"], "target": target}
    v.update(rank_groups=ranking.group_line(groups), alpha=ranking.ALPHA, scope=scope, equivalence=eq,
             recommendation=ranking.recommend(df, v, groups, costs, eq, scope, params.verdict.min_gain))
    # the money follows the recommendation: the variant it names, served on its card, against the best prompting
    picked = v["recommendation"].get("run") if (v["recommendation"] or {}).get("action") == "fine-tune" else None
    c = verdict.cost(df, {**v, **({"variant": picked} if picked else {})}, params.cost.usd_per_1k_prompt_tokens, costs,
                     card.__dict__ if card else None)
    # the files, then the repro's parent run that holds them, every current arm nested under it, the champion
    histories = {n: r.get("history") or [] for n, r in records.items()}
    images = report.plots(df, histories, runs.fresh_dir(out / "plots"), params.task.metric, pw)
    extra = {"budget": spent, "costs": costs, "serve_card": card.__dict__ if card else None}
    paths = report.write_all(out, df, params, v, c, sized, prov, images, stats, pw, extra)
    names = list(df["name"])
    parent = tracking.summary_run(params, names,
                                  tags={"verdict": v["decision"], "best_variant": v.get("variant", ""),
                                        "best_baseline": v.get("baseline", ""),
                                        "winners_chosen_on": v.get("chosen_on", ""), "rank_groups": v["rank_groups"],
                                        "recommendation": (v["recommendation"] or {}).get("line", "")},
                                  metrics={k: v[k] for k in ("gain", "ci_low", "ci_high") if k in v},
                                  files=list(paths.values()), folders={"plots": out / "plots", "flips": out / "flips"},
                                  tables={"pairwise.json": pw})
    nested = tracking.nest_repro(params, parent, names)
    print(f"MLflow: repro run {parent}: {nested['current']} current runs under it, {nested['superseded']} newly "
          "tagged superseded")
    champion = champion_of(params, v.get("recommendation") or {})
    if champion:
        print(f"MLflow: models:/{champion['name']}@champion → version {champion['version']} ({champion['source']})")
    print(paths["md"].read_text())


if __name__ == "__main__":
    main()

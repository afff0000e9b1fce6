"""Stage `compare`: the verdict, the table with intervals, GPU sizing, plots and one self-contained page.

    python stages/compare.py reports

Writes reports/comparison.{md,csv,html}, reports/metrics.json (DVC metrics), reports/sizing.json,
reports/plots/*.png (DVC plots), reports/flips/<variant>.jsonl, and a summary MLflow run holding them all.
"""

import json
import sys
from pathlib import Path

from bakeoff import VERBOSE, decision, report, runs, tracking, verdict
from bakeoff.config import load_params
from bakeoff.errors import cli


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
    shipped = runs.read_json(out / "shipped.json")
    d = decision.decide(params, runs.fresh_dir(out / "flips"), shipped)
    df, v, pw, card, costs = d.df, d.v, d.pw, d.card, d.costs
    # the money follows the recommendation: the variant it names, served on its card, against the best prompting
    picked = decision.picked(v)
    c = verdict.cost(df, {**v, **({"variant": picked} if picked else {})}, params.cost.usd_per_1k_prompt_tokens, costs,
                     card.__dict__ if card else None)
    # the files, then the repro's parent run that holds them, every current arm nested under it, the champion
    histories = {n: r.get("history") or [] for n, r in d.records.items()}
    images = report.plots(df, histories, runs.fresh_dir(out / "plots"), params.task.metric, pw)
    extra = {"budget": d.spent, "costs": costs, "serve_card": card.__dict__ if card else None,
             "shipped": shipped}
    paths = report.write_all(out, df, params, v, c, d.sized, d.prov, images, d.stats, pw, extra)
    names = list(df["name"])
    parent = tracking.summary_run(params, names,
                                  tags={"verdict": v["decision"], "best_variant": v.get("variant", ""),
                                        "best_baseline": v.get("baseline", ""),
                                        "winners_chosen_on": v.get("chosen_on", ""), "rank_groups": v["rank_groups"],
                                        "recommendation": (v["recommendation"] or {}).get("line", ""),
                                        "quick_look": str(bool(params.verdict.quick_look)).lower()},
                                  metrics={k: v[k] for k in ("gain", "ci_low", "ci_high") if k in v},
                                  files=list(paths.values()), folders={"plots": out / "plots", "flips": out / "flips"},
                                  tables={"pairwise.json": pw})
    nested = tracking.nest_repro(params, parent, names)
    print(f"MLflow: repro run {parent}: {nested['current']} current runs under it, {nested['superseded']} newly "
          "tagged superseded")
    champion = champion_of(params, v.get("recommendation") or {})
    if champion:
        print(f"MLflow: models:/{champion['name']}@champion → version {champion['version']} ({champion['source']})")
    md = paths["md"].read_text()
    if VERBOSE:
        print(md)
        return
    # the verdict and the recommendation, then where the rest is
    after = md.split("## Verdict", 1)[-1].split("\n## ", 1)[0]
    paragraphs = [p.strip() for p in after.split("\n\n") if p.strip()]
    for p in paragraphs[:2]:
        print(f"[compare] {p}")
    print(f"[compare] the report: {paths['md']} ({paths['html']}: one page, plots inline)")


if __name__ == "__main__":
    main()

"""Stage `compare`: the verdict, the table with intervals, GPU sizing, plots and one self-contained page.

    python stages/compare.py reports

Writes reports/comparison.{md,csv,html}, reports/metrics.json (DVC metrics), reports/sizing.json,
reports/plots/*.png (DVC plots), reports/flips/<variant>.jsonl, and a summary MLflow run holding them all.
"""

import json
import sys
from pathlib import Path

import mlflow

from bakeoff import report, runs, sizing, tracking
from bakeoff.config import load_params
from bakeoff.errors import cli
from bakeoff.runs import fresh_dir

BASE = Path("models/base")


def sizing_section(params, df) -> tuple[list[str], dict]:
    """The memory model's error on this run's peaks, and the table for the target shapes."""
    records = {n: runs.read_json(runs.train_record(n)) or {} for n in params.variants}
    calib = sizing.calibration(params, json.loads((BASE / "config.json").read_text()), records)
    tokens = {n: params.cost.train_tokens or ((r.get("metrics") or {}).get("tokens_seen") or 0.0)
              for n, r in records.items()}
    fits = sizing.table(params, tokens)
    lines = ["## GPU sizing", "",
             "Memory model (`src/bakeoff/sizing.py`): weights by dtype, gradients, optimizer state, activations and "
             "a fixed overhead, calibrated on this run's measured peaks:", "",
             "| variant | technique | tokens/row | model GB | + overhead = predicted GB | measured GB | error |",
             "|---|---|---|---|---|---|---|"]
    for r in calib["rows"]:
        lines.append(f"| {r['variant']} | {r['technique']} | {r['seq_len']} | {r['model_gb']:.2f} | "
                     f"{r['predicted_gb']:.2f} | {r['measured_gb']:.2f} | {r['error']:+.1%} |")
    if calib["rows"]:
        lines += ["", f"Fitted overhead {calib['overhead_gb']:.2f} GB (the runtime besides tensors); mean absolute "
                      f"error {calib['mean_abs_error']:.1%}."]
    tok = f"{params.cost.train_tokens:,.0f} training tokens (cost.train_tokens)" if params.cost.train_tokens \
        else "the tokens each variant saw here"
    seq = params.sizing.seq_len or "each variant's max_seq_len"
    mb = params.sizing.micro_batch or "each variant's micro_batch"
    lines += ["", f"Projected to the target shapes at {seq} tokens per row, micro-batch {mb}, "
                  f"{params.sizing.margin:.0%} of each card kept free; hours and dollars for {tok} at an assumed "
                  f"{params.sizing.mfu:.0%} MFU (estimates, not measurements):", "", *sizing.markdown(fits), ""]
    return lines, {"calibration": calib, "fits": [f.__dict__ for f in fits]}


@cli
def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "reports")
    params = load_params()
    metric = params.task.metric
    df = report.collect(list(params.baselines), list(params.variants))
    report.add_confidence(df, metric, params.eval.bootstrap_resamples, fresh_dir(out / "flips"))
    size_lines, size_json = sizing_section(params, df)
    v = report.verdict(df, params.verdict.min_gain)
    target = params.sizing.target or (params.sizing.targets[0]["name"] if params.sizing.targets else None)
    fit = next((f for f in size_json["fits"] if f["target"] == target and f["variant"] == v.get("variant")), None)
    c = report.cost(df, v, params.cost.usd_per_1k_prompt_tokens, fit)
    histories = {n: (runs.read_json(runs.train_record(n)) or {}).get("history") or [] for n in params.variants}
    images = report.plots(df, histories, fresh_dir(out / "plots"), metric)
    prov = report.provenance(Path("data/prepared/stats.json"))
    paths = report.write(df, metric, out, head=report.verdict_lines(v, c),
                         tail=size_lines + report.forgetting(list(df["name"])) + report.provenance_lines(prov))
    metrics = json.loads(paths["json"].read_text())
    metrics["provenance"] = prov
    metrics["verdict"] = {k: v[k] for k in ("decision", "gain", "ci_low", "ci_high", "min_gain", "variant", "baseline")
                          if k in v}
    paths["json"].write_text(json.dumps(metrics, indent=2))
    paths["sizing"] = out / "sizing.json"
    paths["sizing"].write_text(json.dumps({**size_json, "verdict": v, "cost": c}, indent=2, default=str))
    paths["html"] = out / "comparison.html"
    paths["html"].write_text(report.html(paths["md"].read_text(), images))
    with tracking.run(params, "comparison", "summary", "-", {"runs": list(df["name"])}):
        mlflow.set_tags({"verdict": v["decision"], "best_variant": v.get("variant", ""),
                         "best_baseline": v.get("baseline", "")})
        tracking.log_metrics({k: v[k] for k in ("gain", "ci_low", "ci_high") if k in v})
        for p in paths.values():
            mlflow.log_artifact(str(p))
        mlflow.log_artifacts(str(out / "plots"), "plots")
        mlflow.log_artifacts(str(out / "flips"), "flips")
    print(paths["md"].read_text())


if __name__ == "__main__":
    main()

"""The CPU ladder: every default variant's training tokens/s and peak memory on the default model, with the
memory model's prediction beside each measurement.

    python benchmarks/ladder.py          # reads runs/<variant>/train.json, written by `dvc repro`

The figures are the pipeline's own measurements (``bakeoff.core.measure``: steady-state non-padding tokens/s, peak
RSS of the training window) from the last `dvc repro` on this machine; the prediction is ``bakeoff.decide.sizing``'s
estimate for the same shape, micro-batch and measured tokens per row, plus the overhead fitted on these runs.
Writes reports/bench/ladder.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "ladder.json"))
    args = ap.parse_args()
    from bakeoff.core.config import load_params
    from bakeoff.decide.sizing import calibration

    params = load_params(ROOT / "params.yaml")
    records = {}
    for name in params.variants:
        path = ROOT / "runs" / name / "train.json"
        records[name] = json.loads(path.read_text()) if path.exists() else {"status": "missing"}
    calib = calibration(
        params,
        json.loads((ROOT / "models" / "base" / "config.json").read_text())
        if (ROOT / "models" / "base" / "config.json").exists()
        else json.loads((ROOT / "tests" / "data" / "smollm2_135m_config.json").read_text()),
        records,
    )
    predicted = {r["variant"]: r for r in calib["rows"]}
    rows = []
    for name, rec in records.items():
        m = rec.get("metrics") or {}
        p = predicted.get(name, {})
        rows.append(
            {
                "variant": name,
                "status": rec.get("status"),
                "technique": rec.get("technique"),
                "train_tokens_per_s": m.get("train_tokens_per_s"),
                "train_step_s_median": m.get("train_step_s_median"),
                "train_peak_rss_mb": m.get("train_peak_rss_mb"),
                "measured_gb": p.get("measured_gb"),
                "predicted_gb": p.get("predicted_gb"),
                "error": p.get("error"),
                "micro_batch": m.get("micro_batch"),
                "padding_share": m.get("padding_share"),
            }
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"overhead_gb": calib["overhead_gb"], "mean_abs_error": calib["mean_abs_error"], "rows": rows}, indent=2
        )
    )
    fmt = lambda v, f: "–" if v is None else f.format(v)
    print("\n## CPU ladder (default model, measured by the last `dvc repro`)\n")
    print("| variant | status | train tok/s | step s | peak RSS GB | model predicts GB | error | padding |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['variant']} | {r['status']} | {fmt(r['train_tokens_per_s'], '{:.0f}')} | "
            f"{fmt(r['train_step_s_median'], '{:.2f}')} | {fmt(r['measured_gb'], '{:.2f}')} | "
            f"{fmt(r['predicted_gb'], '{:.2f}')} | {fmt(r['error'], '{:+.1%}')} | "
            f"{fmt(r['padding_share'], '{:.1%}')} |"
        )
    print(
        f"\nfitted overhead {calib['overhead_gb']} GB; mean absolute error "
        f"{fmt(calib['mean_abs_error'], '{:.1%}')}\nwrote {out}"
    )


if __name__ == "__main__":
    main()

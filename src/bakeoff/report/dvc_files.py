"""What DVC shows of a run: one flat file of numbers per arm (``dvc metrics show``, ``dvc exp show``) and the data
behind ``dvc plots show`` and ``dvc plots diff`` (dvc.yaml's top-level ``plots:``, templates in configs/dvc_plots/).

    reports/arms/<arm>.json   ok (1: it ran; 0: skipped or failed, the report says why), quality and its 95% interval
                              on the test split, gain over the best prompt and its interval's low end (variants),
                              train_s, eval_s, peak_mb (measured on this machine), usd_target (projected: all in on
                              the sizing target's card)
    reports/dvc/loss.csv      arm, split (train, validation), step, loss: every logged step of every trained arm
    reports/dvc/quality.csv   arm, quality, ci_low, ci_high
    reports/dvc/curve.csv     arm, rows, quality: the data-value curve's measured points

Every other record (the runs' records, reports/metrics.json) is an ``outs:`` record: what the report reads, not a
column of ``dvc metrics show``. The runs' records (runs/<arm>/{tuned,train,eval}.json, reports/shipped.json) are
cached outs, so DVC's run-cache keeps their stages; git cannot track a cached out, so ``records`` copies them to
reports/records/ (an uncached out of compare, committed): a clone without the DVC cache still reads every record.
Each number is the one the report prints (``bakeoff.decide.figures``); a figure a run does not have is left out (DVC
shows "-").
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core.records import RunRecord
from bakeoff.decide.run_record import rows_of
from bakeoff.decide.sizing_record import AllIn

if TYPE_CHECKING:
    from bakeoff.decide.curve_record import Curve

ARMS_DIR, PLOTS_DIR, RECORDS_DIR = "arms", "dvc", "records"
# name in the metrics file → the run table's column (bakeoff.decide.figures)
COLUMNS = {
    "quality": "quality",
    "ci_low": "quality_ci_low",
    "ci_high": "quality_ci_high",
    "gain": "gain",
    "gain_ci_low": "gain_ci_low",
    "train_s": "train_wall_s",
    "eval_s": "gen_wall_s",
}
PEAKS = ("train_peak_reserved_mb", "train_peak_rss_mb", "eval_peak_rss_mb")  # the training peak, else evaluation's


def _number(x) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else round(f, 4)


def arm_metrics(runs, costs: dict[str, AllIn] | None) -> dict[str, dict]:
    """Per arm, the numbers ``dvc metrics show`` lists (at most ten, flat)."""
    out = {}
    for r in rows_of(runs):
        m = {"ok": 1 if r.status == "ok" else 0}
        for name, col in COLUMNS.items():
            if (x := _number(r.get(col))) is not None:
                m[name] = x
        peak = next((x for c in PEAKS if (x := _number(r.get(c))) is not None), None)
        if peak is not None:
            m["peak_mb"] = peak
        usd = _number(((costs or {}).get(r.name) or AllIn()).usd)
        if usd is not None:
            m["usd_target"] = round(usd, 2)
        out[r.name] = m
    return out


def _csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def write(
    out_dir: Path, runs, records: dict[str, RunRecord], costs: dict[str, AllIn] | None, curve: Curve | None
) -> dict[str, Path]:
    """reports/arms/<arm>.json and reports/dvc/*.csv (each folder emptied first: an arm removed from params.yaml
    leaves no file behind); returns the paths."""
    arms, plots = out_dir / ARMS_DIR, out_dir / PLOTS_DIR
    for folder in (arms, plots):
        folder.mkdir(parents=True, exist_ok=True)
        for old in folder.iterdir():
            old.unlink()
    paths = {}
    for name, m in arm_metrics(runs, costs).items():
        paths[f"arm:{name}"] = arms / f"{name}.json"
        paths[f"arm:{name}"].write_text(json.dumps(m, indent=2) + "\n")
    loss = [
        [name, split, p.step, round(float(p.loss), 5)]
        for name, rec in sorted(records.items())
        for split, key in (("train", "history"), ("validation", "val_curve"))
        for p in (rec[key] if rec else None) or []
        if p.loss is not None
    ]
    paths["loss"] = _csv(plots / "loss.csv", ["arm", "split", "step", "loss"], loss)
    quality = [
        [r.name, *(_number(r.get(c)) for c in ("quality", "quality_ci_low", "quality_ci_high"))]
        for r in rows_of(runs)
        if r.status == "ok"
    ]
    paths["quality"] = _csv(plots / "quality.csv", ["arm", "quality", "ci_low", "ci_high"], quality)
    points = [
        [f"{role}: {a.run}", rows, q]
        for role, a in ((curve.arms if curve else None) or {}).items()
        for rows, q in zip(a.rows or [], a.quality or [])
    ]
    paths["curve"] = _csv(plots / "curve.csv", ["arm", "rows", "quality"], points)
    return paths


def records(out_dir: Path, runs_dir: Path, shipped: Path | None = None) -> Path:
    """Copy each arm's records (runs/<arm>/*.json) and the export's checks into reports/records/, emptied first."""
    dest = out_dir / RECORDS_DIR
    shutil.rmtree(dest, ignore_errors=True)
    for src in sorted(runs_dir.glob("*/*.json")):
        (dest / src.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / src.parent.name / src.name)
    if shipped is not None and shipped.is_file():
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copy2(shipped, dest / shipped.name)
    return dest

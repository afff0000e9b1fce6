"""The report: what the ``compare`` stage writes, from the verdict's results (presentation only).

    reports/comparison.md, .csv   the table with intervals, the verdict, sizing, provenance   (tables.py)
    reports/metrics.json          DVC metrics: every run's figures, the verdict, provenance     (tables.py)
    reports/sizing.json           the memory model's calibration and every fit                  (here)
    reports/plots/*.png           quality against memory and time, loss curves, quality bars    (plots.py)
    reports/comparison.html       the whole report on one self-contained page                   (html.py)
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from bakeoff.report.html import html
from bakeoff.report.plots import pareto, plots
from bakeoff.report.tables import (forgetting, markdown, metrics_json, pairwise_lines, provenance_lines,
                                   sizing_lines, verdict_lines, write)

__all__ = ["forgetting", "html", "markdown", "metrics_json", "pairwise_lines", "pareto", "plots", "provenance_lines", "sizing_lines",
           "verdict_lines", "write", "write_all"]

VERDICT_KEYS = ("decision", "gain", "ci_low", "ci_high", "min_gain", "variant", "baseline", "rank_groups",
                "recommendation")


def warning_lines(stats: dict) -> list[str]:
    """What the data stage found that makes figures mislead: a generation budget that cuts reference answers."""
    warning = (stats.get("generation") or {}).get("warning")
    return [f"> **Warning:** {warning}.", ""] if warning else []


def write_all(out_dir: Path, df: pd.DataFrame, params, v: dict, c: dict, sized: dict, prov: dict,
              images: dict[str, Path], stats: dict | None = None, pw: pd.DataFrame | None = None) -> dict[str, Path]:
    """Every report file, each written once; returns their paths (for the summary MLflow run)."""
    tail = pairwise_lines(pw) + sizing_lines(params, sized) + forgetting(list(df["name"]), df) + provenance_lines(prov)
    extra = {"provenance": prov, "verdict": {k: v[k] for k in VERDICT_KEYS if k in v}}
    head = warning_lines(stats or {}) + verdict_lines(v, c)
    paths = write(df, params.task.metric, out_dir, head=head, tail=tail, extra=extra)
    if pw is not None:
        paths["pairwise"] = out_dir / "pairwise.csv"
        pw.to_csv(paths["pairwise"], index=False)
    paths["sizing"] = out_dir / "sizing.json"
    paths["sizing"].write_text(json.dumps({**sized, "verdict": v, "cost": c}, indent=2, default=str))
    paths["html"] = out_dir / "comparison.html"
    paths["html"].write_text(html(paths["md"].read_text(), images))
    return paths

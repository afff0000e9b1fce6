"""The comparison: one row per baseline and variant, as Markdown, CSV and DVC metrics."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bakeoff import runs

# column → (header, format) for the Markdown table; every figure is defined in measure.py or evaluate.py
COLUMNS = {
    "name": ("run", "{}"), "kind": ("kind", "{}"), "technique": ("technique", "{}"), "status": ("status", "{}"),
    "quality": ("quality", "{:.1%}"), "val_loss": ("val loss", "{:.3f}"),
    "train_tokens_per_s": ("train tok/s", "{:.0f}"), "train_step_s_median": ("step s (median)", "{:.2f}"),
    "train_wall_s": ("train wall s", "{:.0f}"), "train_peak_rss_mb": ("train peak RSS MB", "{:.0f}"),
    "train_peak_allocated_mb": ("train peak alloc MB", "{:.0f}"),
    "train_peak_reserved_mb": ("train peak reserved MB", "{:.0f}"),
    "trainable_params": ("trainable params", "{:,.0f}"), "adapter_mb": ("saved MB", "{:.1f}"),
    "effective_batch": ("eff. batch", "{:.0f}"), "batch_split": ("micro × accum", "{}"),
    "tokens_seen": ("tokens seen", "{:,.0f}"),
    "precision": ("precision", "{}"),
    "gen_tokens_per_s": ("gen tok/s", "{:.1f}"), "prompt_tokens_per_request": ("prompt tok/req", "{:.0f}"),
    "eval_peak_rss_mb": ("eval peak RSS MB", "{:.0f}"),
}


def collect(baselines: list[str], variants: list[str]) -> pd.DataFrame:
    """One row per run from its records; a run with no record yet shows as `missing`."""
    rows = []
    for name in baselines + variants:
        ev = runs.read_json(runs.eval_record(name)) or {}
        tr = (runs.read_json(runs.train_record(name)) or {}) if name in variants else {}
        technique = ev.get("technique") or tr.get("technique", "")
        backend = ev.get("backend") or tr.get("backend") or "hf"
        row = {"name": name, "kind": "baseline" if name in baselines else "variant",
               "technique": technique if backend == "hf" else f"{technique} ({backend})",
               "status": ev.get("status") or tr.get("status") or "missing",
               "error": (ev.get("error") or tr.get("error") or "").split("\n")[0],
               "run_id": ev.get("run_id") or tr.get("run_id", ""),
               **(tr.get("metrics") or {}), **(ev.get("metrics") or {})}
        if "micro_batch" in row and row["micro_batch"] == row["micro_batch"]:
            row["batch_split"] = f"{row['micro_batch']} × {row['grad_accum']}"
        rows.append(row)
    return pd.DataFrame(rows)


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


def markdown(df: pd.DataFrame, metric: str) -> str:
    cols = [c for c in COLUMNS if c in df.columns]
    lines = [f"# bakeoff comparison", "",
             f"Primary metric: `{metric}` on the test split ({_fmt(df.get('n_test', pd.Series([None])).max(), '{:.0f}')} "
             f"examples). Figures are defined in `src/bakeoff/measure.py`; CPU memory is peak resident memory.", "",
             "| " + " | ".join(COLUMNS[c][0] for c in cols) + " |",
             "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r.get(c), COLUMNS[c][1]) for c in cols) + " |")
    failed = df[df["status"] != "ok"]
    if len(failed):
        lines += ["", "## Runs that did not finish", ""]
        lines += [f"- `{r['name']}`: {r['status']} — {r['error']}" for _, r in failed.iterrows()]
    return "\n".join(lines) + "\n"


def metrics_json(df: pd.DataFrame, metric: str) -> dict:
    out = {}
    for _, r in df.iterrows():
        keep = {k: r.get(k) for k in ("quality", "val_loss", "train_tokens_per_s", "train_peak_rss_mb",
                                      "train_wall_s", "gen_tokens_per_s")}
        out[r["name"]] = {"status": r["status"], **{k: float(v) for k, v in keep.items()
                                                     if v is not None and v == v}}
    return {"metric": metric, "runs": out}


def write(df: pd.DataFrame, metric: str, out_dir: Path) -> dict[str, Path]:
    import json

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"md": out_dir / "comparison.md", "csv": out_dir / "comparison.csv", "json": out_dir / "metrics.json"}
    paths["md"].write_text(markdown(df, metric))
    df.to_csv(paths["csv"], index=False)
    paths["json"].write_text(json.dumps(metrics_json(df, metric), indent=2))
    return paths

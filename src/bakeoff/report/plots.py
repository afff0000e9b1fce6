"""The report's plots (PNG): quality against peak memory and against training time as measured here, with the
Pareto front, quality per run with its interval, the pairwise differences, the trade-off and the data-value curve."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from bakeoff.decide.rule import ALPHA
from bakeoff.decide.run_record import pairs_of, rows_of
from bakeoff.decide.verdict_record import Scope

if TYPE_CHECKING:
    from bakeoff.decide.curve_record import Curve


def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: lower cost (x) and higher quality (y)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any((x2 <= x and y2 >= y) and (x2 < x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i):
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _quality_against_cost(
    ok: pd.DataFrame, mem_col: str, out_dir: Path, metric: str, paths: dict, scope: Scope
) -> None:
    """Quality against training peak memory and against training wall time as measured here (the small model on
    this machine, not the target: the titles say so), the Pareto front dashed, the prompting baselines as
    horizontal lines."""
    plt = _pyplot()
    for key, col, label in (
        ("quality_vs_memory", mem_col, "training peak memory (MiB)"),
        ("quality_vs_time", "train_wall_s", "training wall time (s)"),
    ):
        sub = ok[ok.get(col, pd.Series(dtype=float)).notna()] if col in ok.columns else ok.iloc[0:0]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        pts = [(float(r[col]), float(r.quality)) for r in rows_of(sub)]
        for (x, y), r in zip(pts, rows_of(sub)):
            ax.scatter(x, y, color="tab:blue")
            ax.annotate(r.name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        front = pareto(pts)
        if front:
            ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "--", color="tab:red", label="Pareto front")
            ax.legend(loc="lower right")
        for r in rows_of(ok[ok["kind"] == "baseline"]):
            ax.axhline(float(r.quality), color="grey", lw=0.8, ls=":")
            ax.annotate(r.name, (ax.get_xlim()[0], float(r.quality)), fontsize=7, color="grey")
        ax.set_xlabel(label)
        ax.set_ylabel(metric)
        here = f"{(scope.model or 'the base model')}, {(scope.machine or 'this machine')}"
        ax.set_title(f"{metric} against {label.split(' (')[0]}, measured on {here}", fontsize=9)
        fig.tight_layout()
        paths[key] = out_dir / f"{key}.png"
        fig.savefig(paths[key], dpi=110)
        plt.close(fig)


def measured_on(scope: Scope | None) -> str:
    """What a figure's quality was measured on, for its title: "measured on <model>, test split (60 items)"."""
    s = scope or Scope()
    return f"measured on {s.model or 'the base model'}, {s.split or 'test'} split" + (f" ({s.n} items)" if s.n else "")


def _quality_bars(ok: pd.DataFrame, out_dir: Path, metric: str, paths: dict, scope: Scope) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 0.5 + 0.4 * max(len(ok), 1)))
    names = list(ok["name"])
    q = ok["quality"].astype(float).to_numpy()
    lo = ok.get("quality_ci_low", pd.Series([float("nan")] * len(ok))).astype(float).to_numpy()
    hi = ok.get("quality_ci_high", pd.Series([float("nan")] * len(ok))).astype(float).to_numpy()
    colors = ["tab:grey" if k == "baseline" else "tab:blue" for k in ok["kind"]]
    err = [
        [max(a - b, 0) if b == b else 0 for a, b in zip(q, lo)],
        [max(b - a, 0) if b == b else 0 for a, b in zip(q, hi)],
    ]
    ax.barh(names, q, xerr=err, color=colors, capsize=3)
    ax.invert_yaxis()
    ax.set_xlabel(f"{metric} (95% interval)")
    ax.set_title(f"Quality per run (grey: prompting), {measured_on(scope)}", fontsize=9)
    fig.tight_layout()
    paths["quality_bars"] = out_dir / "quality_bars.png"
    fig.savefig(paths["quality_bars"], dpi=110)
    plt.close(fig)


def _pairwise_heatmap(pw: pd.DataFrame, out_dir: Path, paths: dict, scope: Scope) -> None:
    """Row minus column in points, coloured by the difference, the Holm-adjusted p written in every cell."""
    import numpy as np

    plt = _pyplot()
    names = list(dict.fromkeys(list(pw["a"]) + list(pw["b"])))
    n = len(names)
    diff, p = np.zeros((n, n)), np.ones((n, n))
    for r in pairs_of(pw):
        i, j = names.index(r.a), names.index(r.b)
        diff[i, j], diff[j, i] = r.diff * 100, -r.diff * 100
        p[i, j] = p[j, i] = r.p_holm
    fig, ax = plt.subplots(figsize=(1.2 + 0.9 * n, 1.0 + 0.7 * n))
    lim = max(abs(diff).max(), 1e-9)
    im = ax.imshow(diff, cmap="RdBu", vmin=-lim, vmax=lim)
    for i in range(n):
        for j in range(n):
            if i != j:
                ax.text(
                    j,
                    i,
                    f"{diff[i, j]:+.0f}\np={p[i, j]:.2g}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    fontweight="bold" if p[i, j] < ALPHA else "normal",
                )
    ax.set_xticks(range(n), names, rotation=45, ha="right")
    ax.set_yticks(range(n), names)
    fig.colorbar(im, ax=ax, label="row − column (points)")
    ax.set_title(f"Pairwise differences (Holm-adjusted p; bold < {ALPHA})\n{measured_on(scope)}", fontsize=9)
    fig.tight_layout()
    paths["pairwise"] = out_dir / "pairwise.png"
    fig.savefig(paths["pairwise"], dpi=110)
    plt.close(fig)


def _tradeoff(ok: pd.DataFrame, out_dir: Path, paths: dict, scope: Scope) -> None:
    """The learning–forgetting trade-off: each variant's task gain over the best prompt (pp) against what it lost on
    the general-ability probe (pp below the base model); up and left is better."""
    from bakeoff.report.forgetting import base_probe

    base = base_probe(ok)
    if base is None or "gain" not in ok.columns:
        return
    sub = ok[(ok["kind"] == "variant") & ok["probe_acc"].notna() & ok["gain"].notna()]
    if sub.empty:
        return
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for r in rows_of(sub):
        x, y = (base - float(r.probe_acc)) * 100, float(r.gain) * 100
        ax.scatter(x, y, color="tab:blue")
        ax.annotate(r.name, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.axhline(0, color="grey", lw=0.8, ls=":")
    ax.axvline(0, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("general-ability loss (probe, pp below the base model)")
    ax.set_ylabel("task gain over the best prompt (pp)")
    ax.set_title(
        f"Learning against forgetting, measured on {((scope or Scope()).model or 'the base model')}", fontsize=9
    )
    fig.tight_layout()
    paths["tradeoff"] = out_dir / "tradeoff.png"
    fig.savefig(paths["tradeoff"], dpi=110)
    plt.close(fig)


def _data_curve(curve: Curve | None, out_dir: Path, paths: dict, scope: Scope) -> None:
    """Both curves against training rows (log scale): measured points with intervals, the fit, its band, and the
    projection to 4× dashed."""
    if not curve or not curve.fitted():
        return
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for a in curve.fitted().values():
        n_full = a.rows[-1]
        err = [
            [q - ci[0] for q, ci in zip(a.quality, a.quality_ci)],
            [ci[1] - q for q, ci in zip(a.quality, a.quality_ci)],
        ]
        line = ax.errorbar(a.rows, a.quality, yerr=err, fmt="o", capsize=3, label=f"{a.run} (measured)")
        color = line[0].get_color()
        band = a.band
        inside = [b for b in band if b.rows <= n_full * 1.0001]
        beyond = [b for b in band if b.rows >= n_full * 0.9999]
        ax.plot([b.rows for b in inside], [b.quality for b in inside], color=color)
        if curve.reliable:
            ax.plot([b.rows for b in beyond], [b.quality for b in beyond], color=color, linestyle="--")
            shown = band
        else:
            shown = inside
        ax.fill_between(
            [b.rows for b in shown],
            [b.ci[0] for b in shown],
            [b.ci[1] for b in shown],
            color=color,
            alpha=0.15,
        )
    ax.set_xscale("log", base=2)
    measured = sorted({r for a in curve.fitted().values() for r in a.rows})
    ax.set_xticks(measured, [f"{r:,}" for r in measured], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("training rows (log scale; ticks at the rows measured)")
    ax.set_ylabel("quality on the test split")
    title = f"Quality against training rows, {measured_on(scope)}\n" + (
        "dashed: projected" if curve.reliable else "the back-test missed: no projection"
    )
    ax.set_title(title, fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    paths["curve"] = out_dir / "curve.png"
    fig.savefig(paths["curve"], dpi=110)
    plt.close(fig)


def plots(
    df: pd.DataFrame,
    out_dir: Path,
    metric: str,
    pw: pd.DataFrame | None = None,
    curve: Curve | None = None,
    scope: Scope | None = None,
) -> dict[str, Path]:
    """PNG plots: quality against peak memory and against training time (Pareto front marked),
    per-run quality bars with their intervals, the pairwise differences, the learning–forgetting trade-off and the
    data-value curve. ``scope``: what was measured on (titles). The loss curves and the projected plots:
    ``bakeoff.report.buyer_plots``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    ok = df[df["status"] == "ok"]
    reserved = "train_peak_reserved_mb" in df.columns and df["train_peak_reserved_mb"].notna().any()
    mem_col = "train_peak_reserved_mb" if reserved else "train_peak_rss_mb"
    _quality_against_cost(ok, mem_col, out_dir, metric, paths, scope or Scope())
    _quality_bars(ok, out_dir, metric, paths, scope or Scope())
    if pw is not None and len(pw):
        _pairwise_heatmap(pw, out_dir, paths, scope or Scope())
    _tradeoff(ok, out_dir, paths, scope or Scope())
    _data_curve(curve, out_dir, paths, scope or Scope())
    return paths

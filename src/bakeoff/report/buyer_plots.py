"""The plots a buyer decides on: quality against the projected all-in cost on the sizing target (frontier and the
recommendation marked), projected GPU memory per technique at the target against the cards' capacities, and the
training and validation loss per arm. Each title says what was measured and what is projected, and on what.

    paths = decision_plots(params, d, out_dir)      # a Decision: bakeoff.decide.decision
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from bakeoff.core.records import LossPoint
from bakeoff.decide.run_record import rows_of
from bakeoff.decide.sizing_record import AllIn, SizedFit
from bakeoff.decide.verdict_record import Recommendation, Scope
from bakeoff.report.plots import _pyplot, pareto

if TYPE_CHECKING:
    from bakeoff.core.sections import Params

STYLES = ["-", "--", "-.", ":"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]


def _save(fig, plt, out_dir: Path, key: str, paths: dict):
    """Save ``fig`` as ``plots/<key>.png``; returns it (closed, its data still readable: the tests read it back)."""
    fig.tight_layout()
    paths[key] = out_dir / f"{key}.png"
    fig.savefig(paths[key], dpi=110)
    plt.close(fig)
    return fig


@dataclass
class Canvas:
    """Where a plot goes (``out_dir``; its saved path into ``paths``) and what its axes say: the task's ``metric``, the
    verdict's ``scope`` (what each figure was measured on), the sizing ``target`` (what is projected)."""

    out_dir: Path
    paths: dict
    metric: str
    scope: Scope
    target: str | None


def quality_vs_cost(ok: pd.DataFrame, costs: dict[str, AllIn], rec: str | None, canvas: Canvas):
    """Each fine-tuned run's test quality (measured here) against its all-in cost on the target (projected: search,
    its parent and its own training, low to high as a bar); the frontier dashed, the recommendation starred; the
    prompting baselines, which train nothing, as horizontal lines."""
    scope, target, metric = canvas.scope, canvas.target, canvas.metric
    sub = ok[ok["name"].isin(costs)]
    if sub.empty or not target:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.4))
    pts = [(float(costs[n].usd), float(q)) for n, q in zip(sub["name"], sub["quality"])]
    for k, ((x, y), n) in enumerate(zip(pts, sub["name"])):  # a marker and a legend entry each: no overprint
        hi = float(costs[n].usd_high or x)
        ax.errorbar(
            [x],
            [y],
            xerr=[[0], [max(hi - x, 0)]],
            fmt=MARKERS[k % len(MARKERS)],
            color=f"C{k % 10}",
            capsize=3,
            label=n,
        )
    front = pareto(pts)
    ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "--", color="tab:red", label="frontier")
    if rec in set(sub["name"]):
        x, y = pts[list(sub["name"]).index(rec)]
        ax.scatter(
            [x], [y], marker="*", s=320, facecolor="none", edgecolor="black", zorder=3, label=f"recommended: {rec}"
        )
    for r in rows_of(ok[ok["kind"] == "baseline"]):
        ax.axhline(float(r.quality), color="grey", lw=0.8, ls=":")
        ax.annotate(
            f"{r.name} (prompting)",
            (0, float(r.quality)),
            xycoords=("axes fraction", "data"),
            xytext=(3, 2),
            textcoords="offset points",
            fontsize=7,
            color="grey",
        )
    ax.set_xlabel(f"all-in training cost on {target}, USD (projected; bar: up to the pessimistic end)")
    ax.set_ylabel(f"{metric} on the test split (measured)")
    ax.set_title(
        f"Quality measured on {(scope.model or 'the base model')}\nagainst all-in cost projected for {target}",
        fontsize=10,
    )
    ax.legend(loc="center right", fontsize=7)
    return _save(fig, plt, canvas.out_dir, "quality_vs_cost", canvas.paths)


def memory_at_target(fits: list[SizedFit], cards: list, margin: float, target: str | None, out_dir: Path, paths: dict):
    """Projected GPU memory of one training process per variant on ``target`` (bars, stacked by part), each card's
    usable capacity (its memory less ``margin``) a horizontal line."""
    rows = [f for f in fits if f.target == target]
    if not rows:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.4))
    names = [f.variant for f in rows]
    bottom = [0.0] * len(rows)
    for part in ("weights", "gradients", "optimizer", "activations", "overhead"):
        h = [float((f.parts or {}).get(part) or 0) for f in rows]
        ax.bar(names, h, bottom=bottom, label=part)
        bottom = [b + x for b, x in zip(bottom, h)]
    top = max(bottom)
    seen = {}
    for c in sorted(cards, key=lambda c: c.memory_gb):
        usable = c.memory_gb * (1 - margin)
        seen.setdefault(usable, []).append(c.name)
    holds = min((u for u in seen if u >= top), default=None)  # the first card that holds the tallest bar
    for usable, who in seen.items():
        if usable <= top * 1.6 or usable == holds:
            ax.axhline(usable, color="grey", lw=0.8, ls="--")
            ax.annotate(
                ", ".join(who),
                (1, usable),
                xycoords=("axes fraction", "data"),
                xytext=(-3, 2),
                textcoords="offset points",
                ha="right",
                fontsize=7,
                color="grey",
            )
    ax.set_ylabel("GB of GPU memory, one process (projected)")
    ax.set_title(f"Projected GPU memory to train on {target}; dashed: a card's memory less {margin:.0%}", fontsize=10)
    ax.legend(fontsize=7, loc="upper center")
    ax.tick_params(axis="x", rotation=20)
    return _save(fig, plt, out_dir, "memory_at_target", paths)


def loss_curves(
    histories: dict[str, list[LossPoint]],
    val_curves: dict[str, list[LossPoint]],
    scope: Scope,
    out_dir: Path,
    paths: dict,
):
    """Training loss (solid) and validation loss (dashed, with markers) per arm, each arm its own colour, line style
    and marker, so curves that coincide still show."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.4))
    drawn = [n for n in histories if histories[n] or val_curves.get(n)]
    for k, n in enumerate(drawn):
        color, style, marker = f"C{k % 10}", STYLES[k % len(STYLES)], MARKERS[k % len(MARKERS)]
        h, val = histories.get(n) or [], val_curves.get(n) or []
        if h:
            ax.plot([x.step for x in h], [x.loss for x in h], color=color, ls=style, alpha=0.8, label=f"{n} training")
        if val:
            ax.plot(
                [x.step for x in val],
                [x.loss for x in val],
                color=color,
                ls="--",
                marker=marker,
                markerfacecolor="none",
                label=f"{n} validation",
            )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss (log scale): cross-entropy; DPO's: its preference loss")
    ax.set_yscale("log")
    where = f"\nmeasured on {scope.model}, {scope.machine}" if scope.model else ""
    ax.set_title(
        ("Training and validation loss" + where) if drawn else "loss curves (no variant recorded one)", fontsize=10
    )
    if drawn:
        ax.legend(fontsize=7, ncol=2)
    return _save(fig, plt, out_dir, "loss_curves", paths)


def decision_plots(params: Params, d, out_dir: Path) -> dict[str, Path]:
    """The two projected plots of a ``Decision``, quality against all-in cost and memory against the cards, both on
    the sizing target; and each variant's training and validation loss (its training record)."""
    from bakeoff.decide.decision import picked
    from bakeoff.decide.sizing import catalog

    v, paths = d.verdict, {}
    target = (d.costs and next(iter(d.costs.values())).target) or params.sizing.target
    scope = v.scope or Scope()
    ok = d.runs[d.runs["status"] == "ok"]
    rec = picked(v) or (v.recommendation or Recommendation()).run
    quality_vs_cost(ok, d.costs or {}, rec, Canvas(out_dir, paths, params.task.metric, scope, target))
    memory_at_target(d.sizing.fits or [], catalog(params), params.sizing.margin, target, out_dir, paths)
    loss_curves(
        {n: r.history or [] for n, r in d.records.items()},
        {n: r.val_curve or [] for n, r in d.records.items()},
        scope,
        out_dir,
        paths,
    )
    return paths

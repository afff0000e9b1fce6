"""The compare stage's data-value curve (reports/curve.json): every curve arm's points, its smaller shares from the
curve stage (``bakeoff.search.curve_point``) and its own run as the full-size point, each fitted, projected and
back-tested (``bakeoff.decide.curve``) over one shared set of test-item resamples; the crossover of the fine-tuned
arm over the prompt, the verdict projected at 2×, and whether the projections hold (every back-test inside).

    got = report_data(params, decision.runs)      # None when `curve: null`
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bakeoff.core import runs
from bakeoff.core.records import PointRecord, read_run, read_stats
from bakeoff.core.runs import curve_point_dir as point_dir
from bakeoff.core.scoring import by_label_choice
from bakeoff.decide import figures
from bakeoff.decide.crossover import crossover, verdict_at
from bakeoff.decide.curve import Points, fit_arm, resample_indices
from bakeoff.decide.curve_record import Arm, Curve, Point, Spent
from bakeoff.decide.evidence_record import Evidence
from bakeoff.decide.run_record import by_name

if TYPE_CHECKING:
    from bakeoff.core.sections import Params

KEPT = (
    "rows",
    "train_steps",
    "tokens_seen",
    "train_wall_s",
    "eval_wall_s",
    "quality",
    "quality_label_choice",
    "convergence",
)


def with_curve(params: Params, d):
    """The compare stage's ``Decision`` (``bakeoff.decide.decision.decide``) with the data-value curve fitted from
    the curve stage's points and the evidence behind the gain (``bakeoff.decide.evidence``)."""
    from dataclasses import replace

    from bakeoff.decide import evidence

    return replace(
        d,
        curve=report_data(params, d.runs),
        evidence=Evidence.from_dict(evidence.guarded(params, d.runs, d.verdict, d.data_stats)),
    )


def report_data(params: Params, df) -> Curve | None:
    """The curve from the curve stage's points and each arm's own run (None when `curve: null`)."""
    from bakeoff.core.scoring import METRICS

    c = params.curve
    if c is None:
        return None
    arms, fitted, draws = {}, {}, None
    full_items = figures.primary_items(df)
    for arm in c.arms:
        a, pts = arm_points(params, df, arm, full_items)
        if pts is not None and len(pts.ns) < 2:
            a = a.with_(status="too few points")  # no smaller share finished: nothing to fit
        elif pts is not None:
            draws = resample_indices(len(pts.items[0]), c.resamples) if draws is None else draws
            pts = Points(pts.ns, pts.items, METRICS[params.task.metric].figure, pts.names)
            a = Arm.from_dict({**a.to_dict(), "status": "ok", **fit_arm(pts, draws=draws)})
            a = _own_interval(a, df)
            fitted[arm] = (a.kind, pts)
        arms[arm] = a
    ft = next((p for k, p in fitted.values() if k == "variant"), None)
    pr = next((p for k, p in fitted.values() if k == "baseline"), None)
    both = ft is not None and pr is not None
    ok = [a for a in arms.values() if a.ok]
    misses = [a.run for a in ok if not a.backtest.inside]
    errs = [abs(a.backtest.error) for a in ok if a.backtest.has("error")]
    return Curve.from_dict(
        {
            "arms": arms,
            "fractions": sorted(c.fractions),
            "resamples": c.resamples,
            "min_gain": params.verdict.min_gain,
            **({"crossover": crossover(ft, pr, draws)} if both else {}),
            **({"verdict_at_2x": verdict_at(ft, pr, draws, 2, params.verdict.min_gain)} if both else {}),
            "backtest_misses": misses,
            "reliable": bool(ok) and not misses,
            "backtest_mae": round(sum(errs) / len(errs), 4) if errs else None,
            "budget": {a.run: spent(a.points) for a in arms.values() if a.run},
        }
    )


def _own_interval(a: Arm, df) -> Arm:
    """The full size is the arm's own run: one interval for it, the quality table's (not a second bootstrap)."""
    own = by_name(df)[a.run]
    lo, hi = figures.as_number(own.quality_ci_low), figures.as_number(own.quality_ci_high)
    if a.figure != "generation" or lo == float("-inf") or hi == float("-inf"):
        return a
    return a.with_(quality_ci=[*a.quality_ci[:-1], [round(lo, 4), round(hi, 4)]])


def spent(points: list[Point]) -> Spent:
    """What an arm's curve points cost here (its own run aside: that is the arm's training, counted there)."""
    mine = [p for p in points if not p.own_run]
    return Spent(
        points=sum(p.status == "ok" for p in mine),
        tokens=sum(p.tokens_seen or 0 for p in mine),
        steps=sum(p.train_steps or 0 for p in mine),
        train_s=round(sum(p.train_wall_s or 0 for p in mine), 1),
        eval_s=round(sum(p.eval_wall_s or 0 for p in mine), 1),
    )


def _point(share: float, r: PointRecord, name: str) -> Point:
    """A share's record as the curve holds it: its status (``stale`` where it was drawn for another run), the figures
    kept, its error."""
    m = r.metrics or {}
    stale = (r.run if r.has("run") else name) != name  # drawn for another run than the arm's now
    return Point.from_dict(
        {
            "share": share,
            "status": "stale" if stale else (r.status if r.has("status") else "missing"),
            **({"drawn_for": r.run} if stale else {}),
            **{k: m[k] for k in KEPT if k in m},
            **({"error": r.error} if r.error else {}),
        }
    )


def arm_points(params: Params, df, arm: str, full_items: dict) -> tuple[Arm, Points | None]:
    """One arm's record (its points, smallest share first, its own run last) and the per-test-item scores of the
    points that finished (None where its run did not), scored by the figure its own run is judged by (a baseline's
    label choice where that won)."""
    recs = [
        (s, PointRecord.from_dict(runs.read_json(point_dir(arm, s) / "point.json") or {}))
        for s in sorted(params.curve.fractions)
    ]
    name = next((r.run for _, r in recs if r and r.run), None)
    entry = {"run": name, "chosen_as": next((r.chosen_as for _, r in recs if r), None), "points": []}
    full = full_items.get(name) if name else None
    if full is None:
        missing = "no_run" if name is None else "unfinished"
        return Arm.from_dict({**entry, "status": "skipped", "missing": missing}), None
    row = by_name(df)[name]
    choice = row.kind == "baseline" and by_label_choice(row, figures.choosing_split(df))
    ids = sorted(full)
    ns, items, names = [], [], []
    for share, r in recs:
        point = _point(share, r, name)
        entry["points"].append(point)
        got = (
            figures.read_items(point_dir(arm, share) / "predictions.jsonl", "choice_score" if choice else "score")
            if point.status == "ok"
            else None
        )
        if got and set(got) >= set(ids):
            ns.append(int(point.rows))
            items.append([got[i] for i in ids])
            names.append(f"{share:g}")
    rows_full = int(_rows_full(recs))
    own_steps = (read_run(runs.train_record(name)).metrics or {}).get("train_steps")
    own = {"share": 1.0, "status": "ok", "rows": rows_full, "own_run": True, "train_steps": own_steps}
    entry["points"].append(Point.from_dict(own))
    figure = "label choice" if choice else "generation"
    arm_ = Arm.from_dict({**entry, "status": "collected", "kind": str(row.kind), "figure": figure})
    return arm_, Points(ns + [rows_full], items + [[full[i] for i in ids]], None, names + ["own run"])


def _rows_full(recs) -> int | None:
    """The training split's rows: as the points recorded them, else the data stage's count."""
    recorded = (int(full) for _, r in recs if (full := (r.metrics or {}).get("rows_full")))
    return next(recorded, None) or (read_stats().splits or {}).get("train")

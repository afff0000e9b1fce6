"""Two arms' fitted curves against each other: the size at which the fine-tuned arm passes the prompt and stays above
(the crossover, with its bootstrap interval), and the verdict the same rule would give at a multiple of the largest
size (a projection). Both over the resamples the arms were fitted with (``bakeoff.decide.curve``)."""

from __future__ import annotations

import math

import numpy as np

from bakeoff.decide.curve import Fitted, Points, interval, predict_many
from bakeoff.decide.rule import decision_of


def _first_pass(grid: np.ndarray, diff: np.ndarray) -> float | None:
    """The first size on ``grid`` from which ``diff`` (fine-tuning − prompt) stays above 0; None: never in range."""
    above = diff > 0
    if not above.any():
        return None
    below = np.where(~above)[0]
    if not len(below):
        return float(grid[0])
    k = int(below[-1]) + 1
    return float(grid[k]) if k < len(grid) else None


def crossover(ft: Points, pr: Points, draws: np.ndarray, upto: float = 4.0) -> dict:
    """The size at which ``ft`` (the fine-tuned arm) passes ``pr`` (the prompt) and stays above, on the fitted
    curves over the measured range and on to ``upto`` × the largest size (beyond it, a projection); its 95%
    interval over the same bootstrap resamples and the share of resamples in which it happens at all."""
    a, b = Fitted(ft, draws), Fitted(pr, draws)
    lo, hi = float(min(a.ns.min(), b.ns.min())), float(max(a.ns.max(), b.ns.max()))
    grid = np.exp(np.linspace(math.log(lo), math.log(hi * upto), 200))
    point = _first_pass(grid, predict_many(a.ns, a.P, a.form, grid)[0] - predict_many(b.ns, b.P, b.form, grid)[0])
    diffs = a.boot_at(grid) - b.boot_at(grid)
    found = [x for x in (_first_pass(grid, d) for d in diffs) if x is not None]
    where = (
        "never" if point is None else "smallest" if point <= lo * 1.0001 else "measured" if point <= hi else "projected"
    )  # from the smallest size, in the measured range, beyond it (a projection)
    return {
        "rows": None if point is None else round(point),
        "where": where,
        "rows_ci": None
        if not found
        else [round(float(np.percentile(found, 2.5))), round(float(np.percentile(found, 97.5)))],
        "share_of_resamples": round(len(found) / len(diffs), 3) if len(diffs) else None,
        "searched_up_to_rows": round(hi * upto),
    }


def verdict_at(ft: Points, pr: Points, draws: np.ndarray, multiple: float, min_gain: float) -> dict:
    """The projected gain of ``ft`` over ``pr`` at ``multiple`` × the largest size, with its interval, and the verdict
    the same rule would give it (a projection: the report says so)."""
    a, b = Fitted(ft, draws), Fitted(pr, draws)
    n = float(max(a.ns.max(), b.ns.max())) * multiple
    g = a.at(n) - b.at(n)
    ci = interval(a.boot_at(n)[:, 0] - b.boot_at(n)[:, 0])
    lo, hi = ci if ci else (g, g)
    return {
        "multiple": multiple,
        "rows": round(n),
        "gain": round(g, 4),
        "gain_ci": ci,
        "decision": decision_of(lo, hi, min_gain),
    }

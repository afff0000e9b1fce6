"""A search's ranges widened where its best trial sits at an edge: the bound moved out, the trial that tries the new
stretch, and how many trials ran beyond the old edge (the report says each)."""

from __future__ import annotations

EDGE, WIDEN_MAX = 0.1, 2  # a choice within 10% of its range's end (log scale where the range is) is at the edge


def widened(space: dict, best: dict, widenings: list) -> tuple[dict, list]:
    """``space`` widened on every side where ``best`` (the best finished trial's values) sits at its edge: the bound
    moves out by half the range (log scale: by √(high/low)), at most ``WIDEN_MAX`` times a side; returns the space
    and the widenings so far (each {param, side, from, to})."""
    import math

    space, widenings = {k: dict(v) for k, v in space.items()}, list(widenings)
    for k, spec in space.items():
        if "choices" in spec or k not in best:
            continue
        lo, hi, log, x = spec["low"], spec["high"], bool(spec.get("log")), best[k]
        f = (lambda v: math.log(v)) if log else (lambda v: v)
        pos = (f(x) - f(lo)) / (f(hi) - f(lo))
        for side, at in (("high", pos >= 1 - EDGE), ("low", pos <= EDGE)):
            if not at or sum(w["param"] == k and w["side"] == side for w in widenings) >= WIDEN_MAX:
                continue
            if log:
                new = hi * math.sqrt(hi / lo) if side == "high" else lo / math.sqrt(hi / lo)
            else:
                new = hi + (hi - lo) / 2 if side == "high" else lo - (hi - lo) / 2
            if isinstance(spec["low"], int) and isinstance(spec["high"], int) and not log:
                new = round(new)
            widenings.append({"param": k, "side": side, "from": spec[side], "to": float(f"{new:.3g}")})
            spec[side] = float(f"{new:.3g}") if not isinstance(new, int) else new
    return space, widenings


def into_new_region(best: dict, new: list, space: dict) -> dict:
    """The values of the trial that tries a range just widened: the best trial's, with each widened parameter at the
    middle (log scale where the range is) of the stretch the widening added, beyond the old edge."""
    import math

    point = dict(best)
    for w in new:
        log = bool(space[w["param"]].get("log"))
        mid = math.sqrt(w["from"] * w["to"]) if log else (w["from"] + w["to"]) / 2
        point[w["param"]] = round(mid) if isinstance(space[w["param"]]["low"], int) and not log else mid
    return point


def outside(widenings: list, trials: list) -> list:
    """Each widening with ``trials_outside``: how many of the search's trials (the recipe, written by hand, aside)
    ran beyond the range's old edge."""

    def beyond(t, w):
        x = (t.get("values") or {}).get(w["param"])
        return not t.get("recipe") and x is not None and (x > w["from"] if w["side"] == "high" else x < w["from"])

    return [{**w, "trials_outside": sum(beyond(t, w) for t in trials)} for w in widenings]

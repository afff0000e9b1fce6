"""Which differences between runs are real: every pair tested on the same test examples, runs grouped by what the
data can tell apart (a display), and one recommendation a user can act on.

    pw = pairwise(df, "exact_match")          # one row per pair: discordant counts, p, Holm-adjusted p
    groups = rank_groups(df, pw)               # [["full", "qlora"], ["lora", "unsloth"], ...]: a display
    rec = recommend(df, v, costs)              # {"action": "fine-tune", "run": "full", "choice": ..., ...}

The recommendation is ``bakeoff.decide.rule.choose``: the best on validation unless a cheaper run is shown within
``verdict.max_loss`` of it; rank groups only display what the pairwise tests can tell apart.

The tests and the adjustment are defined in ``bakeoff.core.measure``; pure decisions over run records, no torch.
"""

from __future__ import annotations

import pandas as pd

from bakeoff.core.scoring import METRICS, mean
from bakeoff.decide.figures import as_number, choosing_split, correctness, primary_items, prompting_quality
from bakeoff.decide.rule import ALPHA  # the level of every "different" / "as good as the best" claim
from bakeoff.decide.run_record import Run, by_name, rows_of
from bakeoff.decide.verdict_record import Verdict


def _binary(items: list) -> bool:
    return all(correctness(x) in (0.0, 1.0) for x in items)


def pairwise(df: pd.DataFrame, metric: str, items: dict | None = None, resamples: int = 5000) -> pd.DataFrame:
    """Every pair of finished runs on the same test examples: each one's figure, the discordant counts, the test
    (exact McNemar for a 0/1 metric, else a paired permutation test of the figure) and its Holm-adjusted p over all
    pairs (``bakeoff.core.measure``). One row per pair, ``a`` before ``b`` in the report's order."""
    from bakeoff.decide.statistics import holm, mcnemar_exact, paired_permutation_p

    figure = METRICS[metric].figure
    items = primary_items(df) if items is None else items
    names = [n for n in df["name"] if items.get(n)]
    rows = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            ids = sorted(items[a])
            if set(ids) != set(items[b]):
                raise ValueError(
                    f"runs/{a}/predictions.jsonl and runs/{b}/predictions.jsonl cover different test "
                    f"examples: rerun both (dvc repro)"
                )
            xa, xb = [items[a][k] for k in ids], [items[b][k] for k in ids]
            ra, rb = [correctness(x) for x in xa], [correctness(x) for x in xb]
            only_a = sum(x > y for x, y in zip(ra, rb))
            only_b = sum(y > x for x, y in zip(ra, rb))
            binary = figure is mean and _binary(xa) and _binary(xb)
            p = mcnemar_exact(only_a, only_b) if binary else paired_permutation_p(xa, xb, figure, resamples)
            fa, fb = figure(xa), figure(xb)
            rows.append(
                {
                    "a": a,
                    "b": b,
                    "n": len(ids),
                    "quality_a": fa,
                    "quality_b": fb,
                    "diff": fa - fb,
                    "a_better_on": only_a,
                    "b_better_on": only_b,
                    "test": "exact McNemar" if binary else "paired permutation",
                    "p": p,
                }
            )
    out = pd.DataFrame(
        rows, columns=["a", "b", "n", "quality_a", "quality_b", "diff", "a_better_on", "b_better_on", "test", "p"]
    )
    out["p_holm"] = holm(list(out["p"])) if len(out) else []
    return out


def p_between(pw: pd.DataFrame, a: str, b: str, column: str = "p_holm") -> float:
    """The pairwise table's p of runs ``a`` and ``b`` (either order): Holm-adjusted over every pair, or ``p``."""
    hit = pw[((pw["a"] == a) & (pw["b"] == b)) | ((pw["a"] == b) & (pw["b"] == a))]
    return float(hit[column].iloc[0]) if len(hit) else 1.0


def rank_groups(df: pd.DataFrame, pw: pd.DataFrame, alpha: float = ALPHA) -> list[list[str]]:
    """Runs grouped by what the data can tell apart: the leader (best on the choosing split, the split that picks
    winners) and every remaining run not different from it on the test split (Holm-adjusted p ≥ ``alpha``) form
    group A; the same again on what is left forms B, and so on. Members of a group are listed best first."""
    split = choosing_split(df)
    ok = df[(df["status"] == "ok") & df["name"].isin(set(pw["a"]) | set(pw["b"]))]
    key = lambda r: (
        prompting_quality(r, split)
        if r.kind == "baseline"
        else as_number(r.val_quality if split == "val" else r.quality)
    )
    left = [r.name for r in sorted(rows_of(ok), key=lambda r: -key(r))]
    groups = []
    while left:
        leader = left[0]
        group = [leader] + [n for n in left[1:] if p_between(pw, leader, n) >= alpha]
        groups.append(group)
        left = [n for n in left if n not in group]
    return groups


def group_line(groups: list[list[str]]) -> str:
    """``A: full, qlora · B: lora, unsloth``."""
    return " · ".join(f"{chr(65 + i)}: {', '.join(g)}" for i, g in enumerate(groups))


def _saving(best: str, n: str, rows: dict[str, Run], costs: dict) -> tuple[float | None, str]:
    """What taking ``n`` instead of ``best`` saves, and in what: projected USD bought alone on the sizing target
    where both are priced (a prompt trains nothing: it saves the best's whole price), else the peak training memory
    measured here (MB)."""

    def usd(x):
        c = costs.get(x)
        return c.alone[0] if c else None

    if isinstance(usd(best), (int, float)):
        if rows[n].kind == "baseline":
            return float(usd(best)), "usd"
        return (float(usd(best)) - float(usd(n)) if isinstance(usd(n), (int, float)) else None), "usd"

    def peak(x):
        r = rows[x]
        m = r.train_peak_reserved_mb or r.train_peak_rss_mb
        return float(m) if isinstance(m, (int, float)) and m == m else None

    if rows[n].kind == "baseline":
        return peak(best), "mb"
    return (peak(best) - peak(n) if peak(best) is not None and peak(n) is not None else None), "mb"


def recommend(
    df: pd.DataFrame, v: Verdict, costs: dict | None = None, max_loss: float = 0.02, items: dict | None = None
) -> dict:
    """One thing to do, by one rule (``bakeoff.decide.rule.choose``): the best run picked on validation (the
    verdict's variant; the best prompt when prompting is enough) unless a cheaper run, a prompt included, is *shown*
    within ``max_loss`` of it on the test split. ``costs``: variant → ``costs.all_in`` (cheaper: bought alone on the
    sizing target; without prices, the peak training memory measured here). ``choice`` holds every cheaper run
    considered with its shortfall. An inconclusive verdict gives action ``inconclusive``, naming the leading run and
    how many test items would settle it. ``compared``: the variants the rule weighed. The facts only: the report
    words them (``bakeoff.report.verdict``)."""
    from bakeoff.decide.rule import choose

    rows = by_name(df)
    costs = costs or {}
    if v.decision == "prompting is enough":
        pick = v.baseline
        return {"action": "prompt", "run": pick, "max_loss": max_loss} if pick else {}
    best = v.variant
    if not best or best not in rows:
        return {}
    raw = primary_items(df) if items is None else items
    ids = sorted(raw.get(best) or {})
    scores = {
        k: [correctness(x[i]) for i in ids]
        for k, x in raw.items()
        if x and set(x) == set(ids) and rows.get(k) is not None and rows[k].status == "ok"
    }
    savings = {k: _saving(best, k, rows, costs) for k in scores if k != best}
    unit = next((u for s, u in savings.values()), "usd")
    cheaper = {k: s for k, (s, _) in savings.items() if isinstance(s, (int, float)) and s > 0}
    c = choose(best, scores, cheaper, max_loss) if best in scores else None
    pick = c.pick if c else best
    r = rows[pick]
    action = "inconclusive" if v.decision == "inconclusive" else "prompt" if r.kind == "baseline" else "fine-tune"
    variants = [k for k in scores if rows[k].kind == "variant"]
    return {
        "action": action,
        "run": pick,
        "kind": r.kind,
        "best": best,
        "max_loss": max_loss,
        "saving_unit": unit,
        "examples_needed": v.examples_needed,
        "choice": c.as_dict() if c else None,
        "still_improving": [k for k in variants if rows[k].convergence == "still improving"],
        "compared": variants,
    }


def _num_or_inf(x) -> float:
    """A number, or +inf for a missing one (the cheapest-first order puts it last)."""
    return -as_number(-x) if isinstance(x, (int, float)) and not isinstance(x, bool) else float("inf")

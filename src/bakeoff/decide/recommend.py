"""Which differences between runs are real: every pair tested on the same test examples, runs grouped by what the
data can tell apart (a display), and one recommendation a user can act on.

    pw = pairwise(df, "exact_match")          # one row per pair: discordant counts, p, Holm-adjusted p
    groups = rank_groups(df, pw)               # [["full", "qlora"], ["lora", "unsloth"], ...]: a display
    rec = recommend(df, v, costs, scope)       # {"action": "fine-tune", "run": "full", "choice": ..., "line": ...}

The recommendation is ``bakeoff.decide.rule.choose``: the best on validation unless a cheaper run is shown within
``verdict.max_loss`` of it; rank groups only display what the pairwise tests can tell apart.

The tests and the adjustment are defined in ``bakeoff.core.measure``; pure decisions over run records, no torch.
"""

from __future__ import annotations

import pandas as pd

from bakeoff.core.scoring import METRICS, mean
from bakeoff.decide.figures import as_number, choosing_split, correctness, primary_items, prompting_quality
from bakeoff.decide.rule import ALPHA  # the level of every "different" / "as good as the best" claim


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
        for b in names[i + 1:]:
            ids = sorted(items[a])
            if set(ids) != set(items[b]):
                raise ValueError(f"runs/{a}/predictions.jsonl and runs/{b}/predictions.jsonl cover different test "
                                 f"examples: rerun both (dvc repro)")
            xa, xb = [items[a][k] for k in ids], [items[b][k] for k in ids]
            ra, rb = [correctness(x) for x in xa], [correctness(x) for x in xb]
            only_a = sum(x > y for x, y in zip(ra, rb))
            only_b = sum(y > x for x, y in zip(ra, rb))
            binary = figure is mean and _binary(xa) and _binary(xb)
            p = mcnemar_exact(only_a, only_b) if binary else paired_permutation_p(xa, xb, figure, resamples)
            fa, fb = figure(xa), figure(xb)
            rows.append({"a": a, "b": b, "n": len(ids), "quality_a": fa, "quality_b": fb, "diff": fa - fb,
                         "a_better_on": only_a, "b_better_on": only_b,
                         "test": "exact McNemar" if binary else "paired permutation", "p": p})
    out = pd.DataFrame(rows, columns=["a", "b", "n", "quality_a", "quality_b", "diff", "a_better_on", "b_better_on",
                                      "test", "p"])
    out["p_holm"] = holm(list(out["p"])) if len(out) else []
    return out


def _p_between(pw: pd.DataFrame, a: str, b: str) -> float:
    hit = pw[((pw["a"] == a) & (pw["b"] == b)) | ((pw["a"] == b) & (pw["b"] == a))]
    return float(hit["p_holm"].iloc[0]) if len(hit) else 1.0


def rank_groups(df: pd.DataFrame, pw: pd.DataFrame, alpha: float = ALPHA) -> list[list[str]]:
    """Runs grouped by what the data can tell apart: the leader (best on the choosing split, the split that picks
    winners) and every remaining run not different from it on the test split (Holm-adjusted p ≥ ``alpha``) form
    group A; the same again on what is left forms B, and so on. Members of a group are listed best first."""
    split = choosing_split(df)
    ok = df[(df["status"] == "ok") & df["name"].isin(set(pw["a"]) | set(pw["b"]))]
    key = (lambda r: prompting_quality(r, split) if r["kind"] == "baseline" else as_number(r.get(
        "val_quality" if split == "val" else "quality")))
    left = [r["name"] for _, r in sorted(ok.iterrows(), key=lambda ir: -key(ir[1]))]
    groups = []
    while left:
        leader = left[0]
        group = [leader] + [n for n in left[1:] if _p_between(pw, leader, n) >= alpha]
        groups.append(group)
        left = [n for n in left if n not in group]
    return groups


def group_line(groups: list[list[str]]) -> str:
    """``A: full, qlora · B: lora, unsloth``."""
    return " · ".join(f"{chr(65 + i)}: {', '.join(g)}" for i, g in enumerate(groups))


def sig(x: float) -> str:
    """``x`` to two significant figures, never in scientific notation: 64,994 → 65,000; 3.0; 0.36."""
    from bakeoff.decide.statistics import round_sig

    r = round_sig(float(x))
    return f"{r:,.0f}" if abs(r) >= 10 else f"{r:.1f}" if abs(r) >= 1 else f"{r:.2g}"


def usd_range(lo: float, hi: float) -> str:
    """``$3.7–7.4``: two significant figures (``bakeoff.core.measure.round_sig``), an estimate on assumed inputs."""
    a, b = sig(lo), sig(hi)
    return f"${a}" if a == b else f"${a}–{b}"


def _saving(best: str, n: str, rows: dict, costs: dict) -> tuple[float | None, str]:
    """What taking ``n`` instead of ``best`` saves, and in what: projected USD bought alone on the sizing target
    where both are priced (a prompt trains nothing: it saves the best's whole price), else the peak training memory
    measured here (MB)."""
    def usd(x):
        c = costs.get(x) or {}
        return c.get("alone_usd", c.get("usd"))

    if isinstance(usd(best), (int, float)):
        if rows[n]["kind"] == "baseline":
            return float(usd(best)), "usd"
        return (float(usd(best)) - float(usd(n)) if isinstance(usd(n), (int, float)) else None), "usd"

    def peak(x):
        r = rows[x]
        m = r.get("train_peak_reserved_mb") or r.get("train_peak_rss_mb")
        return float(m) if isinstance(m, (int, float)) and m == m else None

    if rows[n]["kind"] == "baseline":
        return peak(best), "mb"
    return (peak(best) - peak(n) if peak(best) is not None and peak(n) is not None else None), "mb"


def recommend(df: pd.DataFrame, v: dict, costs: dict | None = None, scope: dict | None = None,
              max_loss: float = 0.02, items: dict | None = None) -> dict:
    """One thing to do, by one rule (``bakeoff.decide.rule.choose``): the best run picked on validation (the
    verdict's variant; the best prompt when prompting is enough) unless a cheaper run, a prompt included, is *shown*
    within ``max_loss`` of it on the test split. ``costs``: variant → ``costs.all_in`` (cheaper: bought alone on the
    sizing target; without prices, the peak training memory measured here). ``choice`` holds every cheaper run
    considered with its shortfall, for the report to word. An inconclusive verdict gives action ``inconclusive``,
    naming the leading run and how many test items would settle it. ``line`` is the decision; ``measured`` what was
    measured here (``scope``), ``projected`` what was projected to the target (never mixed in one sentence)."""
    from bakeoff.decide.rule import choose

    rows = {r["name"]: r for _, r in df.iterrows()}
    scope, costs = scope or {}, costs or {}
    model, n = scope.get("model", "the base model"), scope.get("n", "?")
    if v.get("decision") == "prompting is enough":
        pick = v.get("baseline")
        if not pick:
            return {}
        return {"action": "prompt", "run": pick, "measured": [], "projected": [], "max_loss": max_loss,
                "line": f"**Recommendation: prompt** — use `{pick}`; measured on `{model}`: the gain of fine-tuning "
                        f"is below min_gain ({v.get('reason', '')})."}
    best = v.get("variant")
    if not best or best not in rows:
        return {}
    raw = primary_items(df) if items is None else items
    ids = sorted(raw.get(best) or {})
    scores = {k: [correctness(x[i]) for i in ids] for k, x in raw.items()
              if x and set(x) == set(ids) and rows.get(k) is not None and rows[k]["status"] == "ok"}
    savings = {k: _saving(best, k, rows, costs) for k in scores if k != best}
    unit = next((u for s, u in savings.values()), "usd")
    cheaper = {k: s for k, (s, _) in savings.items() if isinstance(s, (int, float)) and s > 0}
    c = choose(best, scores, cheaper, max_loss) if best in scores else None
    pick = c.pick if c else best
    r = rows[pick]
    action = ("inconclusive" if v.get("decision") == "inconclusive"
              else "prompt" if r["kind"] == "baseline" else "fine-tune")
    settle = v.get("examples_needed")
    if action == "inconclusive":
        line = (f"**Recommendation: none yet** — the gain of fine-tuning over prompting is inconclusive on {n} test "
                f"items; `{pick}` leads" + (f"; about {settle} test items would settle it" if settle else "") + ".")
    elif action == "prompt":
        line = (f"**Recommendation: prompt** — use `{pick}`: shown within {max_loss * 100:g} points of `{best}` on the "
                "test split, and it trains nothing.")
    else:
        line = (f"**Recommendation: fine-tune with `{pick}`** ({r['technique']})"
                + (f", shown within {max_loss * 100:g} points of `{best}` (best on validation) at a lower cost"
                   if pick != best else ", the best on validation; no cheaper run is shown within "
                   f"{max_loss * 100:g} points of it") + ".")
    measured = [f"On `{model}`, test split ({n} items): `{pick}` scores {as_number(r.get('quality')):.1%}"
                + (f", {r['gain_vs_prompting']} against the best prompting (`{v.get('baseline')}`)"
                   if isinstance(r.get("gain_vs_prompting"), str) else "") + "."]
    variants = [k for k in scores if rows[k]["kind"] == "variant"]
    machine = scope.get("machine", "this machine")
    measured += [x for x in (memory_words(rows, variants, pick),) if x] + [serving_words(rows, variants, machine)]
    projected = projected_words(pick, variants, costs) if rows[pick]["kind"] == "variant" else []
    return {"action": action, "run": pick, "kind": r["kind"], "best": best, "line": line, "measured": measured,
            "projected": projected,
            "max_loss": max_loss, "saving_unit": unit, "examples_needed": settle,
            "choice": c.as_dict() if c else None,
            "still_improving": [k for k in variants if rows[k].get("convergence") == "still improving"]}


def memory_words(rows: dict, variants: list[str], pick: str) -> str | None:
    """The group's least training memory as measured here (peak reserved on CUDA, resident on CPU)."""
    peaks = {n: rows[n].get("train_peak_reserved_mb") or rows[n].get("train_peak_rss_mb") for n in variants}
    peaks = {k: x for k, x in peaks.items() if isinstance(x, (int, float)) and x == x}
    if len(peaks) < 2:
        return None
    low = min(peaks, key=peaks.get)
    kind = "reserved CUDA" if rows[low].get("train_peak_reserved_mb") else "resident"
    return (f"Least training memory measured here (peak {kind} memory): `{low}` at {peaks[low]:,.0f} MB"
            + (f" against `{pick}`'s {peaks[pick]:,.0f} MB" if low != pick and pick in peaks else "") + ".")


def projected_words(pick: str, variants: list[str], costs: dict) -> list[str]:
    """The pick's projection to the sizing target (memory, smallest and cheapest card, all-in range) and the group's
    least projected memory: every sentence says it is a projection."""
    c = costs.get(pick)
    if not c:
        return []
    parts = ["training"] + ([f"`{c.get('lender') or pick}`'s whole search"] if c.get("search_usd") else []) \
        + ([f"its parent `{c['parent']}` bought alone"] if c.get("parent") else [])
    smallest = (f"{c['smallest_gpus']}× {c['smallest_card']}" if (c.get("smallest_gpus") or 1) > 1
                else c.get("smallest_card"))
    alone = (c.get("alone_usd", c["usd"]), c.get("alone_usd_high", c["usd_high"]))
    shared = (f"; {usd_range(c['usd'], c['usd_high'])} when its search is split among the {c['search_users']} arms "
              "that use it" if c.get("search_users", 1) > 1 and c.get("search_usd") else "")
    out = [(f"Projected to `{c['target']}`, not measured: `{pick}` needs ~{sig(c['need_gb'])} GB; the smallest card "
           f"that holds it is {smallest}, the cheapest for the job {c['card']}: "
           f"{usd_range(*alone)} all in, bought alone ({', '.join(parts)}){shared}.")]
    least = min((n for n in variants if costs.get(n)), key=lambda n: costs[n]["need_gb"])
    if least != pick:
        out.append(f"Least memory projected among the finished variants: `{least}` "
                   f"(~{sig(costs[least]['need_gb'])} GB on the target; "
                   "a projection from the sizing model, not measured).")
    return out


def serving_words(rows: dict, names: list[str], machine: str) -> str:
    """Which run serves fastest, only where its latency's interquartile range separates from every other's
    (``bakeoff.core.measure.latency_separated``); otherwise a tie."""
    from bakeoff.core.runs import SEVERAL
    from bakeoff.decide.statistics import latency_separated

    if machine.startswith(SEVERAL):  # latencies of different machines say nothing of the runs
        return f"Serving latency at batch 1: timed on {machine}; compare latencies within one machine only."
    timed = [n for n in names if isinstance(rows[n].get("latency_p25_s"), (int, float))
             and rows[n].get("latency_p25_s") == rows[n].get("latency_p25_s")]
    if len(timed) < 2:
        return f"Serving latency at batch 1 ({machine}): too few runs timed with their spread to compare."
    how = rows[timed[0]].get("latency_how") or "each run timed in its own stage"
    fast = min(timed, key=lambda n: rows[n]["latency_p50_s"])
    if all(latency_separated(rows[fast], rows[o]) for o in timed if o != fast):
        return (f"Fastest to serve here ({machine}, batch 1, {how}): `{fast}`, p50 {rows[fast]['latency_p50_s']:.2f} "
                "s; its interquartile range lies below every other run's in the group.")
    pairs = [(a, b) for a in timed for b in timed if a != b and latency_separated(rows[a], rows[b])]
    p50s = [rows[n]["latency_p50_s"] for n in timed]
    p50 = f"p50 {min(p50s):.2f}–{max(p50s):.2f} s"
    every = len(timed) * (len(timed) - 1) // 2
    if not pairs:
        return (f"Serving latency at batch 1 ({machine}, {how}): the group's runs tie ({p50}; every pair's "
                "interquartile ranges overlap).")
    return (f"Serving latency at batch 1 ({machine}, {how}; {p50}): {len(pairs)} of {every} pairs separate, "
            + ", ".join(f"`{a}` below `{b}`" for a, b in pairs) + "; the other pairs' interquartile ranges overlap.")


def _num_or_inf(x) -> float:
    """A number, or +inf for a missing one (the cheapest-first order puts it last)."""
    return -as_number(-x) if isinstance(x, (int, float)) and not isinstance(x, bool) else float("inf")

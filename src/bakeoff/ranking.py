"""Which differences between runs are real: every pair tested on the same test examples, runs grouped by what the
data can tell apart, and one recommendation a user can act on.

    pw = pairwise(df, "exact_match")          # one row per pair: discordant counts, p, Holm-adjusted p
    groups = rank_groups(df, pw)               # [["full", "qlora"], ["lora", "unsloth"], ...]
    rec = recommend(df, v, groups, fits)       # {"action": "fine-tune", "run": "qlora", "line": ...}

The tests and the adjustment are defined in ``bakeoff.measure``; pure decisions over run records, no torch.
"""

from __future__ import annotations

import pandas as pd

from bakeoff.metrics import METRICS, mean
from bakeoff.verdict import as_number, correctness, choosing_split, primary_items, prompting_quality

ALPHA = 0.05  # the level of every "different" / "as good as the best" claim, after Holm's adjustment


def _binary(items: list) -> bool:
    return all(correctness(x) in (0.0, 1.0) for x in items)


def pairwise(df: pd.DataFrame, metric: str, items: dict | None = None, resamples: int = 5000) -> pd.DataFrame:
    """Every pair of finished runs on the same test examples: each one's figure, the discordant counts, the test
    (exact McNemar for a 0/1 metric, else a paired permutation test of the figure) and its Holm-adjusted p over all
    pairs (``bakeoff.measure``). One row per pair, ``a`` before ``b`` in the report's order."""
    from bakeoff.measure import holm, mcnemar_exact, paired_permutation_p

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


def recommend(df: pd.DataFrame, v: dict, groups: list[list[str]], fits: dict | None = None) -> dict:
    """One thing to do. A prompting baseline in the best group (or a "prompting is enough" verdict) → that baseline
    (the cheapest in prompt tokens). Otherwise the variant of the best group that is cheapest to train on the sizing
    target (``fits``: variant → sizing fit with ``usd``, ``gpu``, ``need_gb``), with the group's smallest memory
    and fastest serving named beside it when another run holds them."""
    rows = {r["name"]: r for _, r in df.iterrows()}
    best = groups[0] if groups else []
    baselines = [n for n in best if rows[n]["kind"] == "baseline"]
    if v.get("decision") == "prompting is enough" or baselines:
        pick = min(baselines, key=lambda n: _num_or_inf(rows[n].get("prompt_tokens_per_request"))) if baselines \
            else v.get("baseline")
        if not pick:
            return {}
        why = ("it is in the best group: no fine-tuned run is distinguishable from it on the test split" if baselines
               else f"the gain of fine-tuning is below min_gain ({v.get('reason', '')})")
        return {"action": "prompt", "run": pick,
                "line": f"**Recommendation: prompt** — use `{pick}`; {why}."}
    variants = [n for n in best if rows[n]["kind"] == "variant"]
    if not variants:
        return {}
    fits = fits or {}

    pick = min(variants, key=lambda n: (_num_or_inf((fits.get(n) or {}).get("usd")),
                                        _num_or_inf(rows[n].get("train_peak_rss_mb"))))
    f = fits.get(pick) or {}
    where = (f" — fits {f['gpus']}× {f['gpu']} for {f['target']} at ~${f['usd']:,.0f}" if f.get("gpu") and
             f.get("usd") is not None else "")
    mem = f"{f['need_gb']:.1f} GB" if isinstance(f.get("need_gb"), (int, float)) else None
    line = (f"**Recommendation: fine-tune with `{pick}`** ({rows[pick]['technique']}): as good as the best here "
            f"(group A){f' at {mem}' if mem else ''}{where}.")
    smallest = min(variants, key=lambda n: _num_or_inf((fits.get(n) or {}).get("need_gb")))
    fastest = min(variants, key=lambda n: _num_or_inf(rows[n].get("latency_p50_s")))
    if smallest != pick and (fits.get(smallest) or {}).get("need_gb") is not None:
        line += f" Least memory in group A: `{smallest}` ({fits[smallest]['need_gb']:.1f} GB)."
    if fastest != pick and _num_or_inf(rows[fastest].get("latency_p50_s")) < float("inf"):
        line += f" Fastest to serve in group A: `{fastest}` (p50 {rows[fastest]['latency_p50_s']:.2f} s)."
    return {"action": "fine-tune", "run": pick, "smallest": smallest, "fastest": fastest, "line": line}


def _num_or_inf(x) -> float:
    """A number, or +inf for a missing one (the cheapest-first order puts it last)."""
    return -as_number(-x) if isinstance(x, (int, float)) and not isinstance(x, bool) else float("inf")

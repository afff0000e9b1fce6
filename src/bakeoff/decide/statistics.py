"""The statistics behind every interval, test, equivalence and tie the report states; defined in the docstring of
``bakeoff.core.measure`` (Confidence, Differences between runs, Rounding;
Non-inferiority is ``bakeoff.decide.rule``), implemented here.

    bootstrap_ci(items, figure, baseline)   # (figure, low, high): paired percentile bootstrap, 95%
    mcnemar_exact(b, c)                     # two-sided exact McNemar p from discordant counts
    paired_permutation_p(a, b, figure)      # two-sided paired permutation p of a difference of figures
    holm(pvalues)                           # Holm's step-down adjustment over a family
    latency_separated(fast, slow)           # one run faster to serve only when the interquartile ranges separate
    round_sig(x)                            # two significant figures, for estimates on assumed inputs
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bakeoff.decide.run_record import Run

LEVEL = 0.95  # every interval the report states: two-sided 95%


def bootstrap_ci(
    items: list,
    figure=None,
    baseline: list | None = None,
    resamples: int = 2000,
    seed: int = 0,
    seeds: list[list] | None = None,
) -> tuple[float, float, float]:
    """(figure, low, high) of ``items`` (see Confidence above); ``baseline``: the other run's items (same examples,
    same order), for a difference; ``seeds``: this run's items under its other training seeds, same order."""
    import numpy as np

    figure = figure or (lambda xs: sum(xs) / len(xs) if xs else 0.0)
    runs_ = [items, *(seeds or [])]
    if any(len(x) != len(items) for x in runs_ + ([baseline] if baseline is not None else [])):
        raise ValueError(f"paired bootstrap needs the same examples: {len(items)} against {len(baseline or [])}")
    n, k = len(items), len(runs_)
    if n == 0:
        return 0.0, 0.0, 0.0

    def stat(idx, picked) -> float:
        a = sum(figure([runs_[s][i] for i in idx]) for s in picked) / len(picked)
        return a - figure([baseline[i] for i in idx]) if baseline is not None else a

    rng = np.random.default_rng(seed)
    draws = np.sort([stat(rng.integers(0, n, n), rng.integers(0, k, k) if k > 1 else [0]) for _ in range(resamples)])
    lo, hi = np.quantile(draws, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
    return stat(range(n), range(k)), float(lo), float(hi)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p from the discordant counts: ``b`` examples only the first run gets right, ``c``
    only the second (b=5, c=10 → 0.3018; b=0, c=6 → 0.03125)."""
    from scipy.stats import binomtest

    return 1.0 if b + c == 0 else float(binomtest(min(b, c), b + c, 0.5).pvalue)


def paired_permutation_p(items: list, other: list, figure, resamples: int = 5000, seed: int = 0) -> float:
    """Two-sided p of ``figure(items) - figure(other)`` under random swaps of the pair on each example."""
    import numpy as np

    if len(items) != len(other):
        raise ValueError(f"a paired test needs the same examples: {len(items)} against {len(other)}")
    observed = abs(figure(items) - figure(other))
    rng, k = np.random.default_rng(seed), 0
    for swap in rng.random((resamples, len(items))) < 0.5:
        pairs = [(o, x) if s else (x, o) for x, o, s in zip(items, other, swap)]
        k += abs(figure([a for a, _ in pairs]) - figure([b for _, b in pairs])) >= observed - 1e-12
    return (k + 1) / (resamples + 1)


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: the i-th smallest p times (m − i), made
    non-decreasing, capped at 1."""
    m, running, out = len(pvalues), 0.0, [0.0] * len(pvalues)
    for rank, i in enumerate(sorted(range(m), key=lambda i: pvalues[i])):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def latency_separated(fast: Run, slow: Run) -> bool:
    """Whether run ``fast`` is measurably faster to serve than ``slow`` (their ``latency_p25_s`` and
    ``latency_p75_s``): its interquartile range lies wholly below the other's. Without both ranges: never."""
    try:
        return float(fast.latency_p75_s) < float(slow.latency_p25_s)
    except (TypeError, ValueError):
        return False


def round_sig(x: float, sig: int = 2) -> float:
    """``x`` to ``sig`` significant figures (64,994 → 65,000; 3.684 → 3.7; 0.0004567 → 0.00046)."""
    import math

    if x == 0 or x != x or x in (float("inf"), float("-inf")):
        return x
    return round(x, sig - 1 - math.floor(math.log10(abs(x))))

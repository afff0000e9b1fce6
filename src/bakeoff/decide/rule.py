"""One rule for every "a cheaper one will do": the best run (picked on the validation split) against each cheaper
contender on the test split, by a one-sided paired bound of the shortfall against ``verdict.max_loss``.

    s = shortfall(items["lora"], items["full"], margin=0.02)      # one contender against the best: a Shortfall
    c = choose("full", items, cheaper={"lora": 3.1}, margin=0.02)  # a Choice: the run to take, and every trade-off

A cheaper run replaces the best only when its shortfall is *shown* smaller than the margin (non-inferiority, the
lower end of the paired 90% interval above ``-margin``, Holm-adjusted over the k−1 comparisons with the best); a
difference the test split cannot see is never read as "as good as". Defined in ``bakeoff.core.measure``
(Non-inferiority); pure arithmetic over per-example scores, no torch, no Markdown (``bakeoff.report`` words it).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

ALPHA = 0.05  # one-sided level of every "within the margin" claim, after Holm over the comparisons with the best


def decision_of(low: float, high: float, min_gain: float) -> str:
    """The verdict on fine-tuning from a gain's 95% interval against ``verdict.min_gain``: ``fine-tune`` when all of
    it is above, ``prompting is enough`` when all of it is below, else ``inconclusive``; the measured verdict
    (``decide.verdict``) and the curve's projected one (``decide.curve``) alike."""
    return "fine-tune" if low > min_gain else "prompting is enough" if high < min_gain else "inconclusive"


@dataclass(frozen=True)
class Shortfall:
    """One contender against the best on the same test items (fractions of the primary metric)."""

    run: str
    against: str  # the best run
    n: int  # test items
    diff: float  # the contender minus the best (negative: it scores less)
    low: float  # the lower end of the paired 90% interval: the one-sided 95% bound of the shortfall
    high: float  # the upper end of the same interval
    margin: float  # verdict.max_loss
    p: float  # one-sided p of "the contender is worse than the best by the margin or more"
    p_holm: float = 1.0  # ``p`` adjusted by Holm over every contender compared with the best
    shown: bool = False  # within the margin, shown (p_holm < ALPHA)
    items_needed: int | None = None  # test items at which this difference and spread would show it (None: none would)
    saving: float | None = None  # what choosing it instead of the best saves (the caller's unit: projected USD)

    @property
    def beyond(self) -> bool:
        """The measured shortfall is itself larger than the margin: no number of test items would show it within."""
        return self.diff <= -self.margin


@dataclass(frozen=True)
class Choice:
    """The run to take and why: the best, or the cheapest contender shown within the margin of it."""

    best: str
    pick: str
    margin: float
    considered: list[Shortfall] = field(default_factory=list)  # every cheaper contender, cheapest first

    @property
    def replaced(self) -> bool:
        return self.pick != self.best

    @property
    def declined(self) -> list[Shortfall]:
        """The cheaper contenders not shown within the margin: the trade-offs a buyer is told about."""
        return [s for s in self.considered if not s.shown]

    def as_dict(self) -> dict:
        return {
            "best": self.best,
            "pick": self.pick,
            "margin": self.margin,
            "replaced": self.replaced,
            "considered": [asdict(s) for s in self.considered],
        }


def items_to_show(diff: float, sd: float, margin: float, alpha: float = ALPHA) -> int | None:
    """Test items at which a paired difference ``diff`` with per-item spread ``sd`` would have its one-sided bound
    above ``-margin`` (normal approximation): (z·sd / (diff + margin))². None where the difference is already beyond
    the margin."""
    from scipy.stats import norm

    room = diff + margin
    if room <= 0:
        return None
    if sd == 0:
        return 1
    return math.ceil((norm.ppf(1 - alpha) * sd / room) ** 2)


def shortfall(
    contender: list[float], best: list[float], margin: float, run: str = "", against: str = "", alpha: float = ALPHA
) -> Shortfall:
    """The paired one-sided test of ``contender`` against ``best`` (per-example scores, same examples, same order),
    H0 "the contender is worse by ``margin`` or more". For 0/1 scores, the Wald interval of the difference of matched
    proportions with Agresti and Min's adjustment (0.5 added to each cell of the paired 2×2 table), which stays
    honest when few items disagree (no disagreement on 60 items does not show 2 points); otherwise a paired t-test on
    the per-example differences. ``diff`` is the measured difference either way."""
    import numpy as np
    from scipy import stats

    if len(contender) != len(best) or not best:
        raise ValueError(f"a paired bound needs the same examples: {len(contender)} against {len(best)}")
    a, b = np.asarray(contender, float), np.asarray(best, float)
    d = a - b
    n, mean = len(d), float(d.mean())
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    if np.isin(a, (0.0, 1.0)).all() and np.isin(b, (0.0, 1.0)).all():
        won, lost, m = float((d > 0).sum()) + 0.5, float((d < 0).sum()) + 0.5, n + 2.0
        centre = (won - lost) / m
        se = math.sqrt(max((won + lost) - (won - lost) ** 2 / m, 0.0)) / m
        z = float(stats.norm.ppf(1 - alpha))
        p, low, high = float(stats.norm.sf((centre + margin) / se)), centre - z * se, centre + z * se
    elif sd == 0.0:  # graded scores, every difference the same: no noise, within exactly when inside
        p, low, high = (0.0 if mean > -margin else 1.0), mean, mean
    else:
        se = sd / math.sqrt(n)
        p = float(stats.t.sf((mean + margin) / se, n - 1))
        half = float(stats.t.ppf(1 - alpha, n - 1)) * se
        low, high = mean - half, mean + half
    return Shortfall(
        run=run,
        against=against,
        n=n,
        diff=mean,
        low=low,
        high=high,
        margin=margin,
        p=p,
        items_needed=items_to_show(mean, sd, margin, alpha),
    )


def choose(
    best: str, items: dict[str, list[float]], cheaper: dict[str, float], margin: float, alpha: float = ALPHA
) -> Choice:
    """The run to take: ``best`` unless a contender in ``cheaper`` (run → what it saves against the best, > 0) is
    shown within ``margin`` of it; then the one that saves most. ``items``: per-example scores of the best and of each
    contender on the same test examples. Holm's adjustment runs over every contender compared (k−1 tests)."""
    from bakeoff.decide.statistics import holm

    compared = [n for n in cheaper if n != best and n in items and cheaper[n] > 0]
    raw = [shortfall(items[n], items[best], margin, n, best, alpha) for n in compared]
    adjusted = holm([s.p for s in raw]) if raw else []
    done = [
        Shortfall(**{**asdict(s), "p_holm": q, "shown": q < alpha, "saving": cheaper[s.run]})
        for s, q in zip(raw, adjusted)
    ]
    done.sort(key=lambda s: -s.saving)
    shown = [s for s in done if s.shown]
    return Choice(best=best, pick=shown[0].run if shown else best, margin=margin, considered=done)

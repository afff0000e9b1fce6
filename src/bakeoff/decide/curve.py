"""How much would more data buy: each curve arm's quality against its training rows, fitted with its uncertainty,
back-tested, and projected to 2× and 4× the rows (projections, said so everywhere they are shown).

    arm = Points(ns=[52, 104, 207, 414], items=[[...], ...], figure=mean)   # items: per test item, same order
    fit = fit_arm(arm, resamples=1000)     # the fit, its projections with intervals, the back-test
    cross = crossover(ft_fit, prompt_fit)  # the size where fine-tuning passes the prompt, or none in range

Three forms, each fitted (four points cannot tell them apart, so every projection carries their spread):

- ``power2``: q(n) = 1 − a·(n/N)^−b, the error falling as a power of the rows toward a ceiling fixed at 100% (N: the
  largest measured size); two parameters. The primary form with fewer than 5 points (band, crossover, back-test).
- ``power3``: q(n) = c − a·(n/N)^−b, with its own ceiling c ≤ 1 (a task whose labels are noisy stops short of
  100%); the primary form with 5 points or more.
- ``loglinear``: q(n) = c + a·log2(n/N), a fixed gain per doubling.

a ≥ 0 and b in [0, 3]: quality does not fall with more data (a flat or falling arm fits a ≈ 0 or b ≈ 0, "flat").
Uncertainty: a bootstrap over test items, the same resampled items at every point (the points are scored on the same
test split), each resample refitted; intervals are the 2.5th and 97.5th percentiles. They hold the test split's noise
only, one training run per point, not a training run's seed-to-seed spread: the back-test is what says whether that
is enough. A projection's interval spans every form's interval (``spread``: the forms' points), and its gain is
measured from the largest *measured* point, never from a fitted one.
Back-test: the primary form fitted on every point but the largest predicts the largest; inside when the prediction
lies in the 95% interval of the observed point (Clopper–Pearson for a 0/1 score, else the bootstrap's): ``accepts``,
the band any prediction had to hit. ``flat_accepted``: whether "no gain" (the next smaller point's score) lies in
that band too, when the back-test cannot tell flat from growth.
The last doubling: the largest point against the one at about half its rows, measured, with the paired interval;
``cannot_tell`` when that interval holds 0: the data cannot tell flat from growth, and the report projects nothing
stronger than that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

MULTIPLES = (2, 4)  # the projections: 2× and 4× the rows of the full-size point
B_MAX = 3.0
SEED = 0


@dataclass
class Points:
    """One arm's measured points: rows trained on (or drawn from), and each point's per-test-item scores."""

    ns: list[int]
    items: list[list]  # one list per point, every list in the same test-item order
    figure: object = None  # items → the figure (None: the mean)
    names: list[str] = field(default_factory=list)

    def quality(self, idx: np.ndarray | None = None) -> np.ndarray:
        fig = self.figure or (lambda xs: float(np.mean(xs)) if len(xs) else float("nan"))
        if idx is None:
            return np.array([fig(list(it)) for it in self.items], dtype=float)
        return np.array([fig([it[i] for i in idx]) for it in self.items], dtype=float)

    def quality_many(self, draws: np.ndarray) -> np.ndarray:
        """Each resample's figure at each point (resamples × points): vectorised where the figure is a mean."""
        if (self.figure is None or getattr(self.figure, "__name__", "") == "mean") and all(
            isinstance(x, (int, float)) for it in self.items for x in it
        ):
            return np.asarray(self.items, dtype=float)[:, draws].mean(2).T
        return np.array([self.quality(idx) for idx in draws])


FORMS = ("power2", "power3", "loglinear")


def form_for(k: int) -> str:
    return "power3" if k >= 5 else "power2"


def _model(form: str):
    if form == "power3":
        return lambda x, c, a, b: c - a * np.power(x, -b)
    if form == "loglinear":
        return lambda x, c, a: c + a * np.log2(x)
    return lambda x, a, b: 1.0 - a * np.power(x, -b)


B_GRID = np.linspace(0.0, B_MAX, 301)  # exponents tried (steps of 0.01); the scale and ceiling are solved exactly


def fit_many(ns, Q, form: str) -> np.ndarray:
    """Least squares of ``form`` to every row of ``Q`` (resamples × sizes) at sizes ``ns``: for each exponent on
    ``B_GRID`` the scale (and ceiling) in closed form, within their bounds; the exponent with the least squared error.
    Returns one row of parameters per resample (power2: a, b; power3: c, a, b)."""
    x = np.asarray(ns, dtype=float) / float(max(ns))
    Q = np.clip(np.atleast_2d(np.asarray(Q, dtype=float)), 0.0, 1.0)
    if form == "loglinear":  # q = c + a·log2(x), a ≥ 0: a line in log2 of the rows
        L = np.log2(x)
        lc = L - L.mean()
        A = np.clip((Q - Q.mean(1, keepdims=True)) @ lc / max(float(lc @ lc), 1e-12), 0.0, None)
        return np.stack([Q.mean(1) - A * L.mean(), A], 1)
    Z = x[None, :] ** -B_GRID[:, None]  # exponent × size
    if form == "power2":  # 1 - q = a·z
        E = 1.0 - Q
        num, den = E @ Z.T, (Z**2).sum(1)
        A = np.clip(num / den, 0.0, 2.0)
        sse = (E**2).sum(1)[:, None] - 2 * A * num + A**2 * den
        g = sse.argmin(1)
        return np.stack([A[np.arange(len(Q)), g], B_GRID[g]], 1)
    # power3: q = c - a·z, a line in z for each exponent; a ≥ 0 and c ≤ 1 (the other end refitted at the bound)
    zc = Z - Z.mean(1, keepdims=True)
    szz = (zc**2).sum(1)
    yc = Q - Q.mean(1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        A = np.where(szz > 1e-12, -(yc @ zc.T) / szz, 0.0)
    A = np.clip(A, 0.0, 2.0)
    C = Q.mean(1)[:, None] + A * Z.mean(1)[None, :]
    over = C > 1.0
    if over.any():  # the ceiling at 1: a alone, as power2 does
        a1 = np.clip(((1.0 - Q) @ Z.T) / (Z**2).sum(1), 0.0, 2.0)
        A, C = np.where(over, a1, A), np.where(over, 1.0, C)
    resid = Q[:, None, :] - (C[:, :, None] - A[:, :, None] * Z[None, :, :])
    g = (resid**2).sum(2).argmin(1)
    r = np.arange(len(Q))
    return np.stack([C[r, g], A[r, g], B_GRID[g]], 1)


def fit_points(ns, qs, form: str | None = None) -> dict | None:
    """``form`` (default by the number of points) fitted to qualities ``qs`` at sizes ``ns``: its parameters and
    the size they are relative to, or None with fewer than 2 distinct sizes."""
    ns, qs = np.asarray(ns, dtype=float), np.asarray(qs, dtype=float)
    if len(set(ns.tolist())) < 2 or not np.all(np.isfinite(qs)):
        return None
    form = form or form_for(len(ns))
    return {"form": form, "ref": float(ns.max()), "params": [float(v) for v in fit_many(ns, qs, form)[0]]}


def predict_many(ns_fit, P: np.ndarray, form: str, n) -> np.ndarray:
    """Every resample's fitted quality (rows of ``P``, from ``fit_many``) at sizes ``n``: resamples × sizes."""
    x = (np.asarray(n, dtype=float) / float(max(ns_fit)))[None, :]
    if form == "loglinear":
        return np.clip(P[:, :1] + P[:, 1:2] * np.log2(x), 0.0, 1.0)
    z = x ** -P[:, -1:]
    q = (1.0 - P[:, :1] * z) if form == "power2" else (P[:, :1] - P[:, 1:2] * z)
    return np.clip(q, 0.0, 1.0)


def predict(fit: dict | None, n) -> np.ndarray:
    """The fitted quality at ``n`` rows (clipped to [0, 1])."""
    n = np.asarray(n, dtype=float)
    if fit is None:
        return np.full(n.shape, np.nan)
    return np.clip(_model(fit["form"])(n / fit["ref"], *fit["params"]), 0.0, 1.0)


def interval(xs) -> list[float] | None:
    xs = np.asarray([x for x in xs if x == x], dtype=float)
    if not len(xs):
        return None
    return [round(float(np.percentile(xs, 2.5)), 4), round(float(np.percentile(xs, 97.5)), 4)]


def resample_indices(n_items: int, resamples: int, seed: int = SEED) -> np.ndarray:
    """The bootstrap's test-item draws, one row per resample; shared by every arm so their curves stay paired."""
    return np.random.default_rng(seed).integers(0, n_items, size=(resamples, n_items))


class Fitted:
    """One arm's points fitted on the observed scores and on every resample of the test items at once."""

    def __init__(self, pts: Points, draws: np.ndarray, drop_last: bool = False, form: str | None = None):
        order = np.argsort(pts.ns)[:-1] if drop_last else np.argsort(pts.ns)
        self.ns = np.array([pts.ns[i] for i in order], dtype=float)
        self.form = form or form_for(len(self.ns))
        self.q = pts.quality()[order]
        self.Q = pts.quality_many(draws)[:, order] if len(draws) else np.empty((0, len(order)))
        self.P = fit_many(self.ns, self.q, self.form)
        self.PB = fit_many(self.ns, self.Q, self.form) if len(self.Q) else np.empty((0, self.P.shape[1]))

    def at(self, n) -> float:
        return float(predict_many(self.ns, self.P, self.form, [n])[0, 0])

    def boot_at(self, n) -> np.ndarray:
        """Every resample's fitted quality at each size in ``n``: resamples × sizes."""
        return predict_many(self.ns, self.PB, self.form, np.atleast_1d(n))


def projected(fits: dict, form: str, n: float, multiple: float, largest: tuple) -> dict:
    """Every form's quality at ``n`` rows (``multiple`` × the largest), with its interval and its gain over the
    largest measured point (``largest``: its quality and its bootstrap draws); the primary ``form``'s figures with
    the forms' spread around them."""
    observed, boot_observed = largest
    forms = {}
    for name, g in fits.items():
        p, boot = g.at(n), g.boot_at(n)[:, 0]
        forms[name] = {
            "quality": round(p, 4),
            "ci": interval(boot),
            "gain": round(p - observed, 4),
            "gain_ci": interval(boot - boot_observed),
        }
    lows = [x["ci"][0] for x in forms.values() if x["ci"]]
    highs = [x["ci"][1] for x in forms.values() if x["ci"]]
    glows = [x["gain_ci"][0] for x in forms.values() if x["gain_ci"]]
    ghighs = [x["gain_ci"][1] for x in forms.values() if x["gain_ci"]]
    points = [x["quality"] for x in forms.values()]
    main = forms[form]
    return {
        "multiple": multiple,
        "rows": round(n),
        "quality": main["quality"],
        "ci": [min(lows), max(highs)] if lows else None,
        "spread": [min(points), max(points)],
        "gain": main["gain"],
        "gain_ci": [min(glows), max(ghighs)] if glows else None,
        "gain_from": "largest_point",
        "forms": forms,
    }


def fit_arm(pts: Points, resamples: int = 1000, draws: np.ndarray | None = None) -> dict:
    """``pts`` fitted (all points) in every form, projected to 2× and 4× the largest with the forms' spread, each gain
    from the largest measured point, the last doubling as measured, and back-tested (the primary form fitted without
    the largest point, predicting it); each figure with its 95% bootstrap interval over test items."""
    draws = resample_indices(len(pts.items[0]), resamples) if draws is None else draws
    f = Fitted(pts, draws)
    fits = {form: f if form == f.form else Fitted(pts, draws, form=form) for form in FORMS}
    n_full = float(f.ns.max())
    grid = np.exp(np.linspace(math.log(f.ns.min()), math.log(n_full * max(MULTIPLES)), 40))
    observed, boot_observed = float(f.q[-1]), f.Q[:, -1]
    boot_grid = f.boot_at(grid)
    projection = [projected(fits, f.form, n_full * m, m, (observed, boot_observed)) for m in MULTIPLES]
    out = {
        "form": f.form,
        "forms": list(FORMS),
        "n_points": len(f.ns),
        "n_items": len(pts.items[0]),
        "rows": [int(n) for n in f.ns],
        "names": [pts.names[i] for i in np.argsort(pts.ns)] if pts.names else [],
        "quality": [round(float(q), 4) for q in f.q],
        "quality_ci": [interval(f.Q[:, k]) for k in range(len(f.ns))],
        "fit": {"form": f.form, "ref": n_full, "params": [round(float(v), 5) for v in f.P[0]]},
        "fits": {
            k: {"form": k, "ref": n_full, "params": [round(float(v), 5) for v in g.P[0]]} for k, g in fits.items()
        },
        "exponent": round(float(f.P[0, -1]), 4),
        "exponent_ci": interval(f.PB[:, -1]),
        "fitted_at_full": round(f.at(n_full), 4),
        "projection": projection,
        "gain_per_doubling": projection[0]["gain"],
        "gain_per_doubling_ci": projection[0]["gain_ci"],
        "last_doubling": last_doubling(f),
        "resamples": len(draws),
        "band": [
            {"rows": round(float(n), 1), "quality": round(f.at(n), 4), "ci": interval(boot_grid[:, k])}
            for k, n in enumerate(grid)
        ],
    }
    out["backtest"] = backtest(pts, f, draws)
    return out


def last_doubling(f: Fitted) -> dict | None:
    """The largest point against the measured point nearest half its rows (within a factor 1.5 of it): the
    difference with its paired 95% interval over the test items; ``cannot_tell`` when that interval holds 0."""
    if len(f.ns) < 2:
        return None
    k = int(np.argmin(np.abs(np.log(f.ns[:-1] / (f.ns[-1] / 2)))))
    if abs(math.log(f.ns[k] / (f.ns[-1] / 2))) > math.log(1.5):
        return None
    diff = float(f.q[-1] - f.q[k])
    ci = interval(f.Q[:, -1] - f.Q[:, k]) if len(f.Q) else None
    return {
        "rows": [int(f.ns[k]), int(f.ns[-1])],
        "diff": round(diff, 4),
        "ci": ci,
        "cannot_tell": bool(ci is not None and ci[0] <= 0 <= ci[1]),
    }


def observed_band(pts: Points, f: Fitted) -> list[float] | None:
    """The 95% interval of the largest point's score: Clopper–Pearson where every item scores 0 or 1 and the figure
    is their mean, else the bootstrap's percentiles."""
    items = pts.items[int(np.argmax(pts.ns))]
    mean_figure = pts.figure is None or getattr(pts.figure, "__name__", "") == "mean"
    if mean_figure and items and all(x in (0, 1, 0.0, 1.0, True, False) for x in items):
        from scipy.stats import binomtest

        ci = binomtest(int(sum(items)), len(items)).proportion_ci(0.95, method="exact")
        return [round(float(ci.low), 4), round(float(ci.high), 4)]
    return interval(f.Q[:, -1]) if len(f.Q) else None


def backtest(pts: Points, f: Fitted, draws: np.ndarray) -> dict:
    """The primary form fitted without the largest size, predicting it: inside when the prediction lies in the
    observed point's 95% interval (``accepts``: the band the test split can resolve, said beside the verdict).
    ``flat_accepted``: "no gain from the last size" (the largest fitted point's score) lies in the band too, so the
    back-test cannot tell flat from growth. The error and its bootstrap interval are kept as information."""
    if len(f.ns) < 3:
        return {"inside": False, "sizes": len(f.ns)}  # a back-test needs 3 or more
    b = Fitted(pts, draws, drop_last=True)
    n_full = float(f.ns.max())
    pred, observed = b.at(n_full), float(f.q[-1])
    band = observed_band(pts, f)
    flat = float(b.q[-1])
    return {
        "fitted_on_rows": [int(n) for n in b.ns],
        "form": b.form,
        "predicted": round(pred, 4),
        "observed": round(observed, 4),
        "error": round(pred - observed, 4),
        "error_ci": interval(b.boot_at(n_full)[:, 0] - f.Q[:, -1]),
        "accepts": band,
        "flat": round(flat, 4),
        "flat_accepted": bool(band and band[0] <= flat <= band[1]),
        "inside": bool(band is not None and band[0] - 1e-9 <= pred <= band[1] + 1e-9),
    }

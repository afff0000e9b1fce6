"""The data-value curve as typed records (reports/curve.json, ``bakeoff.decide.data_value`` computes it): the curve,
each arm, its points, fits, projections, last doubling and back-test, the crossover and the verdict projected at 2×.
Read and written back key for key (``bakeoff.core.record.Record``): a field that is None was absent.

    c = Curve.from_dict(json.loads(Path("reports/curve.json").read_text()))
    c.reliable, c.arms["recommended"].backtest.inside, c.arms["recommended"].projection[0].quality
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.core.record import Record

Interval = list[float]  # [low, high]: a 95% interval


@dataclass
class Point(Record):
    """One size an arm was trained and scored at (``own_run``: the arm's own run, the full size)."""

    share: float | None = None
    status: str | None = None  # ok, failed, missing, stale (``drawn_for`` another run)
    drawn_for: str | None = None
    rows: int | None = None
    own_run: bool | None = None
    train_steps: int | None = None
    tokens_seen: int | None = None
    train_wall_s: float | None = None
    eval_wall_s: float | None = None
    quality: float | None = None
    quality_label_choice: float | None = None
    convergence: str | None = None
    error: str | None = None


@dataclass
class Fit(Record):
    """A fitted form: its name, the rows it is scaled to and its parameters."""

    form: str | None = None
    ref: float | None = None
    params: list[float] | None = None


@dataclass
class FormAt(Record):
    """One form's projection at a size."""

    quality: float | None = None
    ci: Interval | None = None
    gain: float | None = None
    gain_ci: Interval | None = None


@dataclass
class Projection(Record):
    """The primary form at ``multiple`` × the largest size, the interval across every form, and the gain over the
    largest measured point (``gain_from``)."""

    multiple: int | None = None
    rows: int | None = None
    quality: float | None = None
    ci: Interval | None = None
    spread: Interval | None = None
    gain: float | None = None
    gain_ci: Interval | None = None
    gain_from: str | None = None
    forms: dict[str, FormAt] | None = None


@dataclass
class Doubling(Record):
    """The largest point against the measured point nearest half its rows, as measured."""

    rows: list[int] | None = None
    diff: float | None = None
    ci: Interval | None = None
    cannot_tell: bool | None = None


@dataclass
class Backtest(Record):
    """The primary form fitted without the largest size, predicting it (``sizes``/``reason``: too few to try)."""

    fitted_on_rows: list[int] | None = None
    form: str | None = None
    predicted: float | None = None
    observed: float | None = None
    error: float | None = None
    error_ci: Interval | None = None
    accepts: Interval | None = None
    flat: float | None = None
    flat_accepted: bool | None = None
    inside: bool | None = None
    sizes: int | None = None
    reason: str | None = None


@dataclass
class BandPoint(Record):
    """The primary form's fitted quality at one size, with its interval (the plot's band)."""

    rows: float | None = None
    quality: float | None = None
    ci: Interval | None = None


@dataclass
class Arm(Record):
    """One curve arm: the run it names and how it was chosen, its points, and, where it was fitted (``status`` ok),
    its fit, projections, last doubling and back-test; else why not (``missing``, ``reason``)."""

    run: str | None = None
    chosen_as: str | None = None
    points: list[Point] | None = None
    status: str | None = None
    missing: str | None = None
    reason: str | None = None
    kind: str | None = None
    figure: str | None = None
    form: str | None = None
    forms: list[str] | None = None
    n_points: int | None = None
    n_items: int | None = None
    rows: list[int] | None = None
    names: list[str] | None = None
    quality: list[float] | None = None
    quality_ci: list[Interval] | None = None
    fit: Fit | None = None
    fits: dict[str, Fit] | None = None
    exponent: float | None = None
    exponent_ci: Interval | None = None
    fitted_at_full: float | None = None
    projection: list[Projection] | None = None
    gain_per_doubling: float | None = None
    gain_per_doubling_ci: Interval | None = None
    last_doubling: Doubling | None = None
    resamples: int | None = None
    band: list[BandPoint] | None = None
    backtest: Backtest | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class Crossover(Record):
    """Where the fine-tuned arm's fitted curve passes the prompt's and stays above."""

    rows: int | None = None
    where: str | None = None
    rows_ci: list[int] | None = None
    share_of_resamples: float | None = None
    searched_up_to_rows: int | None = None


@dataclass
class VerdictAt(Record):
    """The verdict's rule applied to the projected gain at ``multiple`` × the largest size (a projection)."""

    multiple: float | None = None
    rows: int | None = None
    gain: float | None = None
    gain_ci: Interval | None = None
    decision: str | None = None


@dataclass
class Spent(Record):
    """What an arm's curve points cost here (its own run aside)."""

    points: int | None = None
    tokens: int | None = None
    steps: int | None = None
    train_s: float | None = None
    eval_s: float | None = None


@dataclass
class Curve(Record):
    """The data-value curve: every arm, the crossover, the verdict at 2×, whether the back-tests held (``reliable``)
    and what the points cost (``budget``: run → points, tokens, steps, seconds)."""

    arms: dict[str, Arm] | None = None
    fractions: list[float] | None = None
    resamples: int | None = None
    min_gain: float | None = None
    crossover: Crossover | None = None
    verdict_at_2x: VerdictAt | None = None
    backtest_misses: list[str] | None = None
    reliable: bool | None = None
    backtest_mae: float | None = None
    budget: dict[str, Spent] | None = None
    status: str | None = None
    reason: str | None = None

    def fitted(self) -> dict[str, Arm]:
        """The arms fitted (``status`` ok), by their key."""
        return {k: a for k, a in (self.arms or {}).items() if a.ok}


@dataclass
class ArmSummary(Record):
    """One curve arm in reports/metrics.json (``bakeoff.report.curve.summary``): its points, its projection at 2× and
    whether its back-test held."""

    run: str | None = None
    status: str | None = None
    rows: list[int] | None = None
    quality: list[float] | None = None
    projected_2x: float | None = None
    projected_2x_ci: Interval | None = None
    projected_2x_spread: Interval | None = None
    gain_2x_over_measured: float | None = None
    last_doubling: Doubling | None = None
    backtest_error: float | None = None
    backtest_inside: bool | None = None
    backtest_accepts: Interval | None = None


@dataclass
class CurveSummary(Record):
    """The data-value curve in reports/metrics.json."""

    reliable: bool | None = None
    backtest_mae: float | None = None
    arms: dict[str, ArmSummary] | None = None
    crossover: Crossover | None = None
    verdict_at_2x: VerdictAt | None = None

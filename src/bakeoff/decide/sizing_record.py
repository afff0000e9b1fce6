"""GPU sizing and costs as typed records (``Decision.sizing``, ``Decision.costs``; reports/sizing.json): the memory
model's calibration on this run's peaks, every target × variant fit with where its utilisation comes from, what the
GPU check measured, and each variant all in on the sizing target. Read and written back key for key
(``bakeoff.core.record.Record``): a field that is None was absent.

    s = Sizing.from_dict(sizing.report_data(...))
    s.calibration.rows[0].error, s.fits[0].mfu_source.basis, s.gpu_check.out_of_sample.largest
    AllIn.from_dict(costs.all_in(...)).alone_usd
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.core.record import Record


@dataclass
class Shape(Record):
    """The GPU-check row a utilisation was read from, and the target's size."""

    part: str | None = None
    row: str | None = None
    flop_params: float | None = None
    micro_batch: int | None = None
    seq_len: int | None = None
    target_flop_params: float | None = None


@dataclass
class MfuSource(Record):
    """Where a fit's utilisation comes from (``bakeoff.decide.speed.Speed`` and the card it is priced on); the report
    adds ``why`` and ``card`` in words."""

    mfu: float | None = None
    mfu_low: float | None = None
    how: str | None = None
    basis: str | None = None
    device: str | None = None
    row: str | None = None
    shape: Shape | None = None
    technique: str | None = None
    other_card: str | None = None
    why: str | None = None
    card: str | None = None


@dataclass
class SizedFit(Record):
    """One target × variant (``bakeoff.decide.sizing.Fit`` as written)."""

    target: str | None = None
    variant: str | None = None
    technique: str | None = None
    need_gb: float | None = None
    gpu: str | None = None
    gpus: int | None = None
    hours: float | None = None
    usd: float | None = None
    parts: dict[str, float] | None = None
    parent: str | None = None
    cumulative_usd: float | None = None
    cheapest_gpu: str | None = None
    cheapest_hours: float | None = None
    cheapest_usd: float | None = None
    hours_high: float | None = None
    usd_high: float | None = None
    cheapest_usd_high: float | None = None
    mfu: float | None = None
    mfu_source: MfuSource | None = None


@dataclass
class CalibrationRow(Record):
    """The memory model against one variant's measured peak."""

    variant: str | None = None
    technique: str | None = None
    measured_gb: float | None = None
    model_gb: float | None = None
    seq_len: int | None = None
    predicted_gb: float | None = None
    error: float | None = None


@dataclass
class Calibration(Record):
    """The memory model on this run's peaks: the fitted overhead, each row, what the peaks measured."""

    overhead_gb: float | None = None
    rows: list[CalibrationRow] | None = None
    measured_on: str | None = None
    mean_abs_error: float | None = None


@dataclass
class OutOfSample(Record):
    """The memory model as it stood when the GPU check ran, against its peaks."""

    peaks: int | None = None
    within_10: int | None = None
    largest: float | None = None
    how: str | None = None


@dataclass
class GpuCheck(Record):
    """What the GPU check's record says of sizing (``bakeoff.decide.sizing.measured_on``)."""

    device: str | None = None
    commit: str | None = None
    peaks: int | None = None
    within_10: int | None = None
    largest: float | None = None
    out_of_sample: OutOfSample | None = None
    overhead: bool | None = None


@dataclass
class Sizing(Record):
    """What the report shows of sizing (``bakeoff.decide.sizing.report_data``)."""

    calibration: Calibration | None = None
    fits: list[SizedFit] | None = None
    gpu_check: GpuCheck | None = None


@dataclass
class AllIn(Record):
    """One variant all in on the sizing target (``bakeoff.decide.costs.all_in``): training on the cheapest card, its
    share of the search, its parent; each at ``sizing.mfu`` and at ``sizing.mfu_low`` (``_high``); bought alone."""

    variant: str | None = None
    card: str | None = None
    train_usd: float | None = None
    train_usd_high: float | None = None
    search_usd: float | None = None
    search_usd_high: float | None = None
    smallest_card: str | None = None
    smallest_gpus: int | None = None
    smallest_usd: float | None = None
    smallest_usd_high: float | None = None
    need_gb: float | None = None
    target: str | None = None
    parent: str | None = None
    parent_usd: float | None = None
    parent_usd_high: float | None = None
    usd: float | None = None
    usd_high: float | None = None
    lender: str | None = None
    search_users: int | None = None
    alone_usd: float | None = None
    alone_usd_high: float | None = None

    @property
    def alone(self) -> tuple[float, float]:
        """Bought alone: its whole search and its parent's (the shared range where a record predates it)."""
        return (
            self.usd if self.alone_usd is None else self.alone_usd,
            self.usd_high if self.alone_usd_high is None else self.alone_usd_high,
        )


@dataclass
class Money(Record):
    """The verdict's money (``bakeoff.decide.verdict.cost``): the prompt tokens a request saves, the variant all in,
    and the daily requests above which its own card costs less than prompting (``break_even_requests_per_day``; for
    an inconclusive verdict, ``break_even_if_gain_held_requests_per_day``)."""

    variant: str | None = None
    prompt_tokens_saved_per_request: float | None = None
    usd_saved_per_request: float | None = None
    train_wall_s_here: float | None = None
    all_in: AllIn | None = None
    serve_card: str | None = None
    serve_usd_per_hour: float | None = None
    serve_usd_per_day: float | None = None
    prompt_usd_per_request: float | None = None
    priced_by: str | None = None
    break_even_requests_per_day: float | None = None
    break_even_if_gain_held_requests_per_day: float | None = None


@dataclass
class Spend(Record):
    """What one arm's search spent (``bakeoff.decide.costs.budget``): its own or the lender's whose search it used,
    the share it carries of it, trials, training tokens, steps and seconds, and its carried part."""

    own: bool | None = None
    lender: str | None = None
    share: float | None = None
    trials: int | None = None
    adopted_trial: int | None = None
    tokens: float | None = None
    steps: int | None = None
    seconds: float | None = None
    carried_tokens: float | None = None
    carried_seconds: float | None = None

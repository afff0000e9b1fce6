"""When a training run stops and how it ended: the validation figures early stopping and the converged flag read.

    rule = EarlyStop(patience_steps=90, noise_z=2.0)
    rule.update(step, per_row_losses)        # True: stop (no real improvement within the patience)
    convergence(history, val_curve, stopped_early, improving_drop, rule.still_improving())

Validation (``val_curve``)
    A run's validation loss at an evaluation is the mean over validation rows of each row's mean per-token loss of
    its answer (DPO: the trainer's mean loss alone); ``se`` is its standard error over those rows (sample std ÷ √n).
The rule (``EarlyStop``)
    An evaluation is a *real improvement* over the reference evaluation (the last real one) when the smoothed
    per-row losses (each row's mean over the last ``SMOOTHING`` evaluations) fell by more than ``noise_z`` standard
    errors of the paired per-row drop (the same rows both times, so row difficulty cancels). A slow fall adds up
    until it counts; a bump of noise does not reset anything. Early stopping ends a run after ``patience`` steps (a
    share of ``max_steps``) and at least ``SMOOTHING`` evaluations without a real improvement; the trainer keeps the
    best raw evaluation's weights. ``still improving``: the last evaluation is a real improvement over the one a
    patience earlier.
Training loss (``loss_drop``)
    The fall of the training loss over the run's last quarter, the judgement where no per-row validation exists.
"""

from __future__ import annotations


def loss_drop(history: list[dict], share: float = 0.25) -> float | None:
    """How much the training loss fell over the last ``share`` of the logged steps, as a share of where that stretch
    started: the least-squares line through its points, (start − end) ÷ start. At least two points are used (the
    last two when the stretch holds fewer); None with fewer than two. 0.36 means it fell 36%."""
    if len(history) < 2:
        return None
    last = history[-1]["step"]
    tail = [h for h in history if h["step"] >= last * (1 - share)]
    tail = tail if len(tail) >= 2 else history[-2:]
    xs, ys = [h["step"] for h in tail], [h["loss"] for h in tail]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    start = my + slope * (xs[0] - mx)
    return (-slope * (xs[-1] - xs[0]) / start) if start > 0 else None


SMOOTHING = 3  # evaluations averaged per row before two evaluations are compared


def row_stats(rows: list[float]) -> tuple[float, float]:
    """(mean, standard error) of per-row validation losses."""
    n = len(rows)
    mean = sum(rows) / n
    var = sum((x - mean) ** 2 for x in rows) / (n - 1) if n > 1 else 0.0
    return mean, (var / n) ** 0.5


class EarlyStop:
    """The noise-aware stopping rule (see the module's text). Feed it each evaluation's per-row losses (the same
    rows, in the same order, every time); ``update`` returns True when the run should stop.

        rule = EarlyStop(patience_steps=75, noise_z=2.0)
        rule.update(step, row_losses)   # → False while the smoothed curve still falls by more than its noise
    """

    def __init__(self, patience_steps: int, noise_z: float = 2.0):
        self.patience, self.z = patience_steps, noise_z
        self.evals: list[tuple[int, list[float]]] = []  # (step, per-row losses)
        self.ref: tuple[int, list[float]] | None = None  # the last real improvement (step, smoothed rows)
        self.first_stop: int | None = None  # the first step the rule said stop (whether or not the run did)

    def smoothed(self, upto: int | None = None) -> list[float]:
        """Each row's mean over the last ``SMOOTHING`` evaluations (up to evaluation index ``upto``)."""
        evals = self.evals[: (len(self.evals) if upto is None else upto + 1)][-SMOOTHING:]
        return [sum(r[i] for _, r in evals) / len(evals) for i in range(len(evals[0][1]))]

    def real_drop(self, before: list[float], now: list[float]) -> tuple[bool, float, float]:
        """(a real improvement?, mean drop, its paired standard error) from ``before`` to ``now``."""
        drop, se = row_stats([b - a for b, a in zip(before, now)])
        return drop > self.z * se and drop > 0, drop, se

    def update(self, step: int, rows: list[float]) -> bool:
        self.evals.append((step, list(rows)))
        now = self.smoothed()
        if self.ref is None or self.real_drop(self.ref[1], now)[0]:
            self.ref = (step, now)
            return False
        since = sum(1 for s, _ in self.evals if s > self.ref[0])
        stop = step - self.ref[0] >= self.patience and since >= SMOOTHING
        if stop and self.first_stop is None:
            self.first_stop = step
        return stop

    def still_improving(self) -> bool | None:
        """Whether the last evaluation is a real improvement over the one a patience earlier (None: too few)."""
        if len(self.evals) < 2:
            return None
        last = self.evals[-1][0]
        earlier = [i for i, (s, _) in enumerate(self.evals) if s <= last - self.patience] or [0]
        return self.real_drop(self.smoothed(earlier[-1]), self.smoothed())[0]


def convergence(
    history: list[dict],
    val_curve: list[dict],
    stopped_early: bool,
    improving_drop: float,
    improving: bool | None = None,
) -> str:
    """The run's state when it ended: ``stopped early`` (no real improvement of the validation loss within the
    patience; the best weights were kept), ``still improving`` (by ``EarlyStop.still_improving``, given as
    ``improving``, where per-row validation losses exist; else its last validation loss is its lowest and the
    training loss fell more than ``improving_drop`` over the last quarter: more steps would likely change its
    rank), or ``converged``; ``stopped early while still improving`` names a stopped run the rule still saw
    falling. Without per-row losses, the validation curve decides: ``still improving`` while its last loss is its
    lowest, ``converged`` once it is not; with fewer than 2 validation points, a falling training loss says ``still
    improving`` and nothing says ``converged`` (a training loss cannot show that a run stopped gaining)."""
    if improving is not None:
        if stopped_early:
            return "stopped early while still improving" if improving else "stopped early"
        return "still improving" if improving else "converged"
    if stopped_early:
        return "stopped early"
    if len(val_curve) >= 2:
        return "still improving" if val_curve[-1]["loss"] < min(v["loss"] for v in val_curve[:-1]) else "converged"
    drop = loss_drop(history)
    return "still improving" if drop is not None and drop > improving_drop else "not judged (under 2 validation points)"

"""Successive halving's report to Optuna at each rung (``PruningReport``, a TrainerCallback) and its rule: a trial
Optuna would prune stops only when its validation loss is worse than the rung's best beyond the paired noise
(``beyond_noise``). Imports transformers and Optuna when loaded: the search loads it when a trial starts.
"""

from __future__ import annotations

import optuna
from transformers import TrainerCallback

from bakeoff.train.stopping import row_stats


def beyond_noise(
    value: float, others: list[tuple[float, list | None]], rows: list | None, z: float, minimize: bool = True
) -> bool:
    """Whether ``value`` (this trial's validation loss at a step, ``rows`` its per-row losses) is worse than the best
    of ``others`` (the other trials' (loss, per-row losses) at the same step) by more than ``z`` standard errors of
    the gap. Both are scored on the same validation rows, so the gap's noise is the standard error of the per-row
    differences (paired, as early stopping judges two evaluations); without per-row losses on both sides (DPO) any
    gap counts. Successive halving may stop a trial only then."""
    if not others:
        return True
    best_value, best_rows = (min if minimize else max)(others, key=lambda o: o[0])
    gap = value - best_value if minimize else best_value - value
    paired = rows and best_rows and len(rows) == len(best_rows) and len(rows) > 1
    se = row_stats([a - b for a, b in zip(rows, best_rows)])[1] if paired else 0.0
    return gap > z * se


class PruningReport(TrainerCallback):
    """Reports each evaluation's loss to ``trial`` (its per-row losses kept in the trial, for the trials after it)
    and stops the run when Optuna prunes it and its loss is worse than the best at that step beyond the paired noise
    (``beyond_noise``; the trainer's stopping rule puts the per-row losses in ``eval_row_losses``)."""

    def __init__(self, trial, noise_z: float = 2.0):
        self.trial, self.noise_z = trial, noise_z

    def on_evaluate(self, args, state, control, metrics=None, **kw):
        trial = self.trial
        if not metrics or "eval_loss" not in metrics:
            return
        if trial.study.direction != optuna.study.StudyDirection.MINIMIZE:
            return  # judged on the task metric at the end: a loss at a rung says nothing of it
        step, value, rows = state.global_step, metrics["eval_loss"], metrics.get("eval_row_losses")
        trial.report(value, step)
        if rows:
            trial.set_user_attr(f"rows@{step}", [round(x, 6) for x in rows])
        if not trial.should_prune():
            return
        done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        others = [
            (t.intermediate_values[step], t.user_attrs.get(f"rows@{step}"))
            for t in trial.study.get_trials(deepcopy=False, states=done)
            if step in t.intermediate_values
        ]
        if beyond_noise(value, others, rows, self.noise_z):
            raise optuna.TrialPruned(f"validation loss {value:.4f} at step {step}")

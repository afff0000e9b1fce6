"""What the training loop (``bakeoff.train.trainer``) adds to TRL's trainer, each a class of its own: the steps and
the memory budget (``BudgetSteps``), the measured micro-batches and the loss the kernels choose (``MeasuredLoss``,
mixed in front of the technique's trainer class by ``measured``), early stopping on validation (``StopOnRule``), and
the live loss curves in MLflow (``LiveCurves``). Imports transformers when loaded: the trainer loads it when a run
starts, not before.
"""

from __future__ import annotations

import torch
from transformers import Trainer, TrainerCallback

from bakeoff.core.measure import MB, PeakMemory
from bakeoff.core.step_timing import StepLog
from bakeoff.train import kernels
from bakeoff.train.stopping import EarlyStop, row_stats


class MemoryBudgetExceeded(MemoryError):
    """The run passed ``memory_budget_gb``: it stands for a card that would have run out of memory."""


class BudgetSteps(TrainerCallback):
    """Every optimizer step into the run's ``StepLog``; the memory budget checked after every micro-batch and step;
    the last step always evaluated (and kept) when the run evaluates."""

    def __init__(self, log: StepLog, mem: PeakMemory, budget_gb: float | None, evaluate: bool):
        self.log, self.mem, self.budget_gb, self.evaluate = log, mem, budget_gb, evaluate

    def check_budget(self) -> None:
        if self.budget_gb is not None and self.mem.peak_now_bytes() > self.budget_gb * 1024 * MB:
            raise MemoryBudgetExceeded(
                f"peak memory {self.mem.peak_now_bytes() / MB:.0f} MB passed "
                f"memory_budget_gb {self.budget_gb} (out of memory on a card of that size)"
            )

    def on_step_begin(self, args, state, control, **kw):
        self.log.begin_step()

    def on_substep_end(self, args, state, control, **kw):
        self.check_budget()

    def on_step_end(self, args, state, control, **kw):
        self.log.end_step()
        self.check_budget()
        if self.evaluate and state.global_step >= state.max_steps:  # the last step is always judged (and kept)
            control.should_evaluate = True
            control.should_save = control.should_save or args.load_best_model_at_end


class MeasuredLoss:
    """In front of a technique's trainer class: every micro-batch fed into ``step_log``; ``loss_logits="labelled"``:
    the SFT loss with the output head at labelled tokens only (``kernels.labelled_loss``); ``val_rows``: a list each
    evaluation appends its per-row validation losses to (SFT only)."""

    def __init__(self, *args, step_log: StepLog, loss_logits: str = "all", val_rows: list | None = None, **kw):
        self.bakeoff_log, self.bakeoff_loss_logits, self.bakeoff_val_rows = step_log, loss_logits, val_rows
        super().__init__(*args, **kw)
        if loss_logits == "labelled" and torch.cuda.is_available():  # the labelled loss's shape known on the host
            self.data_collator = kernels.LabelSpan(self.data_collator)

    def training_step(self, model, inputs, num_items_in_batch=None):
        self.bakeoff_log.add_micro_batch(inputs)
        return super().training_step(model, inputs, num_items_in_batch)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        from trl import SFTTrainer

        sft = isinstance(self, SFTTrainer)
        span = inputs.pop(kernels.LabelSpan.KEY, None)  # a GPU's labelled loss: its shape, counted on the host
        if self.bakeoff_val_rows is not None and not model.training and "labels" in inputs and sft:
            with self.accelerator.autocast():  # per-row losses for the stopping rule, and the same mean loss
                loss = kernels.labelled_loss(model, inputs, num_items_in_batch, self.bakeoff_val_rows, span)
            return (loss, {"loss": loss}) if return_outputs else loss
        if self.bakeoff_loss_logits == "labelled" and "labels" in inputs:
            with self.accelerator.autocast():  # the wrapper's forward, which carries autocast, is bypassed
                loss = kernels.labelled_loss(model, inputs, num_items_in_batch, span=span)
            return (loss, {"loss": loss}) if return_outputs else loss
        if torch.cuda.is_available() or not sft:
            return super().compute_loss(
                model, inputs, return_outputs=return_outputs, num_items_in_batch=num_items_in_batch
            )
        # On CPU, SFT uses the model's own loss: it sums over completion tokens and divides by the tokens of the
        # whole accumulated batch (num_items_in_batch), as TRL's does, without TRL's per-step entropy and token
        # accuracy over the full logits, which cost a CPU dearly (huggingface/trl#7066).
        return Trainer.compute_loss(self, model, {**inputs, "use_cache": False}, return_outputs, num_items_in_batch)


def measured(trainer_cls: type) -> type:
    """``trainer_cls`` (TRL's SFT or DPO trainer, as the technique chose) with ``MeasuredLoss`` in front of it."""
    return type(f"Measured{trainer_cls.__name__}", (MeasuredLoss, trainer_cls), {})


class StopOnRule(TrainerCallback):
    """Each evaluation's per-row losses (every process's, in order) fed to ``rule``; when ``stop``, the run ended
    when the rule says so (the best evaluation's weights are kept by the trainer)."""

    def __init__(self, rule: EarlyStop, rows: list, stop: bool, gather):
        self.rule, self.rows, self.stop, self.gather = rule, rows, stop, gather

    def on_evaluate(self, args, state, control, metrics=None, **kw):
        gathered = [x for part in self.gather(list(self.rows)) for x in part]
        self.rows.clear()
        if not gathered and metrics and "eval_loss" in metrics:  # no per-row losses (DPO): the mean alone
            gathered = [metrics["eval_loss"]]
        elif len(gathered) > 1 and metrics is not None:  # read by the search's pruner (bakeoff.search.trials)
            metrics["eval_loss_se"] = row_stats(gathered)[1]
            metrics["eval_row_losses"] = list(gathered)
        if gathered and self.rule.update(state.global_step, gathered) and self.stop:
            control.should_training_stop = True


class LiveCurves(TrainerCallback):
    """Logs every logged training loss (``train_loss``) and every evaluation's loss (``val_loss_during_training``)
    into the active MLflow run at its optimizer step, from the first process only."""

    NAMES = (("loss", "train_loss"), ("eval_loss", "val_loss_during_training"))

    def on_log(self, args, state, control, logs=None, **kw):
        import mlflow

        got = {name: float(logs[k]) for k, name in self.NAMES if isinstance((logs or {}).get(k), (int, float))}
        if got and state.is_world_process_zero:
            mlflow.log_metrics(got, step=state.global_step)

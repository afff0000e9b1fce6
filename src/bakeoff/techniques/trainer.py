"""The one training routine every technique shares: TRL's trainer, measured, within a memory budget, resumable from
checkpoints and spread over several processes.

    from bakeoff.techniques.trainer import train
    record = train(get_technique("lora"), variant, base_dir, rows, out_dir, "bf16", work_dir)

Measurement (``bakeoff.measure``): every micro-batch's non-padding tokens and every optimizer step's wall time go
into a ``StepLog``; the training window's peak memory into a ``PeakMemory``. Several processes (``processes: N``)
run under torchrun (CPU, gloo) or accelerate launch (GPUs); their figures are gathered into one record.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import torch

from bakeoff.measure import MB, PeakMemory, StepLog, count_params, dir_mb
from bakeoff.runs import Skipped
from bakeoff.stopping import EarlyStop, convergence, loss_drop, row_stats
from bakeoff.techniques import kernels
from bakeoff.techniques.base import Technique


class MemoryBudgetExceeded(MemoryError):
    """The run passed ``memory_budget_gb``: it stands for a card that would have run out of memory."""


def _measured(trainer_cls, log: StepLog, mem: PeakMemory, budget_gb: float | None, evaluate: bool = False,
              loss_logits: str = "all", val_rows: list | None = None):
    """``trainer_cls`` feeding every micro-batch and optimizer step into ``log``, and enforcing the budget;
    ``loss_logits="labelled"``: the SFT loss with the output head at labelled tokens only (``kernels.labelled_loss``);
    ``val_rows``: a list each evaluation appends its per-row validation losses to (SFT only)."""
    from transformers import Trainer, TrainerCallback
    from trl import SFTTrainer

    def check_budget():
        if budget_gb is not None and mem.peak_now_bytes() > budget_gb * 1024 * MB:
            raise MemoryBudgetExceeded(f"peak memory {mem.peak_now_bytes() / MB:.0f} MB passed "
                                       f"memory_budget_gb {budget_gb} (out of memory on a card of that size)")

    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            log.begin_step()

        def on_substep_end(self, args, state, control, **kw):
            check_budget()

        def on_step_end(self, args, state, control, **kw):
            log.end_step()
            check_budget()
            if evaluate and state.global_step >= state.max_steps:  # the last step is always judged (and kept)
                control.should_evaluate = True
                control.should_save = control.should_save or args.load_best_model_at_end

    class Measured(trainer_cls):
        def training_step(self, model, inputs, num_items_in_batch=None):
            log.add_micro_batch(inputs)
            return super().training_step(model, inputs, num_items_in_batch)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if val_rows is not None and not model.training and "labels" in inputs and isinstance(self, SFTTrainer):
                with self.accelerator.autocast():  # per-row losses for the stopping rule, and the same mean loss
                    loss = kernels.labelled_loss(model, inputs, num_items_in_batch, rows=val_rows)
                return (loss, {"loss": loss}) if return_outputs else loss
            if loss_logits == "labelled" and "labels" in inputs:
                with self.accelerator.autocast():  # the wrapper's forward, which carries autocast, is bypassed
                    loss = kernels.labelled_loss(model, inputs, num_items_in_batch)
                return (loss, {"loss": loss}) if return_outputs else loss
            if torch.cuda.is_available() or not isinstance(self, SFTTrainer):
                return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                            num_items_in_batch=num_items_in_batch)
            # On CPU, SFT uses the model's own loss: it sums over completion tokens and divides by the tokens of
            # the whole accumulated batch (num_items_in_batch), as TRL's does, without TRL's per-step entropy
            # and token accuracy over the full logits, which cost a CPU dearly (huggingface/trl#7066).
            return Trainer.compute_loss(self, model, {**inputs, "use_cache": False}, return_outputs,
                                        num_items_in_batch)

    return Measured, Steps()


def last_checkpoint(work_dir: Path) -> Path | None:
    """The newest complete ``checkpoint-<step>`` folder the trainer left in ``work_dir``."""
    ckpts = [p for p in Path(work_dir).glob("checkpoint-*") if (p / "trainer_state.json").exists()]
    return max(ckpts, key=lambda p: int(p.name.split("-")[-1])) if ckpts else None


def rank() -> int:
    """This process's rank under torchrun / accelerate launch (0 alone)."""
    import os

    return int(os.environ.get("RANK", "0"))


def _gather(obj) -> list:
    """Every process's ``obj`` (just ``[obj]`` in a single process)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def combine(per_process: list[dict]) -> dict:
    """One record from every process's figures: tokens and tokens/s add up (the processes run side by side),
    step time is the slowest process's, peak memory is kept per process and as the largest."""
    if len(per_process) == 1:
        return per_process[0]
    out = dict(per_process[0])
    for k in ("tokens_seen", "train_tokens_per_s"):
        if all(k in m for m in per_process):
            out[k] = round(sum(m[k] for m in per_process), 2)
    if all("train_step_s_median" in m for m in per_process):
        out["train_step_s_median"] = max(m["train_step_s_median"] for m in per_process)
    for k in [k for k in out if k.startswith("train_peak_")]:
        out[k] = max(m.get(k, 0) for m in per_process)
        out[k + "_per_process"] = [m.get(k) for m in per_process]
    out["processes"] = len(per_process)
    return out


def train(technique: Technique, variant, base_dir: Path, rows: list, out_dir: Path, precision: str,
          work_dir: Path, parent_dir: Path | None = None, resume: Path | None = None,
          val_rows: list | None = None, extra_callbacks: list = (), kernel_choice: dict | None = None,
          judge_patience: float | None = None) -> dict:
    # long: build, measure, train, save and record, in the order they happen
    """Train ``variant`` on ``rows``, save into ``out_dir``; return the measured record.

    ``resume``: a checkpoint folder to continue from (optimizer, scheduler, RNG and data position restored).
    ``val_rows``: validation loss every ``eval_steps`` and at the last step, early stopping on it (the best
    evaluation's weights are the ones saved) and the convergence judgement (``bakeoff.stopping``).
    ``extra_callbacks``: more TrainerCallbacks (the tune stage's pruning report).
    ``kernel_choice``: how the step runs (``kernels.choose``'s shape), instead of this platform's choice (the
    speed benchmark's "before" side).
    ``judge_patience``: the patience the stopping rule judges by when the run itself never stops early (a tune
    trial): ``would_stop_at`` then says where the variant's own run would have stopped (None: it would not have).
    Under torchrun / accelerate launch every process trains its share; only rank 0 saves.
    """
    from transformers import set_seed

    from bakeoff.models import load_tokenizer
    from bakeoff.techniques.backends import trl_cpu

    trl_cpu.install()
    set_seed(variant.train.seed)
    tok = load_tokenizer(base_dir)
    log = StepLog(warmup_steps_excluded=variant.train.warmup_steps_excluded)
    t = variant.train
    evaluate = bool(val_rows) and t.eval_steps > 0
    trainer_cls, args = technique.trainer_parts(variant, precision, work_dir, evaluate=evaluate)
    model = technique.build(base_dir, variant, precision, parent_dir)
    from trl import SFTTrainer

    chosen = kernel_choice or kernels.choose(t, model, precision, sft=issubclass(trainer_cls, SFTTrainer),
                                             backend=variant.backend)
    kernels.apply(model, chosen)
    activations = kernels.ActivationDtype(model)
    attn = str(getattr(model.config, "_attn_implementation", ""))
    if variant.train.batching == "padding_free" and "flash" not in attn:
        raise Skipped(f"padding_free batching needs a flash-attention implementation; this model uses {attn!r}, "
                      f"which would let packed rows attend to each other (use group_by_length instead)")
    sizes = count_params(model)
    row_losses: list = []  # this evaluation's per-row validation losses (the stopping rule reads them)
    per_row = evaluate and kernels.plain_head(model) and variant.backend != "unsloth"  # else each evaluation's mean alone
    # without early stopping the rule still judges "still improving", over the run's last quarter
    judged = replace(t, early_stopping_patience=judge_patience) if judge_patience else t
    rule = EarlyStop(patience_steps(judged) or max(1, t.max_steps // 4), t.early_stopping_noise)
    with PeakMemory() as mem:  # the training window: the model is loaded, the trainer not yet built
        try:
            cls, steps_cb = _measured(trainer_cls, log, mem, t.memory_budget_gb, evaluate, chosen["loss_logits"],
                                      row_losses if per_row else None)
            # the stopping rule first: it puts the evaluation's standard error in the metrics the pruner reads
            callbacks = [steps_cb, *([Stopping(rule, row_losses, bool(t.early_stopping_patience))] if evaluate else []),
                         *extra_callbacks]
            trainer = cls(model=model, args=args, train_dataset=technique.dataset(rows), processing_class=tok,
                          eval_dataset=technique.dataset(val_rows) if evaluate else None, callbacks=callbacks)
            held = kernels.weight_dtypes(trainer.model)  # as the trainer holds them (TRL casts QLoRA's adapters)
            t0 = time.perf_counter()
            result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
            wall = time.perf_counter() - t0
        except BaseException as e:  # keep the peak reached: an `oom` result reports it
            e.partial_metrics = {**log.metrics(), **_peak(mem)}
            raise
    measured = combine(_gather({**log.metrics(), **mem.metrics("train")}))
    if rank() == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        technique.save(trainer.model, tok, out_dir)
    history = [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h]
    val_curve = [{"step": h["step"], "loss": round(h["eval_loss"], 5)} for h in trainer.state.log_history
                 if "eval_loss" in h]
    for point, (_, rows_) in zip(val_curve, rule.evals):
        if len(rows_) > 1:
            point["se"] = round(row_stats(rows_)[1], 5)
    stopped_early = trainer.state.global_step < t.max_steps
    drop = loss_drop(history)
    return {
        **sizes,
        **measured,
        "resumed_from_step": int(resume.name.split("-")[-1]) if resume else 0,
        "train_wall_s": round(wall, 2),
        "train_loss_final": round(history[-1]["loss"], 4) if history else None,
        "train_loss_mean": round(result.training_loss, 4),
        "adapter_mb": dir_mb(out_dir) if rank() == 0 else None,
        "effective_batch": t.effective_batch,
        "micro_batch": t.micro_batch,
        "grad_accum": t.grad_accum,
        "precision": precision,
        "loss_scaling": "dynamic (fp16)" if precision == "fp16" else None,  # the trainer's GradScaler
        "gradient_checkpointing": bool(t.gradient_checkpointing),
        "dtypes": {**held, "activations": activations.seen or "?"},  # weights as held, the MLP output as saved
        "kernels": kernels.summary(chosen),
        "kernel_choice": chosen,
        "stopped_at_step": trainer.state.global_step,
        "best_step": min(val_curve, key=lambda v: v["loss"])["step"] if val_curve else trainer.state.global_step,
        "train_loss_drop_last_quarter": round(drop, 4) if drop is not None else None,
        "convergence": convergence(history, val_curve, stopped_early, t.improving_drop,
                                   rule.still_improving() if rule.evals and len(rule.evals[0][1]) > 1 else None),
        "patience_steps": patience_steps(judged),
        "would_stop_at": rule.first_stop,
        "val_curve": val_curve,
        **({"backend_evidence": model.bakeoff_backend_evidence} if hasattr(model, "bakeoff_backend_evidence") else {}),
        "history": history,
    }


def patience_steps(t) -> int:
    """Early stopping's patience in steps: ``early_stopping_patience`` × ``max_steps`` (0: never stops)."""
    return max(1, round(t.early_stopping_patience * t.max_steps)) if t.early_stopping_patience else 0


def Stopping(rule: EarlyStop, rows: list, stop: bool):
    """A TrainerCallback feeding each evaluation's per-row losses (every process's, in order) to ``rule`` and, when
    ``stop``, ending the run when the rule says so (the best evaluation's weights are kept by the trainer)."""
    from transformers import TrainerCallback

    class _Stopping(TrainerCallback):
        def on_evaluate(self, args, state, control, metrics=None, **kw):
            gathered = [x for part in _gather(list(rows)) for x in part]
            rows.clear()
            if not gathered and metrics and "eval_loss" in metrics:  # no per-row losses (DPO): the mean alone
                gathered = [metrics["eval_loss"]]
            elif len(gathered) > 1 and metrics is not None:  # read by the search's pruner (bakeoff.search)
                metrics["eval_loss_se"] = row_stats(gathered)[1]
                metrics["eval_row_losses"] = list(gathered)
            if gathered and rule.update(state.global_step, gathered) and stop:
                control.should_training_stop = True

    return _Stopping()


def _peak(mem: PeakMemory) -> dict:
    mem.__exit__(None, None, None)  # read the peak now; the with-block's exit reads it again harmlessly
    return mem.metrics("train")


# ---------------------------------------------------------------- processes and resume

def launch_command(script: str, name: str, t) -> list[str]:
    """The command that runs ``script name`` as ``t.processes`` processes: accelerate launch on GPUs (with
    ``accelerate_config`` for FSDP or DeepSpeed), torchrun on CPU (accelerate cannot start CPU processes here)."""
    if torch.cuda.is_available():
        cmd = ["accelerate", "launch", "--num_processes", str(t.processes)]
        if t.accelerate_config:
            cmd += ["--config_file", t.accelerate_config]
        return cmd + [script, name]
    return ["torchrun", "--standalone", "--nproc_per_node", str(t.processes), script, name]


def launch(script: str, name: str, params, v) -> None:
    """Run this stage as ``v.train.processes`` processes. When any of them fails (a rank that raised, ran out of
    memory or was killed), the arm's record says so, and so does its MLflow run: the stage itself succeeds, so
    ``dvc repro`` goes on with the other arms."""
    from bakeoff import runs

    record_path = runs.train_record(name)
    for old in rank_failure_path(name, 0).parent.glob("rank-*.json"):
        old.unlink()
    record_path.unlink(missing_ok=True)  # what rank 0 writes now is this launch's, nothing older
    t0 = time.time()
    cmd = launch_command(script, name, v.train)
    print("launch:", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd).returncode
    if rc != 0:
        record_failed_launch(params, name, v, rc, t0)


def rank_failure_path(name: str, r: int) -> Path:
    """Where rank ``r`` of a multi-process run writes its failure: beside the run's scratch folder, which rank 0
    empties when it starts."""
    from bakeoff import runs

    return runs.work_dir(f"{name}.ranks") / f"rank-{r}.json"


def record_failed_launch(params, name: str, v, rc: int, t0: float) -> dict:
    """The arm's record after a multi-process run that exited ``rc`` != 0: rank 0's own record when it wrote one
    (its status turned to the failure of the others), else a new one; every failed rank's status and reason, from
    the files the ranks wrote (``rank_failure_path``), or the launcher's exit code when none could write."""
    from bakeoff import runs, tracking

    failures = [runs.read_json(f) for f in sorted(rank_failure_path(name, 0).parent.glob("rank-*.json"))]
    said = ("; ".join(f"rank {f['rank']} {f['status']}: {f['error'].splitlines()[0]}" for f in failures) or
            f"the {v.train.processes}-process launch exited with code {rc} before a rank could say why")
    own = runs.read_json(runs.train_record(name))  # rank 0's, written by this launch (launch() removed older ones)
    if own and own.get("status") != "ok":  # rank 0 failed too: its reason first, the other ranks' after it
        status, error = own["status"], f"{own.get('error', '')}\n{said}".strip()
    else:
        status, error = (failures[0]["status"] if failures else "failed"), said
    record = own or {"name": name, "kind": "variant", "technique": v.technique, "backend": v.backend,
                     "parent": v.parent}
    record.update(status=status, error=error, metrics={}, ranks_failed=failures)
    out = runs.fresh_dir(runs.variant_dir(name))
    (out / "NOT_TRAINED").write_text(f"{status}: {error}\n")
    state = runs.work_dir(name) / "resume.json"  # rank 0 writes its MLflow run there once it opened it
    run_id = (runs.read_json(state) or {}).get("run_id") if state.exists() and state.stat().st_mtime >= t0 else None
    with tracking.resume(params, run_id, name, "variant", v.technique, {}) as run:
        record["run_id"] = run.info.run_id
        tracking.mark(record)
    record["device"] = runs.device_name()
    runs.write_json(runs.train_record(name), record)
    print(f"[{name}] {status}: {error.splitlines()[0]}", flush=True)
    return record


def guard_rank(name: str, work) -> None:
    """Run ``work()`` on a rank other than 0; a failure is written where the launcher reads it, then raised, so
    torchrun or accelerate stops the other ranks."""
    from bakeoff import runs

    try:
        work()
    except Exception as e:
        status, reason = runs.classify(e)
        runs.write_json(rank_failure_path(name, rank()), {"rank": rank(), "status": status, "error": reason})
        raise


def fingerprint(logged: dict, data_hash: str, parent_run_id: str | None) -> str:
    """What a checkpoint must match to be resumed: these params, this data, the parent's run."""
    blob = json.dumps([logged, data_hash, parent_run_id], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def resumable(work: Path, fp: str, checkpoint_steps: int) -> tuple[Path | None, str | None]:
    """(checkpoint, MLflow run id) to continue from: the newest checkpoint in ``work`` when its ``resume.json``
    matches ``fp``; (None, None) when there is nothing to resume."""
    state_path = Path(work) / "resume.json"
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    ckpt = last_checkpoint(work) if checkpoint_steps and state.get("fingerprint") == fp else None
    return ckpt, (state.get("run_id") if ckpt else None)

"""The interface every technique implements, and the one training routine they share.

A technique decides *what* trains (``build``), *on what rows* (``load_rows`` / ``dataset``), *with which TRL
trainer* (``trainer_parts``) and *what is saved* (``save``). Batching, loss normalisation, optimizer, schedule
and measurement are the same for all, so variants differ only in what makes them that variant.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import torch

from bakeoff.data import Example, load_examples
from bakeoff.measure import MB, PeakMemory, StepLog, count_params, dir_mb
from bakeoff.runs import Skipped


class MemoryBudgetExceeded(MemoryError):
    """The run passed ``memory_budget_gb``: it stands for a card that would have run out of memory."""


class Technique:
    name: str = ""
    defaults: dict = {}  # technique-specific options and their defaults

    def validate(self, options: dict) -> Iterator[tuple[str, str]]:
        """Yield (option, message) for every bad option value."""
        return iter(())

    def build(self, base_dir: Path, variant, precision: str, parent_dir: Path | None = None) -> torch.nn.Module:
        raise NotImplementedError

    def save(self, model, tok, out_dir: Path) -> None:
        raise NotImplementedError

    def load_for_eval(self, base_dir: Path, out_dir: Path, variant, precision: str):
        """The trained model as it will be served: by default the adapter merged into the base."""
        from bakeoff.models import load_for_eval

        return load_for_eval(base_dir, out_dir)

    @staticmethod
    def _is_adapter(out_dir: Path) -> bool:
        return (Path(out_dir) / "adapter_config.json").exists()

    def served_as(self, out_dir: Path) -> str:
        """How ``load_for_eval`` serves it: ``merged`` (adapter folded into the weights), ``unmerged`` or ``full``."""
        return "merged" if self._is_adapter(out_dir) else "full"

    def load_unmerged(self, base_dir: Path, out_dir: Path, variant, precision: str):
        """The adapter kept apart from the base (for unmerged latency), or None where that is how it is served."""
        if not self._is_adapter(out_dir):
            return None
        from peft import PeftModel

        from bakeoff.models import device, load_model

        return PeftModel.from_pretrained(load_model(base_dir), out_dir).to(device()).eval()

    def lm_eval_model(self, base_dir: Path, out_dir: Path):
        """lm-eval's ``hf`` model_args that load this variant from its saved files (None: pass the loaded model)."""
        if self._is_adapter(out_dir):
            return {"pretrained": str(base_dir), "peft": str(out_dir)}
        return {"pretrained": str(out_dir)}

    def load_rows(self, data_dir: Path) -> list:
        return load_examples(Path(data_dir) / "train.jsonl")

    def dataset(self, rows: list):
        """Conversational prompt-completion rows: TRL applies the chat template and masks the prompt."""
        from datasets import Dataset

        return Dataset.from_list([{"prompt": e.messages,
                                   "completion": [{"role": "assistant", "content": e.completion}]} for e in rows])

    def trainer_parts(self, variant, precision: str, output_dir: Path):
        """(TRL trainer class, its config) for this technique."""
        from trl import SFTConfig, SFTTrainer

        return SFTTrainer, SFTConfig(**common_args(variant.train, precision, output_dir),
                                     max_length=variant.train.max_seq_len, completion_only_loss=True,
                                     padding_free=variant.train.batching == "padding_free")


def common_args(train, precision: str, output_dir: Path) -> dict:
    """The TrainingArguments every technique shares: the fairness contract of train_defaults."""
    return dict(
        output_dir=str(output_dir),
        max_steps=train.max_steps,
        per_device_train_batch_size=train.micro_batch,
        gradient_accumulation_steps=train.grad_accum,
        learning_rate=train.lr,
        lr_scheduler_type=train.lr_scheduler,
        warmup_steps=int(round(train.warmup_ratio * train.max_steps)),
        weight_decay=train.weight_decay,
        optim=train.optimizer,
        gradient_checkpointing=train.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False},
        train_sampling_strategy={"group_by_length": "group_by_length", "sequential": "sequential"}.get(train.batching,
                                                                                                    "random"),
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        use_cpu=not torch.cuda.is_available(),
        logging_steps=train.logging_steps,
        save_strategy="steps" if train.checkpoint_steps else "no",
        save_steps=train.checkpoint_steps or 500,
        save_total_limit=1 if train.checkpoint_steps else None,  # the newest checkpoint is all a resume needs
        ddp_backend="gloo" if not torch.cuda.is_available() and train.processes > 1 else None,
        ddp_find_unused_parameters=False if train.processes > 1 else None,
        report_to=[],
        seed=train.seed,
        data_seed=train.seed,
        dataloader_num_workers=0,
    )


def _measured(trainer_cls, log: StepLog, mem: PeakMemory, budget_gb: float | None):
    """``trainer_cls`` feeding every micro-batch and optimizer step into ``log``, and enforcing the budget."""
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

    class Measured(trainer_cls):
        def training_step(self, model, inputs, num_items_in_batch=None):
            log.add_micro_batch(inputs)
            return super().training_step(model, inputs, num_items_in_batch)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
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
          work_dir: Path, parent_dir: Path | None = None, resume: Path | None = None) -> dict:
    """Train ``variant`` on ``rows``, save into ``out_dir``; return the measured record.

    ``resume``: a checkpoint folder to continue from (optimizer, scheduler, RNG and data position restored).
    Under torchrun / accelerate launch every process trains its share; only rank 0 saves.
    """
    from transformers import set_seed

    from bakeoff.models import load_tokenizer
    from bakeoff.techniques import _trl_cpu

    _trl_cpu.install()
    set_seed(variant.train.seed)
    tok = load_tokenizer(base_dir)
    log = StepLog(warmup_steps_excluded=variant.train.warmup_steps_excluded)
    model = technique.build(base_dir, variant, precision, parent_dir)
    attn = str(getattr(model.config, "_attn_implementation", ""))
    if variant.train.batching == "padding_free" and "flash" not in attn:
        raise Skipped(f"padding_free batching needs a flash-attention implementation; this model uses {attn!r}, "
                      f"which would let packed rows attend to each other (use group_by_length instead)")
    sizes = count_params(model)
    trainer_cls, args = technique.trainer_parts(variant, precision, work_dir)
    with PeakMemory() as mem:  # the training window: the model is loaded, the trainer not yet built
        try:
            cls, steps_cb = _measured(trainer_cls, log, mem, variant.train.memory_budget_gb)
            trainer = cls(model=model, args=args, train_dataset=technique.dataset(rows), processing_class=tok,
                          callbacks=[steps_cb])
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
    t = variant.train
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
        "history": history,
    }


def _peak(mem: PeakMemory) -> dict:
    mem.__exit__(None, None, None)  # read the peak now; the with-block's exit reads it again harmlessly
    return mem.metrics("train")

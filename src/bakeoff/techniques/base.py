"""The interface every technique implements, and the one training loop they share (TRL's SFTTrainer).

A technique decides *what* trains (``build``) and *what is saved* (``save``); batching, loss, optimizer,
schedule and measurement are the same for all, so variants differ only in what makes them that variant.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import torch

from bakeoff.data import Example
from bakeoff.measure import PeakMemory, StepLog, count_params, dir_mb


class Technique:
    name: str = ""
    defaults: dict = {}  # technique-specific options and their defaults

    def validate(self, options: dict) -> Iterator[tuple[str, str]]:
        """Yield (option, message) for every bad option value."""
        return iter(())

    def build(self, base_dir: Path, variant, precision: str) -> torch.nn.Module:
        raise NotImplementedError

    def save(self, model, tok, out_dir: Path) -> None:
        raise NotImplementedError


def sft_dataset(examples: list[Example]):
    """Conversational prompt-completion rows: TRL applies the chat template and masks the prompt."""
    from datasets import Dataset

    return Dataset.from_list([{"prompt": e.messages, "completion": [{"role": "assistant", "content": e.completion}]}
                              for e in examples])


def _measured_trainer(log: StepLog):
    """SFTTrainer that feeds every micro-batch and every optimizer step into ``log``."""
    from transformers import Trainer, TrainerCallback
    from trl import SFTTrainer

    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            log.begin_step()

        def on_step_end(self, args, state, control, **kw):
            log.end_step()

    class MeasuredSFTTrainer(SFTTrainer):
        def training_step(self, model, inputs, num_items_in_batch=None):
            log.add_micro_batch(inputs)
            return super().training_step(model, inputs, num_items_in_batch)

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if torch.cuda.is_available():
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            # TRL's fused LM head runs a Triton kernel, which has no CPU driver, and its per-step entropy and
            # token accuracy cost a CPU dearly: use the model's own loss, which sums over completion tokens and
            # divides by the tokens of the whole accumulated batch (num_items_in_batch), as TRL's does.
            inputs = {**inputs, "use_cache": False}
            return Trainer.compute_loss(self, model, inputs, return_outputs, num_items_in_batch)

    return MeasuredSFTTrainer, Steps()


def sft_config(train, precision: str, output_dir: Path):
    from trl import SFTConfig

    cuda = torch.cuda.is_available()
    return SFTConfig(
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
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        use_cpu=not cuda,
        max_length=train.max_seq_len,
        completion_only_loss=True,
        logging_steps=train.logging_steps,
        save_strategy="no",
        report_to=[],
        seed=train.seed,
        data_seed=train.seed,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )


def train(technique: Technique, variant, base_dir: Path, train_examples: list[Example], out_dir: Path,
          precision: str, work_dir: Path) -> dict:
    """Train ``variant`` on ``train_examples``, save into ``out_dir``; return the measured record."""
    from transformers import set_seed

    from bakeoff.models import load_tokenizer

    set_seed(variant.train.seed)
    tok = load_tokenizer(base_dir)
    model = technique.build(base_dir, variant, precision)
    sizes = count_params(model)
    log = StepLog(warmup_steps_excluded=variant.train.warmup_steps_excluded)
    trainer_cls, steps_cb = _measured_trainer(log)
    trainer = trainer_cls(model=model, args=sft_config(variant.train, precision, work_dir),
                          train_dataset=sft_dataset(train_examples), processing_class=tok, callbacks=[steps_cb])
    with PeakMemory() as mem:
        t0 = time.perf_counter()
        result = trainer.train()
        wall = time.perf_counter() - t0
    out_dir.mkdir(parents=True, exist_ok=True)
    technique.save(trainer.model, tok, out_dir)
    history = [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h]
    t = variant.train
    return {
        **sizes,
        **log.metrics(),
        **mem.metrics("train"),
        "train_wall_s": round(wall, 2),
        "train_loss_final": round(history[-1]["loss"], 4) if history else None,
        "train_loss_mean": round(result.training_loss, 4),
        "adapter_mb": dir_mb(out_dir),
        "effective_batch": t.effective_batch,
        "micro_batch": t.micro_batch,
        "grad_accum": t.grad_accum,
        "precision": precision,
        "history": history,
    }

"""The interface every technique implements, and the TrainingArguments they all share.

A technique decides *what* trains (``build``), *on what rows* (``load_rows`` / ``dataset``), *with which TRL
trainer* (``trainer_parts``) and *what is saved* (``save``). Batching, loss normalisation, optimizer, schedule
and measurement are the same for all (``common_args`` here, the loop in ``trainer.py``), so variants differ only
in what makes them that variant. Importing a technique imports no torch: ``bakeoff.core.config`` validates options
with ``defaults`` and ``validate`` alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar


class Technique:
    name: str = ""
    defaults: ClassVar[dict] = {}  # technique-specific options and their defaults

    def validate(self, options: dict) -> Iterator[tuple[str, str]]:
        """Yield (option, message) for every bad option value."""
        return iter(())

    def build(self, base_dir: Path, variant, precision: str, parent_dir: Path | None = None):
        raise NotImplementedError

    def save(self, model, tok, out_dir: Path) -> None:
        raise NotImplementedError

    def load_for_eval(self, base_dir: Path, out_dir: Path, variant, precision: str):
        """The trained model as it will be served, in the serving ``precision``: by default the adapter merged into
        the base."""
        from bakeoff.core.models import load_for_eval

        return load_for_eval(base_dir, out_dir, precision)

    def serving_dtype(self, variant, precision: str) -> str:
        """The weights' dtype as served (``eval.dtype`` resolved), for the report."""
        return precision

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

        from bakeoff.core.models import DTYPES, device, load_model

        model = PeftModel.from_pretrained(load_model(base_dir, dtype=DTYPES[precision]), out_dir)
        return model.to(device(), DTYPES[precision]).eval()

    def lm_eval_model(self, base_dir: Path, out_dir: Path):
        """lm-eval's ``hf`` model_args that load this variant from its saved files (None: pass the loaded model)."""
        if self._is_adapter(out_dir):
            return {"pretrained": str(base_dir), "peft": str(out_dir)}
        return {"pretrained": str(out_dir)}

    def load_rows(self, data_dir: Path) -> list:
        from bakeoff.data.examples import load_examples

        return load_examples(Path(data_dir) / "train.jsonl")

    def dataset(self, rows: list):
        """Conversational prompt-completion rows: TRL applies the chat template and masks the prompt."""
        from datasets import Dataset

        return Dataset.from_list(
            [{"prompt": e.messages, "completion": [{"role": "assistant", "content": e.completion}]} for e in rows]
        )

    def val_rows(self, data_dir: Path) -> list | None:
        """The validation rows that early stopping and the convergence judgement read (None: none for this
        technique)."""
        from bakeoff.data.examples import load_examples

        path = Path(data_dir) / "val.jsonl"
        return load_examples(path) if path.exists() else None

    def trainer_parts(self, variant, precision: str, output_dir: Path, evaluate: bool = False, keep_best: bool = False):
        """(TRL trainer class, its config) for this technique; ``evaluate``: validation loss every ``eval_steps``;
        ``keep_best``: end on the best evaluation's weights even without early stopping (``common_args``)."""
        from trl import SFTConfig, SFTTrainer

        return SFTTrainer, SFTConfig(
            **common_args(variant.train, precision, output_dir, evaluate, keep_best),
            max_length=variant.train.max_seq_len,
            completion_only_loss=True,
            padding_free=variant.train.batching == "padding_free",
        )


def common_args(train, precision: str, output_dir: Path, evaluate: bool = False, keep_best: bool = False) -> dict:
    """The TrainingArguments every technique shares: the fairness contract of train_defaults. ``evaluate``: validation
    loss every ``eval_steps``, with early stopping after ``early_stopping_patience`` evaluations without a new best
    (the best evaluation's weights are kept: a checkpoint is saved at each evaluation). ``keep_best``: keep the best
    evaluation's weights without stopping early, as a search trial does for a variant whose own run would end on
    them (so the chosen trial is that run, and train@ adopts it)."""
    import torch

    evaluating = evaluate and train.eval_steps > 0
    stopping = evaluating and (train.early_stopping_patience > 0 or keep_best)
    saves = (
        {
            "save_strategy": "steps",
            "save_steps": train.eval_steps,
            "load_best_model_at_end": True,
            "metric_for_best_model": "eval_loss",
            "greater_is_better": False,
            "save_total_limit": 2,
            "save_only_model": not train.checkpoint_steps,
        }  # resuming needs the optimizer's state too
        if stopping
        else {
            "save_strategy": "steps" if train.checkpoint_steps else "no",
            "save_steps": train.checkpoint_steps or 500,
            "save_total_limit": 1 if train.checkpoint_steps else None,
        }
    )  # the newest checkpoint: all a resume needs
    return dict(
        output_dir=str(output_dir),
        max_steps=train.max_steps,
        per_device_train_batch_size=train.micro_batch,
        gradient_accumulation_steps=train.grad_accum,
        learning_rate=train.lr,
        lr_scheduler_type=train.lr_scheduler,
        warmup_steps=round(train.warmup_ratio * train.max_steps),
        weight_decay=train.weight_decay,
        optim=train.optimizer,
        gradient_checkpointing=train.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False},
        train_sampling_strategy={"group_by_length": "group_by_length", "sequential": "sequential"}.get(
            train.batching, "random"
        ),
        bf16=precision == "bf16",
        fp16=precision == "fp16",
        use_cpu=not torch.cuda.is_available(),
        logging_steps=train.logging_steps,
        eval_strategy="steps" if evaluating else "no",
        eval_steps=train.eval_steps if evaluating else None,
        per_device_eval_batch_size=train.micro_batch,
        prediction_loss_only=True,  # validation loss only: no logits kept
        **saves,
        ddp_backend="gloo" if not torch.cuda.is_available() and train.processes > 1 else None,
        ddp_find_unused_parameters=False if train.processes > 1 else None,
        report_to=[],
        seed=train.seed,
        data_seed=train.seed,
        dataloader_num_workers=0,
    )

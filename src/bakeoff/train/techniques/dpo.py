"""DPO through TRL's DPOTrainer, continuing a supervised variant's LoRA adapter on preference pairs.

The parent's adapter is loaded as the trainable ``default`` adapter; DPOTrainer copies it into a frozen ``ref``
adapter that serves as the reference policy (so the reference is the supervised model, not the raw base).
Only adapter weights change.

The reference's log-probabilities are computed once per pair before the first step (TRL's
``precompute_ref_log_probs``; option ``precompute_ref``, on by default) instead of in every step: the reference is
frozen, so they are the same numbers. They are kept for the process, keyed by the tokenized pairs, the reference's
weights and the precision (``bakeoff.train.backends.trl_dpo``), so every trial of a search reuses the first trial's
(``tune_from@dpo``).
"""

from __future__ import annotations

from pathlib import Path

from bakeoff.core import techniques as technique_options
from bakeoff.core.errors import UserError
from bakeoff.core.runs import Skipped
from bakeoff.train.techniques.base import Technique, common_args


class Dpo(Technique):
    name = "dpo"
    defaults = technique_options.defaults("dpo")

    def validate(self, o: dict):
        return technique_options.check(self.name, o)

    def load_rows(self, data_dir: Path) -> list:
        from bakeoff.data.examples import load_pairs

        path = Path(data_dir) / "prefs_train.jsonl"
        if not path.exists():  # this arm cannot run on this task: its status, not the pipeline's end
            raise Skipped(
                f"DPO needs preference pairs (prompt, chosen, rejected) and this task has none: set "
                f"task.prefs to a file of them ({path} is missing)"
            )
        return load_pairs(path)

    def dataset(self, rows: list):
        from datasets import Dataset

        return Dataset.from_list(
            [
                {
                    "prompt": p.messages,
                    "chosen": [{"role": "assistant", "content": p.chosen}],
                    "rejected": [{"role": "assistant", "content": p.rejected}],
                }
                for p in rows
            ]
        )

    def val_rows(self, data_dir: Path) -> list | None:
        """The validation pairs (``prefs_val.jsonl``, carved like val rows): DPO's loss on them judges its search,
        early stopping and the converged flag."""
        from bakeoff.data.examples import load_pairs

        path = Path(data_dir) / "prefs_val.jsonl"
        return (load_pairs(path) or None) if path.exists() else None

    def trainer_parts(self, variant, precision, output_dir, evaluate=False, keep_best=False):
        from trl import DPOConfig

        args = common_args(variant.train, precision, output_dir, evaluate, keep_best)
        if args["train_sampling_strategy"] == "group_by_length":  # transformers groups by an `input_ids` column,
            args["train_sampling_strategy"] = "random"  # which TRL's tokenized pairs do not have
            print(
                f"[{variant.name}] batching group_by_length: preference pairs are drawn in random order (TRL's "
                "tokenized pairs have no input_ids column for transformers' length grouping)",
                flush=True,
            )
        from bakeoff.train.backends.trl_dpo import CachedRefDPOTrainer

        return CachedRefDPOTrainer, DPOConfig(
            **args,
            beta=variant.options["beta"],
            loss_type=[variant.options["loss_type"]],
            max_length=variant.train.max_seq_len,
            precompute_ref_log_probs=bool(variant.options.get("precompute_ref", True)),
        )

    def build(self, base_dir, variant, precision, parent_dir=None):
        from peft import PeftModel

        from bakeoff.core.models import frozen_dtype, load_model

        if parent_dir is None or not (Path(parent_dir) / "adapter_config.json").exists():
            raise UserError(
                f"variants.{variant.name}.init_from: {variant.options['init_from']!r} has no LoRA "
                f"adapter at {parent_dir} (DPO continues a lora or qlora variant)"
            )
        # DPOTrainer copies this adapter into a frozen "ref" adapter, its reference policy
        return PeftModel.from_pretrained(
            load_model(base_dir, dtype=frozen_dtype(precision)), parent_dir, is_trainable=True
        )

    def save(self, model, tok, out_dir: Path) -> None:
        model.save_pretrained(out_dir, selected_adapters=["default"])

"""DPO through TRL's DPOTrainer, continuing a supervised variant's LoRA adapter on preference pairs.

The parent's adapter is loaded as the trainable ``default`` adapter; DPOTrainer copies it into a frozen ``ref``
adapter that serves as the reference policy (so the reference is the supervised model, not the raw base).
Only adapter weights change.

The reference's log-probabilities are computed once per pair before the first step (TRL's
``precompute_ref_log_probs``; option ``precompute_ref``, on by default) instead of in every step: the reference is
frozen, so they are the same numbers. They are kept for the process, keyed by the tokenized pairs, the reference's
weights and the precision (``cached_ref_trainer``), so every trial of a search reuses the first trial's
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
            raise Skipped(f"DPO needs preference pairs (prompt, chosen, rejected) and this task has none: set "
                          f"task.prefs to a file of them ({path} is missing)")
        return load_pairs(path)

    def dataset(self, rows: list):
        from datasets import Dataset

        return Dataset.from_list([{"prompt": p.messages, "chosen": [{"role": "assistant", "content": p.chosen}],
                                   "rejected": [{"role": "assistant", "content": p.rejected}]} for p in rows])

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
            args["train_sampling_strategy"] = "random"           # which TRL's tokenized pairs do not have
            print(f"[{variant.name}] batching group_by_length: preference pairs are drawn in random order (TRL's "
                  "tokenized pairs have no input_ids column for transformers' length grouping)", flush=True)
        return cached_ref_trainer(), DPOConfig(**args,
                                     beta=variant.options["beta"], loss_type=[variant.options["loss_type"]],
                                     max_length=variant.train.max_seq_len,
                                     precompute_ref_log_probs=bool(variant.options.get("precompute_ref", True)))

    def build(self, base_dir, variant, precision, parent_dir=None):
        from peft import PeftModel

        from bakeoff.core.models import frozen_dtype, load_model

        if parent_dir is None or not (Path(parent_dir) / "adapter_config.json").exists():
            raise UserError(f"variants.{variant.name}.init_from: {variant.options['init_from']!r} has no LoRA "
                            f"adapter at {parent_dir} (DPO continues a lora or qlora variant)")
        # DPOTrainer copies this adapter into a frozen "ref" adapter, its reference policy
        return PeftModel.from_pretrained(load_model(base_dir, dtype=frozen_dtype(precision)), parent_dir,
                                         is_trainable=True)

    def save(self, model, tok, out_dir: Path) -> None:
        model.save_pretrained(out_dir, selected_adapters=["default"])


_REF_LOGPS: dict[str, tuple[list, list, float]] = {}  # key (``_ref_key``) → (chosen, rejected, seconds the pass took)


def _ref_key(dataset, model_hash: str, args) -> str:
    """What the reference's log-probabilities of ``dataset`` depend on: its tokenized pairs (truncation included),
    the reference's weights (TRL's hash of the module) and the precision the forward pass runs in."""
    import hashlib
    import json

    cols = [c for c in dataset.column_names if c not in ("ref_chosen_logps", "ref_rejected_logps")]
    h = hashlib.sha256(json.dumps([model_hash, bool(args.bf16), bool(args.fp16), cols]).encode())
    for row in dataset.select_columns(cols).to_list():
        h.update(json.dumps(row, sort_keys=True, default=str).encode())
    return h.hexdigest()


def cached_ref_trainer():
    """TRL's DPOTrainer whose precomputed reference log-probabilities are reused within the process: TRL's own cache
    is keyed by the dataset's fingerprint, which is new for every trainer (its tokenizing map is not hashable), so a
    search's every trial would pass over the reference again."""
    from trl import DPOTrainer

    class CachedRefDPOTrainer(DPOTrainer):
        reused_ref_s = 0.0  # the measured seconds of the reference passes this run took from an earlier one

        def _precompute_ref_logps(self, dataset, name, batch_size):
            import time

            key = _ref_key(dataset, self._precompute_model_hash, self.args)
            if key in _REF_LOGPS:
                chosen, rejected, seconds = _REF_LOGPS[key]
                self.reused_ref_s += seconds
                return dataset.add_column("ref_chosen_logps", chosen).add_column("ref_rejected_logps", rejected)
            t0 = time.perf_counter()
            out = super()._precompute_ref_logps(dataset, name, batch_size)
            _REF_LOGPS[key] = (list(out["ref_chosen_logps"]), list(out["ref_rejected_logps"]),
                               time.perf_counter() - t0)
            return out

    return CachedRefDPOTrainer

"""LoRA through PEFT: the base stays frozen; low-rank adapters on the chosen linear layers train."""

from __future__ import annotations

from pathlib import Path

from bakeoff.core import techniques as technique_options
from bakeoff.train.techniques.base import Technique


class Lora(Technique):
    name = "lora"
    defaults = technique_options.defaults("lora")

    def validate(self, o: dict):
        return technique_options.check(self.name, o)

    def lora_config(self, options: dict):
        from peft import LoraConfig

        return LoraConfig(
            r=options["r"],
            lora_alpha=options["alpha"],
            lora_dropout=options["dropout"],
            target_modules=options["targets"],
            task_type="CAUSAL_LM",
            bias="none",
        )

    def build(self, base_dir, variant, precision, parent_dir=None):
        from peft import get_peft_model

        from bakeoff.core.models import frozen_dtype, load_model

        if variant.backend == "unsloth":
            from bakeoff.train.backends import unsloth

            return unsloth.build(base_dir, variant, precision, load_in_4bit=False)
        model = load_model(base_dir, dtype=frozen_dtype(precision))
        return get_peft_model(model, self.lora_config(variant.options))

    def save(self, model, tok, out_dir: Path) -> None:
        model.save_pretrained(out_dir)  # the adapter alone

"""LoRA through PEFT: the base stays frozen; low-rank adapters on the chosen linear layers train."""

from __future__ import annotations

from pathlib import Path

from bakeoff.techniques.base import Technique


class Lora(Technique):
    name = "lora"
    defaults = {"r": 16, "alpha": 32, "dropout": 0.0, "targets": "all-linear"}

    def validate(self, o: dict):
        if not isinstance(o["r"], int) or isinstance(o["r"], bool) or o["r"] <= 0:
            yield "r", f"must be a positive integer, got {o['r']!r}"
        if not isinstance(o["alpha"], (int, float)) or o["alpha"] <= 0:
            yield "alpha", f"must be > 0, got {o['alpha']!r}"
        if not isinstance(o["dropout"], (int, float)) or not 0 <= o["dropout"] < 1:
            yield "dropout", f"must be in [0, 1), got {o['dropout']!r}"
        t = o["targets"]
        if not (t == "all-linear" or (isinstance(t, list) and t and all(isinstance(x, str) for x in t))):
            yield "targets", f"must be 'all-linear' or a list of module names, got {t!r}"

    def lora_config(self, options: dict):
        from peft import LoraConfig

        return LoraConfig(r=options["r"], lora_alpha=options["alpha"], lora_dropout=options["dropout"],
                          target_modules=options["targets"], task_type="CAUSAL_LM", bias="none")

    def build(self, base_dir, variant, precision, parent_dir=None):
        from peft import get_peft_model

        from bakeoff.models import frozen_dtype, load_model

        if variant.backend == "unsloth":
            from bakeoff.techniques.backends import unsloth

            return unsloth.build(base_dir, variant, precision, load_in_4bit=False)
        model = load_model(base_dir, dtype=frozen_dtype(precision))
        return get_peft_model(model, self.lora_config(variant.options))

    def save(self, model, tok, out_dir: Path) -> None:
        model.save_pretrained(out_dir)  # the adapter alone

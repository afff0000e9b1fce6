"""Full fine-tuning: every weight trains. The reference point for quality, memory and speed."""

from __future__ import annotations

from pathlib import Path

from bakeoff.techniques.base import Technique


class Full(Technique):
    name = "full"
    defaults: dict = {}

    def build(self, base_dir, variant, precision, parent_dir=None):
        from bakeoff.models import load_model

        return load_model(base_dir)

    def save(self, model, tok, out_dir: Path) -> None:
        model.save_pretrained(out_dir, safe_serialization=True)
        tok.save_pretrained(out_dir)

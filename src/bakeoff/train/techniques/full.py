"""Full fine-tuning: every weight trains. The reference point for quality, memory and speed."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from bakeoff.train.techniques.base import Technique


class Full(Technique):
    name = "full"
    defaults: ClassVar[dict] = {}

    def build(self, base_dir, variant, precision, parent_dir=None):
        from bakeoff.core.models import load_model

        return load_model(base_dir)

    def save(self, model, tok, out_dir: Path) -> None:
        model.save_pretrained(out_dir, safe_serialization=True)
        tok.save_pretrained(out_dir)

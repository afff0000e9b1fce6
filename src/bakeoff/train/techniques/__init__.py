"""Technique registry: ``technique:`` in a variant names one of these.

Each technique is a small object (see ``base.Technique``) that builds the trainable model from the base folder
and saves what training produced; the training loop itself is TRL's, shared by all (``trainer.train``).
"""

from __future__ import annotations

from bakeoff.train.techniques.base import Technique
from bakeoff.train.techniques.dpo import Dpo
from bakeoff.train.techniques.full import Full
from bakeoff.train.techniques.lora import Lora
from bakeoff.train.techniques.qlora import QLora

_REGISTRY: dict[str, Technique] = {t.name: t for t in (Full(), Lora(), QLora(), Dpo())}


def technique_names() -> list[str]:
    return sorted(_REGISTRY)


def get_technique(name: str) -> Technique:
    return _REGISTRY[name]

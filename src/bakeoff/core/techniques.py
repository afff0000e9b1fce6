"""What each technique accepts in params.yaml: its options, their defaults and their checks. No torch and no
training code: the params schema (``bakeoff.core.config``) reads this file alone, so the model and data stages do
not depend on how a technique trains.

    defaults("qlora")                 # {"r": 16, "alpha": 32, ..., "bits": 4, "quant_type": "nf4", ...}
    list(check("lora", {**defaults("lora"), "r": 0}))   # [("r", "must be a positive integer, got 0")]
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Facts:
    """What the rest of bakeoff reads of a technique besides its options: what it trains, its frozen base, its data,
    its search space, its utilisation for time estimates, and its speed on CPU against LoRA's. A technique is its
    training code (``bakeoff.train.techniques.<name>``) and these lines."""

    trains: str  # "all": every weight (6·N FLOPs a token, fp32 master weights); "adapter": LoRA on a frozen base
    space: dict  # tune.spaces' default: the search space, centred on the published rates
    quantized: bool = False  # the frozen base quantized (4- or 8-bit): its untrained control is scored too
    pairs: bool = False  # trains on preference pairs: two sequences a row, a reference model's forward pass
    mfu: float | None = None  # sizing.mfu's default utilisation on a GPU (None: ``like``'s)
    like: str | None = None  # the technique whose measured speed and utilisation it takes where it has none
    checkpointing: bool = False  # gradient checkpointing where train.gradient_checkpointing is auto
    cpu_slower: float = 1.0  # a row-step on CPU against LoRA's (the run clock's estimate)
    unsloth: bool = False  # Unsloth's kernels can train it (backend: unsloth)


_LR = {"log": True}
FACTS: dict[str, Facts] = {
    # centred by technique on the published figures (Thinking Machines' "LoRA Without Regret"; Biderman et al.
    # 2024): LoRA's best rate is ~10× full fine-tuning's; DPO runs one to two orders below supervised fine-tuning
    "full": Facts("all", {"lr": {"low": 1.0e-5, "high": 3.0e-4, **_LR}}, mfu=0.32, cpu_slower=1.2),
    "lora": Facts("adapter", {"lr": {"low": 1.0e-4, "high": 3.0e-3, **_LR}}, mfu=0.17, unsloth=True),
    "qlora": Facts(
        "adapter",
        {"lr": {"low": 1.0e-4, "high": 3.0e-3, **_LR}},
        quantized=True,
        mfu=0.11,
        checkpointing=True,
        cpu_slower=2.2,
        unsloth=True,
    ),  # a 4-bit base dequantized on CPU
    "dpo": Facts("adapter", {"lr": {"low": 1.0e-6, "high": 1.0e-4, **_LR}}, pairs=True, like="lora"),
}


def facts(technique: str) -> Facts:
    return FACTS[technique]


_LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "targets": "all-linear"}
OPTIONS: dict[str, dict] = {
    "full": {},
    "lora": _LORA,
    "qlora": {**_LORA, "bits": 4, "quant_type": "nf4", "double_quant": True},
    "dpo": {"init_from": "lora", "beta": 0.1, "loss_type": "sigmoid", "precompute_ref": True},
}


def names() -> list[str]:
    return sorted(OPTIONS)


def defaults(technique: str) -> dict:
    return dict(OPTIONS[technique])


def _lora(o: dict) -> Iterator[tuple[str, str]]:
    if not isinstance(o["r"], int) or isinstance(o["r"], bool) or o["r"] <= 0:
        yield "r", f"must be a positive integer, got {o['r']!r}"
    if not isinstance(o["alpha"], (int, float)) or o["alpha"] <= 0:
        yield "alpha", f"must be > 0, got {o['alpha']!r}"
    if not isinstance(o["dropout"], (int, float)) or not 0 <= o["dropout"] < 1:
        yield "dropout", f"must be in [0, 1), got {o['dropout']!r}"
    t = o["targets"]
    if not (t == "all-linear" or (isinstance(t, list) and t and all(isinstance(x, str) for x in t))):
        yield "targets", f"must be 'all-linear' or a list of module names, got {t!r}"


def _qlora(o: dict) -> Iterator[tuple[str, str]]:
    yield from _lora(o)
    if o["bits"] not in (4, 8):
        yield "bits", f"must be 4 or 8, got {o['bits']!r}"
    if o["quant_type"] not in ("nf4", "fp4"):
        yield "quant_type", f"must be nf4 or fp4, got {o['quant_type']!r}"
    if not isinstance(o["double_quant"], bool):
        yield "double_quant", f"must be true or false, got {o['double_quant']!r}"


def _dpo(o: dict) -> Iterator[tuple[str, str]]:
    if not isinstance(o["init_from"], str) or not o["init_from"]:
        yield "init_from", "must name a LoRA variant of `variants:` whose adapter DPO continues"
    if not isinstance(o["beta"], (int, float)) or o["beta"] <= 0:
        yield "beta", f"must be > 0, got {o['beta']!r}"
    if o["loss_type"] not in ("sigmoid", "hinge", "ipo"):
        yield "loss_type", f"must be sigmoid, hinge or ipo, got {o['loss_type']!r}"
    if not isinstance(o["precompute_ref"], bool):
        yield "precompute_ref", f"must be true or false, got {o['precompute_ref']!r}"


_CHECKS = {"lora": _lora, "qlora": _qlora, "dpo": _dpo}


def check(technique: str, options: dict) -> Iterator[tuple[str, str]]:
    """(option, message) for every bad value of ``options`` (the defaults merged in)."""
    return _CHECKS.get(technique, lambda o: iter(()))(options)

"""FLOPs per token, MFU and HFU: the Utilisation convention bakeoff.core.measure defines (one for
benchmarks/gpu_check.py and for sizing's time estimates), implemented here."""

from __future__ import annotations

from bakeoff.core.measure import count_params
from bakeoff.core.techniques import facts


def model_flops_per_token(n_params: int, technique: str) -> float:
    """6·N (every weight trained), 4·N (a frozen base), + 2·N for a reference model's forward (preference pairs);
    N without the input embedding."""
    f = facts(technique)
    return ((6 if f.trains == "all" else 4) + (2 if f.pairs else 0)) * n_params


def hardware_flops_per_token(n_params: int, technique: str, checkpointing: bool = False) -> float:
    """Model FLOPs plus the forward pass gradient checkpointing recomputes (2·N)."""
    return model_flops_per_token(n_params, technique) + (2 * n_params if checkpointing else 0)


def mfu(tokens_per_s: float, n_params: int, technique: str, peak_flops: float) -> float:
    """Model FLOP utilisation: useful FLOPs per second ÷ the hardware's peak (recompute not counted)."""
    return tokens_per_s * model_flops_per_token(n_params, technique) / peak_flops


def hfu(tokens_per_s: float, n_params: int, technique: str, peak_flops: float, checkpointing: bool) -> float:
    """Hardware FLOP utilisation: FLOPs executed per second (recompute counted) ÷ peak."""
    return tokens_per_s * hardware_flops_per_token(n_params, technique, checkpointing) / peak_flops


def flop_params(model) -> int:
    """N of a transformers model for the FLOPs convention: its parameters less an untied input embedding."""
    total = count_params(model)["total_params"]
    emb = model.get_input_embeddings().weight
    out = model.get_output_embeddings()
    tied = out is not None and out.weight.data_ptr() == emb.data_ptr()
    return total if tied else total - emb.numel()

"""A CPU path for TRL's fused LM head.

TRL 1.15 (the newest release Unsloth 2026.10 accepts) computes per-token log-probabilities in SFTTrainer and
DPOTrainer with a Triton kernel and has no path for a machine without a GPU driver ("0 active drivers"); TRL
1.16 adds one. Where CUDA is absent, ``install()`` puts a plain-PyTorch function with the same interface in the
kernel's place. It materialises the logits of the scored positions only and computes the optional outputs
(entropy, token accuracy), which feed only TRL's logs, without gradients.
"""

from __future__ import annotations

import torch


class TorchLogProbFunction:
    """Same call signature as ``trl.kernels.ChunkedLogProbFunction.apply``."""

    @staticmethod
    def apply(hidden, weight, bias, targets, temperature, chunk_size, softcap, logit_scale, outputs):
        logits = hidden @ weight.to(hidden.dtype).t()
        if bias is not None:
            logits = logits + bias.to(logits.dtype)
        logits = logits.float() * (logit_scale if logit_scale is not None else 1.0)
        if softcap is not None:
            logits = softcap * torch.tanh(logits / softcap)
        logits = logits / temperature
        log_z = torch.logsumexp(logits, dim=-1)
        target = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        logprobs = target - log_z
        entropy = log_sum_sq = mean_logits = is_top1 = None
        with torch.no_grad():
            if "entropy" in outputs:
                p = torch.softmax(logits.detach(), dim=-1)
                entropy = log_z.detach() - (p * logits.detach()).sum(-1)
            if "log_sum_sq_probs" in outputs:
                log_sum_sq = torch.logsumexp(2 * logits.detach(), -1) - 2 * log_z.detach()
            if "mean_logits" in outputs:
                mean_logits = logits.detach().mean(-1)
            if "is_top1" in outputs:
                is_top1 = logits.detach().argmax(-1) == targets
        return logprobs, entropy, log_sum_sq, mean_logits, is_top1


def install() -> None:
    """Use the PyTorch path when no CUDA device is present (idempotent)."""
    if torch.cuda.is_available():
        return
    import trl.trainer.utils as trl_utils

    trl_utils._ChunkedLogProbFunction = TorchLogProbFunction

"""How a training step runs on this platform: the attention kernel, where the loss's logits are computed, and the
adapters' input casts. Chosen per platform (``auto``), recorded in every run, and measured on/off by
``benchmarks/step_profile.py --compare``.

    from bakeoff.train.kernels import choose, apply
    k = choose(variant.train, model, precision)   # {"attention": "eager", "loss_logits": "labelled", ...}
    apply(model, k)

What each lever does and why ``auto`` picks it (figures: ``benchmarks/step_profile.py --compare`` on a 2-core CPU):

- **attention**: on CPU at training lengths up to ``EAGER_MAX_LEN`` tokens, eager attention (matmul + softmax) is
  faster than SDPA's CPU flash kernel, whose backward dominated a step's attention time; ``auto`` takes it in fp32
  (``eager_fp32``: transformers' eager attention runs in bf16 under autocast, which moved full fine-tuning's mean
  loss over 20 steps by 2.3%; in fp32 it moved 0.4%). On GPUs the model's own default (SDPA or flash) stays.
- **loss_logits** ``labelled``: the output head (hidden × vocabulary) and the cross-entropy run only at the positions
  that carry a label (the answer's tokens), not at every prompt token, whose logits the loss throws away. The loss
  is the model's own definition: the sum over labelled tokens of the fp32 cross-entropy of the shifted labels,
  divided by the accumulated batch's label count (``num_items_in_batch``), or their mean without it. Used only where
  the head is a plain projection (no soft-capping or scaling) and the step runs in one process (DDP's gradient
  hooks live in the wrapper's forward), on CPU and GPU alike (on a GPU it also spares the [batch × length × vocab]
  logits, 1 GB at 1 × 1024 tokens of a 128k vocabulary in fp32, and their gradient).
- **tf32** (CUDA only): fp32 matrix multiplies run on the tensor cores in TF32 (10-bit mantissa, fp32 range and
  accumulation), as PyTorch leaves off by default; it changes only what runs in fp32 (an ``fp32`` run, fp32 master
  weights' updates), not a bf16 run's matmuls.
- **adapter input cast** off under autocast: PEFT casts each LoRA layer's bf16 input to the adapter's fp32 and
  autocast casts it straight back for the matmul, an exact round trip that copies every activation twice.
"""

from __future__ import annotations

EAGER_MAX_LEN = 512
from bakeoff.core.models import PLAIN_HEAD  # (the families whose logits are the plain head)


def eager_fp32_attention(module, query, key, value, attention_mask, scaling: float, dropout: float = 0.0, **kw):
    """Eager attention (scores, mask, softmax, weighted sum) in fp32 whatever the autocast dtype, forward and
    backward; the output is cast back to the query's dtype. Transformers' eager attention runs in bf16 under
    autocast and moved full fine-tuning's mean loss over 20 steps by 2.3%; keeping only the scores and softmax in
    fp32 still moved it by 2.2% (the bf16 probabilities and their gradients); all in fp32 it moved 0.4%, the
    rounding floor, as SDPA's CPU kernel, which accumulates in fp32. The attention matmuls are ~10% of a full
    fine-tuning step here. Same signature and mask as transformers' ``eager_attention_forward``."""
    import torch

    groups = getattr(module, "num_key_value_groups", 1)
    with torch.autocast(device_type=query.device.type, enabled=False):
        q = query.float()
        k = key.float().repeat_interleave(groups, dim=1) if groups > 1 else key.float()
        v = value.float().repeat_interleave(groups, dim=1) if groups > 1 else value.float()
        w = torch.matmul(q, k.transpose(2, 3)) * scaling
        if attention_mask is not None:
            w = w + attention_mask[:, :, :, : k.shape[-2]].float()
        w = torch.softmax(w, dim=-1)
        w = torch.nn.functional.dropout(w, p=dropout, training=module.training)
        out = torch.matmul(w, v).to(query.dtype)
    return out.transpose(1, 2).contiguous(), w


def register() -> None:
    """Make ``eager_fp32`` an attention implementation transformers knows (with eager's additive mask)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register("eager_fp32", eager_fp32_attention)
    AttentionMaskInterface.register("eager_fp32", eager_mask)


def _inner(model):
    """The transformers model under PEFT's wrapper (itself when unwrapped)."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def choose(t, model, precision: str, sft: bool = True, backend: str = "hf") -> dict:
    """What this run will use: ``t`` is the variant's TrainConfig (``attention``, ``loss_logits``)."""
    import torch

    cuda = torch.cuda.is_available()
    inner = _inner(model)
    current = str(getattr(inner.config, "_attn_implementation", "") or "sdpa")
    if backend == "unsloth":  # Unsloth brings its own attention and loss; leave them as it set them
        return {
            "attention": current,
            "loss_logits": "unsloth's own",
            "adapter_input_cast": True,
            "optimizer": t.optimizer,
        }
    attention = t.attention
    if attention == "auto":
        attention = "eager_fp32" if not cuda and t.max_seq_len <= EAGER_MAX_LEN else current
    # auto, or labelled asked for where this model's head or this run cannot use it: the model's own loss
    loss = "labelled" if t.labelled_loss(sft, plain_head(model)) else "all"
    adapters = any(getattr(m, "cast_input_dtype_enabled", None) is not None for m in model.modules())
    return {
        "attention": attention,
        "loss_logits": loss,
        "adapter_input_cast": not (adapters and precision in ("bf16", "fp16")),
        "optimizer": t.optimizer,
        **({"tf32": True} if cuda else {}),  # fp32 matmuls on tensor cores (TF32) on a CUDA GPU
    }


def apply(model, k: dict) -> None:
    """Put the choice in place on ``model`` (before the trainer wraps it)."""
    inner = _inner(model)
    if "tf32" in k:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = bool(k["tf32"])
    if k["loss_logits"] == "unsloth's own":
        return
    if str(getattr(inner.config, "_attn_implementation", "")) != k["attention"]:
        if k["attention"] == "eager_fp32":
            register()
        inner.set_attn_implementation(k["attention"])
    if not k["adapter_input_cast"]:
        for m in model.modules():
            if getattr(m, "cast_input_dtype_enabled", None) is not None:
                m.cast_input_dtype_enabled = False


def summary(k: dict) -> str:
    """One cell for the report's cost table, e.g. ``eager attn · labelled logits · adamw_torch_fused``."""
    cast = "" if k.get("adapter_input_cast", True) else " · no adapter casts"
    return f"{k['attention']} attn · {k['loss_logits']} logits{cast} · {k['optimizer']}"


def plain_head(model) -> bool:
    """Whether ``model``'s logits are its plain output head over the decoder's last hidden state."""
    inner = _inner(model)
    return (
        getattr(inner.config, "model_type", "") in PLAIN_HEAD
        and hasattr(inner, "get_decoder")
        and inner.get_output_embeddings() is not None
    )


def labelled_loss(model, inputs: dict, num_items_in_batch=None, rows: list | None = None, span: int | None = None):
    """The causal-LM loss with the output head applied only where a label is (see the module's text); ``rows``: a
    list to append each row's mean per-token loss to (validation's stopping rule). ``span``: the most labels any row
    of the batch has, known on the host (``LabelSpan``): each row's labelled positions are gathered into a
    [batch × span] block, a shape the data does not decide, so a GPU never waits for the host to learn it; without it
    (on CPU) the labelled positions are picked by a boolean mask, which computes nothing for padding."""
    import torch
    import torch.nn.functional as F

    inner = _inner(model)
    labels = inputs["labels"]
    fwd = {k: inputs[k] for k in ("input_ids", "attention_mask", "position_ids") if k in inputs}
    hidden = inner.get_decoder()(**fwd, use_cache=False).last_hidden_state[:, :-1]
    target = labels[:, 1:]
    keep = target != -100
    head, n = inner.get_output_embeddings(), labels.shape[0]
    if span is None:
        per_token = F.cross_entropy(head(hidden[keep]).float(), target[keep], reduction="none")
    else:
        order = torch.argsort((~keep).int(), dim=1, stable=True)[:, :span]  # each row's labelled positions first
        picked = hidden.gather(1, order.unsqueeze(-1).expand(-1, -1, hidden.shape[-1]))
        wanted = target.gather(1, order)  # -100 where a row has fewer labels than span
        per_token = F.cross_entropy(
            head(picked).float().flatten(0, 1), wanted.flatten(), reduction="none", ignore_index=-100
        )
    loss = per_token.sum()
    if rows is not None:
        sums = (
            torch.zeros(n, device=loss.device).index_add_(0, keep.nonzero()[:, 0], per_token.detach())
            if span is None
            else per_token.detach().view(n, span).sum(dim=1)
        )
        rows.extend((sums / keep.sum(dim=1).clamp(min=1)).tolist())
    if num_items_in_batch is None:
        return loss / keep.sum().clamp(min=1)
    if torch.is_tensor(num_items_in_batch):
        num_items_in_batch = num_items_in_batch.to(loss.device)
    return loss / num_items_in_batch


class LabelSpan:
    """A data collator wrapped so each batch carries ``bakeoff_label_span``: the most labelled tokens of any of its
    rows (as the shifted loss reads them), counted on the host before the batch moves to the GPU. The labelled loss
    sizes its gather by it, so the step never reads a count back from the device."""

    KEY = "bakeoff_label_span"

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, features):
        batch = self.inner(features)
        labels = batch["labels"]
        batch[self.KEY] = int((labels[:, 1:] != -100).sum(dim=1).max()) if labels.numel() else 0
        return batch


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def weight_dtypes(model) -> dict:
    """The dtypes a run holds its weights in: the frozen base (its 4-bit format where bitsandbytes quantized it), the
    unquantized weights beside it (embeddings, norms), the output head, and the weights that train (adapters, or
    every weight in full fine-tuning)."""
    inner = _inner(model)
    quantized = [p for p in model.parameters() if type(p).__name__ in ("Params4bit", "Int8Params")]
    qc = getattr(inner.config, "quantization_config", None)
    qc = qc.to_dict() if hasattr(qc, "to_dict") else (qc or {})
    frozen = [
        p
        for p in model.parameters()
        if not p.requires_grad and p.is_floating_point() and type(p).__name__ not in ("Params4bit", "Int8Params")
    ]
    trainable = {_name(p.dtype) for p in model.parameters() if p.requires_grad}
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    out = {
        "base": (f"{qc.get('bnb_4bit_quant_type', 'nf4')} 4-bit" if qc.get("load_in_4bit") else "int8")
        if quantized
        else (_name(max(frozen, key=lambda p: p.numel()).dtype) if frozen else "/".join(sorted(trainable))),
        "unquantized": "/".join(sorted({_name(p.dtype) for p in frozen})) or "-",
        "head": _name(head.weight.dtype) if head is not None and hasattr(head, "weight") else "?",
        "trainable": "/".join(sorted(trainable)) or "-",
    }
    if quantized and qc.get("bnb_4bit_compute_dtype"):
        out["compute"] = str(qc["bnb_4bit_compute_dtype"]).removeprefix("torch.")
    return out


class ActivationDtype:
    """The dtype of the first decoder layer's MLP output in a training forward (what backward saves), seen once:
    ``probe = ActivationDtype(model)`` before training, ``probe.seen`` after."""

    def __init__(self, model):
        self.seen, self._handle = None, None
        mlp = next((m for n, m in model.named_modules() if n.endswith("layers.0.mlp")), None)
        if mlp is not None:
            self._handle = mlp.register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        import torch

        if module.training and torch.is_tensor(output):
            self.seen = _name(output.dtype)
            self._handle.remove()

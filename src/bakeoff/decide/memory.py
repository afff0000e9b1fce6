"""The memory model: a model shape, a training setup, and the peak memory one process of it needs (an analytic
estimate, calibrated on this run's measured peaks by ``bakeoff.decide.sizing``).

Peak training memory of one process is modelled as the sum of
    weights      by dtype: fp32 master weights for full fine-tuning (mixed precision keeps them), the training
                 dtype for a frozen LoRA base, and for QLoRA the linear layers at 4 bits (0.5 bytes/param) plus
                 quantization constants (0.5 bits/param, 0.127 with double quantization: QLoRA paper,
                 arXiv 2305.14314) with embeddings and norms in the compute dtype;
    gradients    fp32, for the trainable parameters;
    optimizer    AdamW 8 bytes per trainable parameter, 8-bit AdamW 2 (transformers' "model memory anatomy");
    activations  per layer and token, SwiGLU decoder in 16-bit: 16·h + 8·I bytes (inputs of the norms and of
                 every projection, the SwiGLU intermediates; memory-efficient attention stores no s² matrix),
                 doubled in fp32; with gradient checkpointing only each layer's input (2·h bytes) plus one layer
                 recomputed; the logits 10 bytes per token and vocabulary entry (16-bit logits, their fp32 copy
                 and its gradient), at the tokens whose logits the loss holds: with the pipeline's labelled loss
                 (``bakeoff.train.kernels``, its default for one-process SFT) the labelled ones alone (the answer:
                 ``label_tokens`` per row); on a CUDA GPU none where TRL's trainer computes the loss (its fused
                 head takes the log-probabilities in tiles and never holds the logits: ``chunked_logits``, seen
                 on an H200 as no trace of them in the peak); otherwise every token (the model's own loss, as on
                 a CPU);
    overhead     what the runtime holds besides tensors (CUDA context and workspaces, or on CPU the Python
                 process with its libraries): a constant, calibrated on this run's measured peaks.
DPO scores chosen and rejected together: twice the sequences. The model is deliberately simple; its error
against each measured peak is reported beside its predictions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from bakeoff.core.techniques import facts

GB = 1e9


GIB = 1024**3


# LoRA's ``all-linear`` targets in a Llama-style decoder layer
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Shape:
    """A decoder-only transformer's dimensions (Llama-style: grouped-query attention, SwiGLU MLP)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool = False

    @property
    def kv_dim(self) -> int:
        return self.hidden * self.kv_heads // self.heads

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) of each projection of one layer."""
        h, i, kv = self.hidden, self.intermediate, self.kv_dim
        return {
            "q_proj": (h, h),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (h, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }

    @property
    def linear_params(self) -> int:
        return self.layers * sum(a * b for a, b in self.linear_shapes().values())

    @property
    def other_params(self) -> int:
        """Embeddings, the untied output head and the norms."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.layers * 2 * self.hidden + self.hidden

    @property
    def params(self) -> int:
        return self.linear_params + self.other_params

    @property
    def flop_params(self) -> int:
        """N for FLOPs (``bakeoff.core.measure``): without the input embedding, a lookup (tied: it is the head,
        once)."""
        return self.params - (0 if self.tied else self.vocab * self.hidden)

    def lora_params(self, r: int, targets=LINEAR) -> int:
        targets = LINEAR if targets in ("all-linear", None) else targets
        return self.layers * sum(r * (a + b) for n, (a, b) in self.linear_shapes().items() if n in targets)

    @classmethod
    def from_config(cls, name: str, cfg: dict) -> Shape:
        """From a transformers config.json (as a dict)."""
        return cls(
            name,
            cfg["num_hidden_layers"],
            cfg["hidden_size"],
            cfg["intermediate_size"],
            cfg["num_attention_heads"],
            cfg.get("num_key_value_heads") or cfg["num_attention_heads"],
            cfg["vocab_size"],
            bool(cfg.get("tie_word_embeddings", False)),
        )


@dataclass(frozen=True)
class Setup:
    """What one variant trains with: the parts of its config the memory model reads."""

    technique: str  # full | lora | qlora | dpo
    precision: str = "bf16"  # bf16 | fp16 | fp32
    optimizer: str = "adamw_torch"
    gradient_checkpointing: bool = False
    micro_batch: int = 1
    seq_len: int = 1024
    r: int = 16
    targets: object = "all-linear"
    bits: int = 4
    double_quant: bool = True
    label_tokens: int | None = None  # tokens per row whose logits the loss computes (None: every token)
    chunked_logits: bool = False  # the loss takes log-probabilities in tiles and holds no logits (TRL on CUDA)

    @classmethod
    def from_variant(
        cls,
        v,
        precision: str,
        parent=None,
        answer_tokens: int | None = None,
        cuda: bool = True,
        labelled: bool | None = None,
    ) -> Setup:
        """At the variant's own micro-batch and sequence length (``at`` sets others).
        ``parent``: the variant a derived one continues (DPO trains the parent's adapter: its rank and targets).
        ``answer_tokens``: the longest answer of the training data in tokens, ``cuda``: on a CUDA GPU (a projection)
        or a CPU, ``labelled``: whether the loss computed its logits at labelled tokens alone, as a run's record
        says (None: as params.yaml decides, ``labelled_logits``): ``logits_held`` makes them what the peak holds."""
        o, t = {**(parent.options if parent is not None else {}), **v.options}, v.train
        labels, chunked = logits_held(
            labelled_logits(v) if labelled is None else labelled, answer_tokens, cuda, getattr(v, "backend", "hf")
        )
        return cls(
            v.technique,
            precision,
            t.optimizer,
            t.gradient_checkpointing,
            t.micro_batch,
            t.max_seq_len,
            int(o.get("r", 16)),
            o.get("targets", "all-linear"),
            int(o.get("bits", 4)),
            bool(o.get("double_quant", True)),
            labels,
            chunked,
        )

    def at(self, seq_len: int | None = None, micro_batch: int | None = None) -> Setup:
        """The same setup at another sequence length and micro-batch (None: as it is)."""
        return replace(self, seq_len=seq_len or self.seq_len, micro_batch=micro_batch or self.micro_batch)


def labelled_logits(v) -> bool:
    """Whether the variant's loss computes logits at labelled tokens alone, as ``bakeoff.train.kernels.choose``
    decides for a Llama-style head: SFT (not DPO) through the pipeline's trainer (not Unsloth's own loss)."""
    return getattr(v, "backend", "hf") != "unsloth" and v.train.labelled_loss(sft=not facts(v.technique).pairs)


def logits_held(labelled: bool, answer_tokens: int | None, cuda: bool, backend: str = "hf") -> tuple[int | None, bool]:
    """The logits a run's loss holds, as ``Setup``'s (``label_tokens``, ``chunked_logits``): a labelled loss the
    answer's tokens (``answer_tokens``; unknown: every token's, the upper bound); any other loss of the pipeline's
    trainer on a CUDA GPU none (TRL's fused head takes the log-probabilities in tiles: seen on an H200); otherwise (a
    CPU, or Unsloth's own loss) every token's."""
    if labelled:
        return answer_tokens or None, False
    return None, cuda and backend == "hf"


@dataclass
class Estimate:
    weights: float
    gradients: float
    optimizer: float
    activations: float
    overhead: float
    trainable: int = 0

    @property
    def total(self) -> float:
        return self.weights + self.gradients + self.optimizer + self.activations + self.overhead

    def parts_gb(self) -> dict[str, float]:
        return {
            k: round(getattr(self, k) / GB, 3) for k in ("weights", "gradients", "optimizer", "activations", "overhead")
        } | {"total": round(self.total / GB, 3)}


def _half(precision: str) -> int:
    return 4 if precision == "fp32" else 2


def estimate(shape: Shape, s: Setup, overhead_bytes: float = 0.0) -> Estimate:
    """Peak bytes of one training process for ``shape`` trained as ``s``."""
    act_bytes, f = _half(s.precision), facts(s.technique)
    if f.trains == "all":
        trainable = shape.params
        weights = 4 * shape.params  # fp32 master weights (mixed precision autocasts from them)
    elif f.quantized:
        trainable = shape.lora_params(s.r, s.targets)
        if s.bits == 4:
            per = 0.5 + (0.127 if s.double_quant else 0.5) / 8
        else:
            per = 1.0 + 4 / shape.hidden  # int8 weights and a fp32 scale per row
        weights = per * shape.linear_params + act_bytes * shape.other_params + 4 * trainable
    else:  # LoRA, DPO: a frozen base in the training dtype, fp32 adapters
        trainable = shape.lora_params(s.r, s.targets)
        weights = act_bytes * shape.params + 4 * trainable
    grads = 4 * trainable
    optim = (2 if "8bit" in s.optimizer else 8) * trainable
    rows = s.micro_batch * (2 if f.pairs else 1)  # chosen and rejected
    tokens = rows * s.seq_len
    scale = act_bytes / 2
    per_layer = tokens * (16 * shape.hidden + 8 * shape.intermediate) * scale
    if s.gradient_checkpointing:
        acts = shape.layers * tokens * 2 * shape.hidden * scale + per_layer
    else:
        acts = shape.layers * per_layer
    logit_tokens = 0 if s.chunked_logits else rows * min(s.seq_len, s.label_tokens) if s.label_tokens else tokens
    acts += logit_tokens * shape.vocab * 10
    return Estimate(weights, grads, optim, acts, overhead_bytes, trainable)


def calibrate(rows: list[tuple[float, float]]) -> tuple[float, list[float]]:
    """(overhead, relative errors) from (predicted bytes without overhead, measured bytes) pairs: the overhead
    is the median of measured − predicted, and each error is (predicted + overhead − measured) / measured."""
    import statistics

    if not rows:
        return 0.0, []
    overhead = max(0.0, statistics.median(m - p for p, m in rows))
    return overhead, [(p + overhead - m) / m for p, m in rows]

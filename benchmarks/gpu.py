"""Technique variants on one CUDA GPU, with no download: CUDA peak memory, tokens/s, MFU, memory-model error.

    python benchmarks/gpu.py                                  # 0.5B, 1B and 3B shapes × 5 techniques (H200: < 8 min)
    python benchmarks/gpu.py --shapes tiny --steps 2 --techniques lora,full   # CPU smoke run

For each shape a random-initialised model of a real architecture (Qwen2.5-0.5B's, TinyLlama-1.1B's and
Llama-3.2-3B's dimensions, as a Llama) is saved to a temporary folder; each technique then runs in its own process
(Unsloth must be imported before transformers, and a fresh process gives clean CUDA peak statistics) through
bakeoff's own ``technique.build`` with the pipeline's dtypes (full: fp32 master weights under bf16 autocast;
LoRA: a bf16 frozen base) and the same measurement (``bakeoff.measure``): steady-state tokens/s, CUDA peak
allocated and reserved. Beside each peak: the memory model's prediction (``bakeoff.sizing``, with 1 GB of CUDA
context) and its error. The batches are random token ids of a fixed length: no tokenizer or data set needed.
Needs only torch, transformers, peft, bitsandbytes and unsloth (and bakeoff itself).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHAPES = {  # name → LlamaConfig fields
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936),
    "3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
               num_key_value_heads=8, vocab_size=128256),
    "1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
               num_key_value_heads=4, vocab_size=32000),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=1024),
}
TECHNIQUES = {  # name → (technique, backend, extra train config)
    "lora": ("lora", "hf", {}),
    "lora_ckpt": ("lora", "hf", {"gradient_checkpointing": True}),
    "qlora": ("qlora", "hf", {}),
    "unsloth": ("lora", "unsloth", {}),
    "full": ("full", "hf", {"optimizer": "adamw_torch"}),
}


def make_model(shape: str, out: Path) -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**SHAPES[shape], max_position_embeddings=4096, tie_word_embeddings=False)
    torch.manual_seed(0)
    from bakeoff.measure import flop_params

    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    save_tokenizer(out)
    return flop_params(model)  # N without the input embedding: the FLOPs convention of bakeoff.measure


def save_tokenizer(out: Path, words: int = 1000) -> None:
    """A word-level tokenizer beside the weights: Unsloth's loader reads one from the model folder (the batches here
    are random ids, so its vocabulary does not matter; it stays inside every shape's vocab_size)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {f"w{i}": i for i in range(words)} | {t: words + i for i, t in enumerate(["<unk>", "<s>", "</s>", "<pad>"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                            pad_token="<pad>").save_pretrained(out)


def run_one(name: str, model_dir: Path, steps: int, batch: int, seq: int) -> dict:
    """One technique, in this process: build it as the pipeline does, train ``steps`` steps on random tokens."""
    technique, backend, extra = TECHNIQUES[name]
    if backend == "unsloth":
        from bakeoff.techniques.backends import unsloth

        unsloth.preload()
    import torch

    from bakeoff.config import TrainConfig, VariantConfig
    from bakeoff.measure import PeakMemory, StepLog, count_params
    from bakeoff.models import resolve_precision
    from bakeoff.runs import classify
    from bakeoff.techniques import get_technique

    tech = get_technique(technique)
    precision = resolve_precision("auto")
    train = TrainConfig(micro_batch=batch, effective_batch=batch, max_seq_len=seq, **extra)
    variant = VariantConfig(name=name, technique=technique, backend=backend, train=train, options=dict(tech.defaults))
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        model = tech.build(model_dir, variant, precision)
        if technique != "qlora" and backend == "hf":  # bitsandbytes and Unsloth place their models themselves
            # as the pipeline: full keeps fp32 master weights (bf16 autocast); LoRA's frozen base is already bf16
            model = model.to(dev)
        if train.gradient_checkpointing and technique != "qlora":
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            model.enable_input_require_grads()
        model.train()
        sizes = count_params(model)
        params = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-4)
        vocab = model.config.vocab_size
        log = StepLog(warmup_steps_excluded=min(2, steps - 1))
        autocast = torch.autocast(dev.type, dtype=torch.bfloat16, enabled=precision == "bf16")
        with PeakMemory() as mem:
            t0 = time.perf_counter()
            for _ in range(steps):
                ids = torch.randint(0, vocab, (batch, seq), device=dev)
                batch_in = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
                log.begin_step()
                log.add_micro_batch(batch_in)
                with autocast:
                    loss = model(**batch_in, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                log.end_step()
            wall = time.perf_counter() - t0
        evidence = getattr(model, "bakeoff_backend_evidence", None)  # Unsloth: its version and what it patched
        extra_out = {"backend_evidence": evidence} if evidence else {}
        return {"technique": name, "status": "ok", **sizes, **log.metrics(), **mem.metrics("train"), **extra_out,
                "wall_s": round(wall, 1), "precision": precision, "predicted_gb": predicted_gb(name, model_dir, batch, seq, precision)}
    except Exception as e:
        status, reason = classify(e)
        return {"technique": name, "status": status, "error": reason.splitlines()[0][:300]}


def predicted_gb(name: str, model_dir: Path, batch: int, seq: int, precision: str) -> float:
    """The memory model's peak for this technique and shape, with 1 GB of CUDA context."""
    from bakeoff.sizing import GB, Setup, Shape, estimate

    technique, _, extra = TECHNIQUES[name]
    shape = Shape.from_config(name, json.loads((Path(model_dir) / "config.json").read_text()))
    setup = Setup(technique, precision, extra.get("optimizer", "adamw_torch"),
                  extra.get("gradient_checkpointing", False), batch, seq)
    return round(estimate(shape, setup, 1 * GB).total / GB, 3)


def mfu(row: dict, n_params: int, peak_tflops: float | None, hardware: bool = False) -> float | None:
    """MFU (``hardware``: HFU) of a row, by ``bakeoff.measure``'s convention: ``n_params`` is N without the input
    embedding; 6·N per token for full fine-tuning, 4·N for adapters; HFU adds checkpointing's recompute."""
    from bakeoff import measure

    if not peak_tflops or "train_tokens_per_s" not in row:
        return None
    technique, _, extra = TECHNIQUES.get(row["technique"], (row["technique"], "hf", {}))
    if hardware:
        value = measure.hfu(row["train_tokens_per_s"], n_params, technique, peak_tflops * 1e12,
                            extra.get("gradient_checkpointing", False))
    else:
        value = measure.mfu(row["train_tokens_per_s"], n_params, technique, peak_tflops * 1e12)
    return round(value, 4)


def _error(r: dict) -> str:
    """(predicted − measured) ÷ measured, against CUDA peak reserved (else peak RSS on CPU)."""
    measured = r.get("train_peak_reserved_mb") or r.get("train_peak_rss_mb")
    if not measured or "predicted_gb" not in r:
        return "–"
    m = measured * 1024 ** 2 / 1e9
    return f"{(r['predicted_gb'] - m) / m:+.1%}"


def table(rows: list[dict], n_params: int, peak_tflops: float | None) -> str:
    head = ["technique", "status", "tok/s", "peak alloc MB", "peak reserved MB", "peak RSS MB", "model GB",
            "model error", "trainable", "MFU", "HFU"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["technique"], r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('error', '')}",
                 r.get("train_tokens_per_s", "–"), r.get("train_peak_allocated_mb", "–"),
                 r.get("train_peak_reserved_mb", "–"), r.get("train_peak_rss_mb", "–"), r.get("predicted_gb", "–"),
                 _error(r),
                 f"{r['trainable_params']:,}" if "trainable_params" in r else "–",
                 mfu(r, n_params, peak_tflops) or "–", mfu(r, n_params, peak_tflops, hardware=True) or "–"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="0.5b,1b,3b", help=f"comma-separated, from {', '.join(SHAPES)}")
    ap.add_argument("--techniques", default="lora,lora_ckpt,qlora,unsloth,full")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--peak-tflops", type=float, default=989.0, help="the card's dense bf16 peak (H100/H200: 989)")
    ap.add_argument("--out", type=Path, default=None, help="also write the rows as JSON here")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:  # child process: one technique, one JSON line
        print("ROW " + json.dumps(run_one(a.one, a.model_dir, a.steps, a.batch, a.seq)), flush=True)
        return
    results = {}
    t_start = time.perf_counter()
    for shape in a.shapes.split(","):
        rows = []
        with tempfile.TemporaryDirectory() as tmp:
            n_params = make_model(shape, Path(tmp))
            print(f"\nmodel: Llama {shape} shape, N = {n_params / 1e9:.2f}B (input embedding excluded), random weights; "
                  f"batch {a.batch} × {a.seq} tokens, {a.steps} steps", flush=True)
            for name in a.techniques.split(","):
                cmd = [sys.executable, __file__, "--one", name, "--model-dir", tmp, "--steps", str(a.steps),
                       "--batch", str(a.batch), "--seq", str(a.seq)]
                r = subprocess.run(cmd, capture_output=True, text=True)
                found = [line[4:] for line in r.stdout.splitlines() if line.startswith("ROW ")]
                row = json.loads(found[-1]) if found else {"technique": name, "status": "failed",
                                                            "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
                row["mfu"] = mfu(row, n_params, a.peak_tflops)
                row["hfu"] = mfu(row, n_params, a.peak_tflops, hardware=True)
                rows.append(row)
                print(f"  {name}: {row['status']} {row.get('train_tokens_per_s', '')}", flush=True)
        results[shape] = {"params": n_params, "rows": rows}
        print(f"\n## {shape} ({n_params / 1e9:.2f}B)\n")
        print(table(rows, n_params, a.peak_tflops), flush=True)
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s; MFU: 6·N FLOPs per token for full fine-tuning, 4·N for "
          f"adapters, against {a.peak_tflops} TFLOP/s")
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"batch": a.batch, "seq": a.seq, "steps": a.steps,
                                     "peak_tflops": a.peak_tflops, "shapes": results}, indent=2))


if __name__ == "__main__":
    main()

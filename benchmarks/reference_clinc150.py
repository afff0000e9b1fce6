"""The hand-written reference for the shipped CLINC150 task (data/raw/clinc150): a plain TRL + PEFT LoRA run of a
fixed recipe, no search and no early stopping, that reads the CSVs and scores accuracy with its own few lines, so the
pipeline's searched LoRA (benchmarks/clinc150.py) can be held against something that shares none of its code.

    .venv/bin/python benchmarks/reference_clinc150.py                 # 300 steps × 8 rows, lr 1e-3 (~25 min, 2 cores)
    .venv/bin/python benchmarks/reference_clinc150.py --steps 4        # a smoke run

Needs the default base model in models/base (`dvc repro model`). Train on every row of train.csv (the pipeline
holds 10% of them out for validation), test on test.csv. Each query is the user's turn of the model's chat template,
its intent the assistant's; TRL's SFTTrainer with a PEFT LoRA (r 16, alpha 32, all linear layers, completion-only
loss, linear schedule, 5% warm-up), bf16 autocast where the CPU has native bf16 (AVX512-BF16 or AMX), else fp32;
greedy answers, right when they equal the intent after lower-casing and stripping. The one line of bakeoff it
imports is a platform patch, not the pipeline: TRL 1.15's fused loss head is Triton-only and has no CPU path
(``bakeoff.train.backends.trl_cpu``). Writes reports/bench/reference_clinc150.json. Exits 0 (a reference,
no target of its own).
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "raw" / "clinc150"


def rows(name: str) -> list[tuple[str, str]]:
    with open(DATA / name, newline="") as f:
        return [(r["text"], r["intent"]) for r in csv.DictReader(f)]


def native_bf16() -> bool:
    flags = next((x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("flags")), "")
    return "avx512_bf16" in flags or "amx_bf16" in flags


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--base", default=str(ROOT / "models" / "base"))
    ap.add_argument("--out", default=str(ROOT / "reports/bench/reference_clinc150.json"))
    a = ap.parse_args()

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from bakeoff.train.backends import trl_cpu

    if not torch.cuda.is_available():
        trl_cpu.install()
    train, test = rows("train.csv"), rows("test.csv")
    bf16 = torch.cuda.is_available() or native_bf16()
    tok = AutoTokenizer.from_pretrained(a.base)
    budget = max(len(tok(label, add_special_tokens=False)["input_ids"]) for _, label in train) + 2
    ds = Dataset.from_list(
        [
            {"prompt": [{"role": "user", "content": q}], "completion": [{"role": "assistant", "content": label}]}
            for q, label in train
        ]
    )
    model = AutoModelForCausalLM.from_pretrained(a.base, dtype=torch.float32)
    cfg = SFTConfig(
        output_dir=tempfile.mkdtemp(),
        max_steps=a.steps,
        per_device_train_batch_size=a.batch,
        learning_rate=a.lr,
        lr_scheduler_type="linear",
        warmup_steps=round(0.05 * a.steps),
        bf16=bf16,
        use_cpu=not torch.cuda.is_available(),
        logging_steps=10,
        save_strategy="no",
        report_to=[],
        seed=0,
        max_length=256,
        completion_only_loss=True,
    )
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok, peft_config=lora)
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    model = trainer.model.merge_and_unload().eval()

    tok.padding_side = "left"
    answers = []
    for i in range(0, len(test), 16):
        batch = [
            tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True)
            for q, _ in test[i : i + 16]
        ]
        enc = tok(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model.generate(**enc, max_new_tokens=budget, do_sample=False, pad_token_id=tok.pad_token_id)
        answers += tok.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    right = sum(ans.strip().lower() == label.strip().lower() for ans, (_, label) in zip(answers, test))
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    rec = {
        "task": "clinc150",
        "train_rows": len(train),
        "test_rows": len(test),
        "labels": len({label for _, label in train}),
        "recipe": {
            "technique": "lora (TRL SFTTrainer + PEFT, by hand)",
            "r": 16,
            "alpha": 32,
            "lr": a.lr,
            "steps": a.steps,
            "batch": a.batch,
            "schedule": "linear, 5% warm-up",
            "precision": "bf16" if bf16 else "fp32",
        },
        "test_accuracy": round(right / len(test), 4),
        "train_s": round(train_s, 1),
        "train_loss_first_last": [losses[0], losses[-1]] if losses else None,
        "cpu": _cpu(),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(rec, indent=2) + "\n")
    print(json.dumps(rec, indent=2))


def _cpu() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()

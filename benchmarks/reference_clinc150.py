"""The hand-written reference for the shipped CLINC150 task (data/raw/clinc150): a plain TRL + PEFT LoRA run of a
fixed recipe, no search and no early stopping, scored on the same test split by the same metric, so the pipeline's
searched LoRA can be held against it (issue 24's acceptance: within 3 points of it, or above).

    .venv/bin/python benchmarks/reference_clinc150.py                 # 300 steps × 8 rows, lr 1e-3 (~25 min, 2 cores)
    .venv/bin/python benchmarks/reference_clinc150.py --steps 4        # a smoke run

The splits are bakeoff's own (``bakeoff.prepare`` on the task below, into a temporary folder): the same train rows
the pipeline trains on and the same 150 test rows. Training is TRL's SFTTrainer with a PEFT LoRA (r 16, alpha 32,
all linear layers, completion-only loss, linear schedule, 5% warm-up; on CPU bakeoff's plain-PyTorch stand-in for
TRL 1.15's Triton-only fused head), fp32 or bf16 as ``precision: auto`` picks;
answers are greedy chat generations, scored by ``bakeoff.metrics`` (accuracy over the normalised label). Writes
reports/bench/reference_clinc150.json. Exits 0 (a reference, no target of its own).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASK = {"name": "clinc150", "train": "data/raw/clinc150/train.csv", "test": "data/raw/clinc150/test.csv",
        "columns": {"prompt": "text", "completion": "intent"}, "labels": "auto", "metric": "accuracy",
        "max_new_tokens": "auto", "prefs": None}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--out", default=str(ROOT / "reports/bench/reference_clinc150.json"))
    a = ap.parse_args()

    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from bakeoff.config import parse_params
    from bakeoff.data import load_examples
    from bakeoff.metrics import score
    from bakeoff.models import resolve_precision
    from bakeoff.prepare import prepare
    from bakeoff.schema import Source
    from bakeoff.techniques.backends import trl_cpu
    import yaml

    trl_cpu.install()  # TRL 1.15's fused head is Triton-only; this puts a plain-PyTorch one in its place on CPU
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["task"] = {**raw["task"], **TASK}
    params = parse_params(raw, Source("params.yaml (task: clinc150)", {}))
    base = ROOT / "models/base"
    tok = AutoTokenizer.from_pretrained(base)
    with tempfile.TemporaryDirectory() as d:
        stats = prepare(params, Path(d), tok)
        train, test = load_examples(Path(d) / "train.jsonl"), load_examples(Path(d) / "test.jsonl")
    labels, budget = stats["labels"], stats["generation"]["max_new_tokens"]
    precision = resolve_precision("auto")
    ds = Dataset.from_list([{"prompt": e.messages, "completion": [{"role": "assistant", "content": e.completion}]}
                            for e in train])
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    cfg = SFTConfig(output_dir=tempfile.mkdtemp(), max_steps=a.steps, per_device_train_batch_size=a.batch,
                    learning_rate=a.lr, lr_scheduler_type="linear", warmup_steps=round(0.05 * a.steps),
                    bf16=precision == "bf16", use_cpu=not torch.cuda.is_available(), logging_steps=10,
                    save_strategy="no", report_to=[], seed=0, max_length=256, completion_only_loss=True)
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=ds, processing_class=tok, peft_config=lora)
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    model = trainer.model.merge_and_unload().eval()

    tok.padding_side = "left"
    preds = []
    for i in range(0, len(test), 16):
        batch = [tok.apply_chat_template(e.messages, tokenize=False, add_generation_prompt=True) for e in test[i:i + 16]]
        enc = tok(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = model.generate(**enc, max_new_tokens=budget, do_sample=False, pad_token_id=tok.pad_token_id)
        preds += tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    acc = score("accuracy", preds, [e.completion for e in test], labels)[0]
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    rec = {"task": "clinc150", "train_rows": len(train), "test_rows": len(test), "labels": len(labels),
           "recipe": {"technique": "lora (TRL SFTTrainer + PEFT, by hand)", "r": 16, "alpha": 32, "lr": a.lr,
                      "steps": a.steps, "batch": a.batch, "schedule": "linear, 5% warm-up", "precision": precision},
           "test_accuracy": round(acc, 4), "train_s": round(train_s, 1), "train_loss_first_last": [losses[0], losses[-1]]
           if losses else None, "cpu": _cpu()}
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

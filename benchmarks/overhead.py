"""Harness overhead: bakeoff's LoRA training throughput against a minimal hand-written PyTorch + PEFT loop.

    python benchmarks/overhead.py                  # default model and task (after `dvc repro data`)
    python benchmarks/overhead.py --min-pairs 7 --steps 12

Both sides train the same LoRA (params.yaml's `lora` variant: rank, targets, bf16 frozen base where the CPU is
fast at bf16) on the same rows in the same order, the same micro-batch, accumulation, sequence length, steps and
threads. The hand loop tokenizes each row in the chat template, masks the prompt, pads each micro-batch to its
longest row and runs forward, backward and AdamW itself. Both count tokens and time the same way
(``bakeoff.core.step_timing.StepLog``: non-padding tokens over the steady-state steps) over the same window: a step's
micro-batches are collated before its clock starts on both sides, as the Trainer fetches them before
``on_step_begin``. The runs alternate (bakeoff, hand, bakeoff, hand, ...) so drift on the machine hits both; the
ratio is bakeoff ÷ hand per pair. Pairs are added (``--min-pairs`` to ``--max-pairs``) until the 95% bootstrap
interval of the median ratio is narrower than ±``--margin``; the target is a median ≥ 1 − margin. Exits 1 when the
median misses it or the spread never got that narrow. Writes reports/bench/overhead.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from targets import Targets
from targets import add_argument as add_target_argument


def hand_loop(base: Path, variant, rows, precision: str) -> dict:
    """The minimal loop: PEFT LoRA, chat-template rows with the prompt masked, AdamW, linear schedule."""
    import torch
    from peft import get_peft_model

    from bakeoff.core.models import frozen_dtype, load_model, load_tokenizer
    from bakeoff.core.step_timing import StepLog
    from bakeoff.data.prompts import prompt_and_full
    from bakeoff.train.techniques import get_technique

    t = variant.train
    torch.manual_seed(t.seed)
    tok = load_tokenizer(base)
    model = get_peft_model(
        load_model(base, dtype=frozen_dtype(precision)), get_technique("lora").lora_config(variant.options)
    )
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=t.lr, weight_decay=t.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / t.max_steps))
    encoded = []
    for e in rows:
        ids, n_prompt = prompt_and_full(tok, e.messages, e.completion)
        ids = ids[: t.max_seq_len]
        encoded.append((ids, n_prompt))
    log = StepLog(warmup_steps_excluded=t.warmup_steps_excluded)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    pos = 0
    for _ in range(t.max_steps):
        batches = []
        for _ in range(t.grad_accum):
            chunk = [encoded[(pos + i) % len(encoded)] for i in range(t.micro_batch)]
            pos += t.micro_batch
            width = max(len(ids) for ids, _ in chunk)
            input_ids = torch.full((len(chunk), width), tok.pad_token_id)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            labels = torch.full((len(chunk), width), -100)
            for r, (ids, n_prompt) in enumerate(chunk):
                input_ids[r, : len(ids)] = torch.tensor(ids)
                mask[r, : len(ids)] = 1
                labels[r, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
            batches.append({"input_ids": input_ids, "attention_mask": mask, "labels": labels})
        n_items = sum(int((b["labels"][:, 1:] != -100).sum()) for b in batches)
        log.begin_step()  # after collation, as the Trainer's on_step_begin comes after it fetched the step's batches
        for b in batches:
            log.add_micro_batch(b)
            with autocast:
                logits = model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
            loss = (
                torch.nn.functional.cross_entropy(
                    logits[:, :-1].float().reshape(-1, logits.size(-1)),
                    b["labels"][:, 1:].reshape(-1),
                    ignore_index=-100,
                    reduction="sum",
                )
                / n_items
            )
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        log.end_step()
    return log.metrics()


def bakeoff_run(base: Path, variant, rows, precision: str, work: Path) -> dict:
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    m = train(Job(get_technique("lora"), variant, base, work / "out", precision, work / "tmp"), rows)
    return {k: m[k] for k in ("train_tokens_per_s", "tokens_seen", "train_steps", "padding_share")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--min-pairs", type=int, default=5)
    ap.add_argument("--max-pairs", type=int, default=12)
    ap.add_argument("--margin", type=float, default=0.05, help="target: median ratio ≥ 1 − margin, known to ±margin")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--variant", default="lora")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "overhead.json"))
    add_target_argument(ap)
    args = ap.parse_args()
    targets = Targets.from_args(args.target)

    import tempfile

    import torch

    from bakeoff.core.config import load_params
    from bakeoff.core.models import resolve_precision
    from bakeoff.data.examples import load_examples
    from bakeoff.decide.statistics import bootstrap_ci

    params = load_params(ROOT / "params.yaml")
    v = params.variant(args.variant)
    # sequential order on both sides (no shuffling), so each step sees the same rows
    v = replace(
        v, train=replace(v.train, max_steps=args.steps, batching="sequential", warmup_ratio=0.0, checkpoint_steps=0)
    )
    precision = resolve_precision(v.train.precision)
    rows = load_examples(ROOT / "data" / "prepared" / "train.jsonl")
    need = args.steps * v.train.effective_batch
    rows = (rows * (need // len(rows) + 1))[:need]
    base = ROOT / "models" / "base"

    pairs, spread = [], float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.max_pairs):
            t0 = time.perf_counter()
            b = bakeoff_run(base, v, rows, precision, Path(tmp) / f"b{i}")
            h = hand_loop(base, v, rows, precision)
            ratio = b["train_tokens_per_s"] / h["train_tokens_per_s"]
            pairs.append(
                {
                    "bakeoff_tokens_per_s": b["train_tokens_per_s"],
                    "hand_tokens_per_s": h["train_tokens_per_s"],
                    "bakeoff_tokens": b["tokens_seen"],
                    "hand_tokens": h["tokens_seen"],
                    "ratio": round(ratio, 4),
                }
            )
            print(
                f"pair {i + 1}: bakeoff {b['train_tokens_per_s']:.1f} tok/s, hand {h['train_tokens_per_s']:.1f} "
                f"tok/s, ratio {ratio:.3f} ({time.perf_counter() - t0:.0f} s)",
                flush=True,
            )
            if len(pairs) >= args.min_pairs:
                _, lo, hi = bootstrap_ci([p["ratio"] for p in pairs], statistics.median, resamples=2000)
                spread = (hi - lo) / 2
                print(f"  median ratio 95% interval [{lo:.3f}, {hi:.3f}], ±{spread:.3f}", flush=True)
                if spread < args.margin:
                    break
    ratios = [p["ratio"] for p in pairs]
    result = {
        "variant": args.variant,
        "steps": args.steps,
        "micro_batch": v.train.micro_batch,
        "grad_accum": v.train.grad_accum,
        "precision": precision,
        "threads": torch.get_num_threads(),
        "pairs": pairs,
        "ratio_min": min(ratios),
        "ratio_median": statistics.median(ratios),
        "ratio_max": max(ratios),
        "median_spread": round(spread, 4),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(
        f"\n## Harness overhead ({len(pairs)} alternated pairs, {args.steps} steps, {precision}, "
        f"{result['threads']} threads)\n"
    )
    print("| pair | bakeoff tok/s | hand-written tok/s | ratio |\n|---|---|---|---|")
    for i, p in enumerate(pairs, 1):
        print(f"| {i} | {p['bakeoff_tokens_per_s']:.1f} | {p['hand_tokens_per_s']:.1f} | {p['ratio']:.3f} |")
    print(
        f"\nratio min {result['ratio_min']:.3f} / median {result['ratio_median']:.3f} (±{spread:.3f}) / max "
        f"{result['ratio_max']:.3f}; tokens per run: bakeoff {pairs[0]['bakeoff_tokens']}, "
        f"hand {pairs[0]['hand_tokens']}\nwrote {out}"
    )
    targets.at_least("ratio_median", round(result["ratio_median"], 4), 1 - args.margin)
    targets.at_most("median_spread", round(spread, 4), args.margin)
    targets.exit()


if __name__ == "__main__":
    main()

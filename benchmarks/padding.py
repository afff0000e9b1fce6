"""Padding: the share of the tokens the trainer computes that are padding, on the default task.

    python benchmarks/padding.py            # every batching option, micro-batches as params.yaml's variants

It builds each variant's real trainer (TRL's collator, the sampler its `batching` selects) and walks one epoch
of its training dataloader without training: padding share = 1 − non-padding tokens ÷ computed tokens, the
same definition as the `padding_share` training records (``bakeoff.core.step_timing.StepLog``). Writes
reports/bench/padding.json.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from targets import Targets
from targets import add_argument as add_target_argument


def share(variant, base: Path, rows, precision: str, work: Path) -> dict:
    from bakeoff.core.models import load_tokenizer
    from bakeoff.core.step_timing import non_padding_tokens
    from bakeoff.train.techniques import get_technique

    tech = get_technique(variant.technique)
    tok = load_tokenizer(base)
    cls, args = tech.trainer_parts(variant, precision, work)
    model = tech.build(base, variant, precision)
    trainer = cls(model=model, args=args, train_dataset=tech.dataset(rows), processing_class=tok)
    real = computed = 0
    for batch in trainer.get_train_dataloader():
        real += non_padding_tokens(batch)
        computed += int(batch["input_ids"].numel())
    return {"padding_share": round(1 - real / computed, 4), "tokens": real, "computed": computed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "padding.json"))
    add_target_argument(ap)
    args = ap.parse_args()
    targets = Targets.from_args(args.target)
    from bakeoff.core.config import load_params
    from bakeoff.data.examples import load_examples

    params = load_params(ROOT / "params.yaml")
    rows = load_examples(ROOT / "data" / "prepared" / "train.jsonl")
    v = params.variant("lora")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for micro in sorted({x.train.micro_batch for x in params.variants.values() if x.technique != "dpo"}):
            for batching in ("padded", "group_by_length"):
                vv = replace(
                    v,
                    train=replace(
                        v.train,
                        micro_batch=micro,
                        effective_batch=max(micro, v.train.effective_batch),
                        batching=batching,
                    ),
                )
                r = share(vv, ROOT / "models" / "base", rows, "fp32", Path(tmp))
                results.append({"micro_batch": micro, "batching": batching, **r})
                print(f"micro-batch {micro}, {batching}: padding {r['padding_share']:.2%}", flush=True)
    default = next(r for r in results if r["micro_batch"] == v.train.micro_batch and r["batching"] == v.train.batching)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rows": results, "default": default}, indent=2))
    print(f"\n## Padding during training ({len(rows)} training rows, one epoch)\n")
    print("| micro-batch | batching | padding share | non-padding tokens | computed tokens |\n|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['micro_batch']} | {r['batching']} | {r['padding_share']:.2%} | {r['tokens']:,} | {r['computed']:,} |"
        )
    print(
        f"\ndefault (micro-batch {default['micro_batch']}, {default['batching']}): {default['padding_share']:.2%} "
        f"(one epoch: a count, not a timing, so it has no spread)\nwrote {out}"
    )
    targets.at_most("default_padding_share", round(default["padding_share"], 4), 0.10)
    targets.exit()


if __name__ == "__main__":
    main()

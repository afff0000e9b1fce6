"""Batched against one-at-a-time generation on the default test set, and what each prompting baseline costs.

    python benchmarks/eval_speed.py                 # models/base and data/prepared from `dvc repro`
    python benchmarks/eval_speed.py --limit 20      # a quicker look

Both passes run bakeoff's own ``generate`` (greedy, left-padded, prompts sorted by length) on the same prompts
in the same process; the figures are wall time of generation only. Agreement is the share of test examples
whose two outputs are the same string. Writes reports/bench/eval.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from targets import Targets
from targets import add_argument as add_target_argument


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "base"))
    ap.add_argument("--data", default=str(ROOT / "data" / "prepared"))
    ap.add_argument("--params", default=str(ROOT / "params.yaml"))
    ap.add_argument("--limit", type=int, default=None, help="first N test examples (default: all)")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "eval.json"))
    ap.add_argument("--repeats", type=int, default=3, help="timed batched passes (their spread is reported)")
    add_target_argument(ap)
    args = ap.parse_args()
    targets = Targets.from_args(args.target)

    import torch

    from bakeoff.core.config import load_params
    from bakeoff.core.models import load_for_eval, load_tokenizer
    from bakeoff.data.examples import load_examples
    from bakeoff.data.prompts import encode, few_shot_messages, render_prompt, shot_picker
    from bakeoff.evaluate.generation import Decoding, generate

    params = load_params(args.params)
    tok, model = load_tokenizer(args.model), load_for_eval(args.model)
    train = load_examples(Path(args.data) / "train.jsonl")
    test = load_examples(Path(args.data) / "test.jsonl")[: args.limit]
    prompts = [e.messages for e in test]
    stats = json.loads((Path(args.data) / "stats.json").read_text())
    new = (stats.get("generation") or {}).get("max_new_tokens") or params.task.max_new_tokens  # `auto` resolved
    bs = params.eval.batch_size
    generate(model, tok, prompts[:2], Decoding(new, bs), None)  # warm-up, untimed

    t0 = time.perf_counter()
    single, slog = generate(model, tok, prompts, Decoding(new, 1), desc="batch 1")
    t_single = time.perf_counter() - t0
    batched_s = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        batched, blog = generate(model, tok, prompts, Decoding(new, bs), desc=f"batch {bs}")
        batched_s.append(time.perf_counter() - t0)
    t_batched = statistics.median(batched_s)
    agree = sum(a == b for a, b in zip(batched, single)) / len(test)

    costs = {}
    for name, b in params.baselines.items():
        pick = shot_picker(train, b.shots, b.selection, params.task.seed)
        lengths = [len(encode(tok, render_prompt(tok, few_shot_messages(e, pick(e), b.instruction)))) for e in test]
        costs[name] = round(sum(lengths) / len(lengths), 1)

    result = {
        "examples": len(test),
        "batch_size": bs,
        "max_new_tokens": new,
        "threads": torch.get_num_threads(),
        "batched_s": round(t_batched, 2),
        "one_at_a_time_s": round(t_single, 2),
        "speedup": round(t_single / t_batched, 2),
        "agreement": round(agree, 4),
        "batched_s_each": [round(x, 2) for x in batched_s],
        "speedup_range": [round(t_single / max(batched_s), 2), round(t_single / min(batched_s), 2)],
        "batched_gen_tokens_per_s": blog.metrics()["gen_tokens_per_s"],
        "one_at_a_time_gen_tokens_per_s": slog.metrics()["gen_tokens_per_s"],
        "prompt_tokens_per_request": costs,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"\n## Evaluation: batched vs one at a time ({len(test)} test examples, {result['threads']} threads)\n")
    print("| generation | wall s | gen tok/s |\n|---|---|---|")
    print(f"| batch {bs} | {t_batched:.1f} | {result['batched_gen_tokens_per_s']} |")
    print(f"| batch 1 | {t_single:.1f} | {result['one_at_a_time_gen_tokens_per_s']} |")
    print(
        f"\nspeed-up {result['speedup']}× (over {args.repeats} batched passes: {result['speedup_range'][0]}–"
        f"{result['speedup_range'][1]}×); identical outputs on {agree:.1%} of examples\n"
    )
    print("| baseline | prompt tokens per request |\n|---|---|")
    for name, c in costs.items():
        print(f"| {name} | {c} |")
    print(f"\nwrote {out}")
    targets.at_least("speedup", result["speedup"], 3.0)
    targets.at_least("identical_outputs", result["agreement"], 0.99)
    targets.exit()


if __name__ == "__main__":
    main()

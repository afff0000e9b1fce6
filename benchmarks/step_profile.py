"""Where a training step's time goes on this CPU: one step of each default technique, profiled inside the pipeline.

    python benchmarks/step_profile.py                       # lora and full, after `dvc repro data`
    python benchmarks/step_profile.py --variants lora,qlora --steps 4

Each variant of params.yaml trains a few steps through bakeoff's own loop (``techniques.trainer.train``: TRL's
trainer, the pipeline's dtypes, batching and optimizer) on the prepared training rows; a TrainerCallback wraps one
steady-state optimizer step (after ``--steps`` − 1 warm-up steps) in ``torch.profiler``. The ops' self CPU time is
grouped (matmul, attention, copies, elementwise, loss, optimizer, other) and the top ops listed; tokens/s is the
pipeline's own figure (``bakeoff.measure.StepLog``) for the same run. Writes reports/bench/step_profile.json.
This is the measuring half of the speed work (which lever to pull); the on/off comparison of levers is to come.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GROUPS = [  # first match wins; op names as torch.profiler reports them
    ("attention", r"scaled_dot_product|flash_attention|_efficient_attention|softmax_backward_data|aten::_softmax\b"),
    ("loss", r"log_softmax|nll_loss|cross_entropy|logsumexp"),
    ("matmul", r"aten::(mm|addmm|bmm|matmul|linear|baddbmm)\b|mkldnn|onednn"),
    ("optimizer", r"adam|_foreach_|lerp|addcdiv|addcmul|clip_grad|aten::sqrt|zero_"),
    ("copies", r"aten::(copy_|_to_copy|to|contiguous|clone|empty_like|_copy_from)\b"),
    ("elementwise", r"aten::(mul|add|sub|div|neg|pow|rsqrt|silu|sigmoid|mean|sum|cat|where|exp|tanh|gelu|"
                    r"masked_fill|fill_|add_|mul_|div_|silu_backward|threshold)"),
]


def group_of(op: str) -> str:
    for name, pattern in GROUPS:
        if re.search(pattern, op):
            return name
    return "other"


def profiled_step(at: int):
    """A TrainerCallback that profiles optimizer step number ``at`` (0-based), all of it, forward to zero_grad."""
    import torch
    from transformers import TrainerCallback

    class Profile(TrainerCallback):
        prof = None
        wall_s = None

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == at:
                self.prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                self.prof.__enter__()
                self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if self.prof is not None and self.wall_s is None:
                self.wall_s = time.perf_counter() - self.t0
                self.prof.__exit__(None, None, None)

    return Profile()


def profile_variant(params, name: str, steps: int, work: Path) -> dict:
    from bakeoff.data import load_examples
    from bakeoff.models import resolve_precision
    from bakeoff.techniques import get_technique
    from bakeoff.techniques.trainer import train

    v = params.variant(name)
    v = replace(v, train=replace(v.train, max_steps=steps, warmup_steps_excluded=steps - 1, eval_steps=0,
                                 checkpoint_steps=0, logging_steps=1))
    technique = get_technique(v.technique)
    rows = load_examples(ROOT / "data" / "prepared" / "train.jsonl")
    cb = profiled_step(steps - 1)
    precision = resolve_precision(v.train.precision)
    rec = train(technique, v, ROOT / "models" / "base", rows, work / name / "out", precision, work / name / "tmp",
                extra_callbacks=[cb])
    events = cb.prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    groups: dict[str, float] = {}
    for e in events:
        groups[group_of(e.key)] = groups.get(group_of(e.key), 0.0) + e.self_cpu_time_total
    top = sorted(events, key=lambda e: -e.self_cpu_time_total)[:12]
    return {"variant": name, "technique": v.technique, "precision": precision, "micro_batch": v.train.micro_batch,
            "grad_accum": v.train.grad_accum, "step_wall_s": round(cb.wall_s, 2),
            "train_tokens_per_s": rec.get("train_tokens_per_s"), "cpu_s": round(total / 1e6, 2),
            "groups": {k: round(val / total, 4) for k, val in sorted(groups.items(), key=lambda kv: -kv[1])},
            "top_ops": [{"op": e.key, "self_cpu_s": round(e.self_cpu_time_total / 1e6, 3), "calls": e.count,
                         "share": round(e.self_cpu_time_total / total, 4)} for e in top]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default="lora,full")
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps per variant; the last one is profiled")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "step_profile.json"))
    args = ap.parse_args()
    from bakeoff.config import load_params

    params = load_params(ROOT / "params.yaml")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.variants.split(","):
            rows.append(profile_variant(params, name, args.steps, Path(tmp)))
            print(f"{name}: {rows[-1]['train_tokens_per_s']} tok/s, step {rows[-1]['step_wall_s']} s", flush=True)
    names = [g for g, _ in GROUPS] + ["other"]
    print("\n## Where one training step's time goes (share of self CPU time)\n")
    print("| variant | precision | step s | CPU s | tok/s | " + " | ".join(names) + " |")
    print("|" + "---|" * (5 + len(names)))
    for r in rows:
        print(f"| {r['variant']} | {r['precision']} | {r['step_wall_s']} | {r['cpu_s']} | {r['train_tokens_per_s']} | "
              + " | ".join(f"{r['groups'].get(g, 0):.1%}" for g in names) + " |")
    for r in rows:
        print(f"\n### {r['variant']}: top ops by self CPU time\n\n| op | self s | calls | share |\n|---|---|---|---|")
        for o in r["top_ops"]:
            print(f"| `{o['op']}` | {o['self_cpu_s']} | {o['calls']} | {o['share']:.1%} |")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"steps": args.steps, "rows": rows}, indent=2))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()

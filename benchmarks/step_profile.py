"""Where a training step's time goes on this CPU: one step of each default technique, profiled inside the pipeline.

    python benchmarks/step_profile.py                       # lora and full, after `dvc repro data`
    python benchmarks/step_profile.py --variants lora,qlora --steps 4

Each variant of params.yaml trains a few steps through bakeoff's own loop (``bakeoff.train.trainer.train``: TRL's
trainer, the pipeline's dtypes, batching and optimizer) on the prepared training rows; a TrainerCallback wraps one
steady-state optimizer step (after ``--steps`` − 1 warm-up steps) in ``torch.profiler``. The ops' self CPU time is
grouped (matmul, attention, copies, elementwise, loss, optimizer, other) and the top ops listed; tokens/s is the
pipeline's own figure (``bakeoff.core.step_timing.StepLog``) for the same run. Writes reports/bench/step_profile.json.

    python benchmarks/step_profile.py --compare             # part of `make bench`: before/after the speed levers

``--compare`` trains each variant (lora and full) for ``--compare-steps`` optimizer steps twice in this one process,
alternately: with the settings bakeoff used before the levers (SDPA attention, the model's loss over every
position's logits, PEFT's adapter input casts, unfused AdamW) and with this platform's choice
(``bakeoff.train.kernels``). It reports the tokens/s ratio, the training losses of both runs step by step,
and the generated answers of one model on the test split under the evaluation's settings and under eager
attention. Targets (exit 1 when missed): tokens/s ratio ≥ 1.5 for each variant; the mean training loss over the
steps within 1% (the step-by-step figures are shown beside it). The answers under eager generation are shown, not
a target: evaluation keeps SDPA, so its outputs do not change with this work.
``--floor`` adds a third run per variant, the old settings with fused AdamW alone (the same update in exact
arithmetic, rounded differently), to show how far bf16 rounding alone moves the losses over the same steps.
Writes reports/bench/step_compare.json.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

GROUPS = [  # first match wins; op names as torch.profiler reports them (and CUDA kernels' names)
    (
        "attention",
        (
            r"scaled_dot_product|flash_attention|_efficient_attention|softmax_backward_data|aten::_softmax\b"
            r"|flash_fwd|flash_bwd|fmha|cutlass::.*[Aa]ttention|cudnn.*sdpa"
        ),
    ),
    ("loss", r"log_softmax|nll_loss|cross_entropy|logsumexp|_chunked_logprob|logprob"),
    ("matmul", r"aten::(mm|addmm|bmm|matmul|linear|baddbmm)\b|mkldnn|onednn|gemm|xmma|cublas|nvjet|sm90_|cutlass"),
    ("optimizer", r"adam|_foreach_|lerp|addcdiv|addcmul|clip_grad|aten::sqrt|zero_|multi_tensor_apply"),
    ("copies", r"aten::(copy_|_to_copy|to|contiguous|clone|empty_like|_copy_from)\b|[Mm]emcpy|[Mm]emset|copy_kernel"),
    (
        "elementwise",
        (
            r"aten::(mul|add|sub|div|neg|pow|rsqrt|silu|sigmoid|mean|sum|cat|where|exp|tanh|gelu|"
            r"masked_fill|fill_|add_|mul_|div_|silu_backward|threshold)|elementwise_kernel|reduce_kernel"
        ),
    ),
]


def group_of(op: str) -> str:
    for name, pattern in GROUPS:
        if re.search(pattern, op):
            return name
    return "other"


def profiled_step(at: int, cuda: bool = False):
    """A TrainerCallback that profiles optimizer step number ``at`` (0-based), all of it, forward to zero_grad;
    ``cuda``: the GPU's kernels too."""
    import torch
    from transformers import TrainerCallback

    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])

    class Profile(TrainerCallback):
        prof = None
        wall_s = None

        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == at:
                if cuda:
                    torch.cuda.synchronize()
                self.prof = torch.profiler.profile(activities=activities)
                self.prof.__enter__()
                self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if self.prof is not None and self.wall_s is None:
                if cuda:
                    torch.cuda.synchronize()
                self.wall_s = time.perf_counter() - self.t0
                self.prof.__exit__(None, None, None)

    return Profile()


def profile_variant(params, name: str, steps: int, work: Path) -> dict:
    from bakeoff.core.models import resolve_precision
    from bakeoff.data.examples import load_examples
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    v = params.variant(name)
    v = replace(
        v,
        train=replace(
            v.train, max_steps=steps, warmup_steps_excluded=steps - 1, eval_steps=0, checkpoint_steps=0, logging_steps=1
        ),
    )
    technique = get_technique(v.technique)
    rows = load_examples(ROOT / "data" / "prepared" / "train.jsonl")
    cb = profiled_step(steps - 1)
    precision = resolve_precision(v.train.precision)
    rec = train(
        Job(technique, v, ROOT / "models" / "base", work / name / "out", precision, work / name / "tmp"),
        rows,
        extra_callbacks=[cb],
    )
    got = step_summary(cb, top=12)
    return {
        "variant": name,
        "technique": v.technique,
        "precision": precision,
        "micro_batch": v.train.micro_batch,
        "grad_accum": v.train.grad_accum,
        "step_wall_s": round(cb.wall_s, 2),
        "train_tokens_per_s": rec.get("train_tokens_per_s"),
        "cpu_s": round(got["busy_s"], 2),
        "groups": got["groups"],
        "top_ops": [
            {"op": e["name"], "self_cpu_s": round(e["s"], 3), "calls": e["calls"], "share": e["share"]}
            for e in got["top"]
        ],
    }


def step_summary(cb, top: int = 10) -> dict:
    """Where ``profiled_step``'s step went: on a GPU its kernels' time (self device time), else its ops' self CPU
    time; the sum in seconds (``busy_s``), its share by group (``group_of``) and the ``top`` entries."""
    events = cb.prof.key_averages()
    gpu = any(getattr(e, "self_device_time_total", 0) for e in events)
    t = (lambda e: e.self_device_time_total) if gpu else (lambda e: e.self_cpu_time_total)
    total = sum(t(e) for e in events) or 1
    groups: dict[str, float] = {}
    for e in events:
        groups[group_of(e.key)] = groups.get(group_of(e.key), 0.0) + t(e)
    return {
        "on": "GPU kernels" if gpu else "CPU ops",
        "busy_s": total / 1e6,
        "groups": {k: round(x / total, 4) for k, x in sorted(groups.items(), key=lambda kv: -kv[1])},
        "top": [
            {"name": e.key, "s": t(e) / 1e6, "calls": e.count, "share": round(t(e) / total, 4)}
            for e in sorted(events, key=lambda e: -t(e))[:top]
        ],
    }


BEFORE = {"attention": "sdpa", "loss_logits": "all", "adapter_input_cast": True, "optimizer": "adamw_torch"}
RATIO_TARGET, LOSS_TOL = 1.5, 0.01


def timed_run(params, name: str, steps: int, work: Path, before: bool, choice: dict | None = None) -> dict:
    """``steps`` optimizer steps of ``name`` through the pipeline's loop, before or after the levers (or under
    ``choice``)."""
    from bakeoff.core.models import resolve_precision
    from bakeoff.data.examples import load_examples
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    v = params.variant(name)
    choice = choice or (dict(BEFORE) if before else None)
    t = replace(
        v.train,
        max_steps=steps,
        eval_steps=0,
        checkpoint_steps=0,
        logging_steps=1,
        **({"optimizer": choice["optimizer"]} if choice else {}),
    )
    v = replace(v, train=t)
    rows = load_examples(ROOT / "data" / "prepared" / "train.jsonl")
    side = "before" if before else "after" if choice is None else "floor"
    out = work / f"{name}-{side}"
    rec = train(
        Job(
            get_technique(v.technique),
            v,
            ROOT / "models" / "base",
            out / "model",
            resolve_precision(t.precision),
            out / "tmp",
            kernel_choice=choice,
        ),
        rows,
    )
    return {
        "side": side,
        "kernels": rec["kernels"],
        "train_tokens_per_s": rec["train_tokens_per_s"],
        "train_step_s_median": rec["train_step_s_median"],
        "losses": [h["loss"] for h in rec["history"]],
        "model": str(out / "model"),
    }


def answers(params, model_dir: str, attention: str) -> tuple[list[str], float]:
    """The trained model's greedy answers on the test split as the evaluate stage generates them, and the
    generation's tokens/s."""
    from bakeoff.core.models import load_for_eval, load_tokenizer, resolve_precision
    from bakeoff.data.examples import load_examples
    from bakeoff.evaluate.generation import Decoding, generate

    precision = resolve_precision(params.eval.dtype)
    is_adapter = (Path(model_dir) / "adapter_config.json").exists()
    model = (
        load_for_eval(ROOT / "models" / "base", model_dir if is_adapter else None, precision)
        if is_adapter
        else load_for_eval(model_dir, None, precision)
    )
    model.set_attn_implementation(attention)
    tok = load_tokenizer(ROOT / "models" / "base")
    test = load_examples(ROOT / "data" / "prepared" / "test.jsonl")
    decoding = Decoding(params.task.max_new_tokens, params.eval.batch_size)
    out, log = generate(model, tok, [e.messages for e in test], decoding)
    return out, log.generated_tokens / log.seconds


def compare(params, names: list[str], steps: int, floor: bool = False) -> int:
    import numpy as np

    rows, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            before = timed_run(params, name, steps, Path(tmp), before=True)
            print(f"{name} before: {before['train_tokens_per_s']} tok/s ({before['kernels']})", flush=True)
            after = timed_run(params, name, steps, Path(tmp), before=False)
            print(f"{name} after:  {after['train_tokens_per_s']} tok/s ({after['kernels']})", flush=True)
            ratio = after["train_tokens_per_s"] / before["train_tokens_per_s"]
            lb, la = np.array(before["losses"]), np.array(after["losses"])
            mean_diff = abs(la.mean() - lb.mean()) / lb.mean()
            step_diff = np.abs(la - lb) / lb
            row = {
                "variant": name,
                "before": before,
                "after": after,
                "ratio": round(ratio, 3),
                "mean_loss_before": round(float(lb.mean()), 5),
                "mean_loss_after": round(float(la.mean()), 5),
                "mean_loss_rel_diff": round(float(mean_diff), 5),
                "step_loss_rel_diff_median": round(float(np.median(step_diff)), 5),
                "step_loss_rel_diff_max": round(float(step_diff.max()), 5),
            }
            if name == names[0]:  # evaluation: the same trained model, the evaluation's attention against eager
                ref, ref_speed = answers(params, after["model"], "sdpa")
                eager, eager_speed = answers(params, after["model"], "eager")
                row.update(
                    eval_answers=len(ref),
                    eval_identical=sum(a == b for a, b in zip(ref, eager)),
                    eval_gen_tokens_per_s={"sdpa": round(ref_speed, 1), "eager": round(eager_speed, 1)},
                )
            if floor:  # before again with fused AdamW alone: the same update in exact arithmetic, other rounding
                fl = timed_run(
                    params, name, steps, Path(tmp), before=False, choice={**BEFORE, "optimizer": "adamw_torch_fused"}
                )
                lf = np.array(fl["losses"])
                row["floor_mean_loss_rel_diff"] = round(float(abs(lf.mean() - lb.mean()) / lb.mean()), 5)
                row["floor_step_loss_rel_diff_max"] = round(float((np.abs(lf - lb) / lb).max()), 5)
                print(
                    f"{name} floor (before + fused AdamW only): mean loss differs by "
                    f"{row['floor_mean_loss_rel_diff']:.2%} from before",
                    flush=True,
                )
            rows.append(row)
            if ratio < RATIO_TARGET:
                failed.append(f"{name}: tokens/s ratio {ratio:.2f} < {RATIO_TARGET}")
            if mean_diff > LOSS_TOL:
                failed.append(f"{name}: mean training loss differs by {mean_diff:.2%} > {LOSS_TOL:.0%}")
    print(f"\n## Training step before and after the speed levers ({steps} steps each, this machine, one process)\n")
    print(
        "| variant | before tok/s | after tok/s | ratio | mean loss before | after | Δ mean | Δ per step (median / "
        "max) "
        "| after: kernels |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['variant']} | {r['before']['train_tokens_per_s']:.0f} | {r['after']['train_tokens_per_s']:.0f} | "
            f"**{r['ratio']:.2f}×** | {r['mean_loss_before']:.4f} | {r['mean_loss_after']:.4f} | "
            f"{r['mean_loss_rel_diff']:.2%} | {r['step_loss_rel_diff_median']:.1%} / "
            f"{r['step_loss_rel_diff_max']:.1%}"
            f" | {r['after']['kernels']} |"
        )
    for r in rows:
        if "eval_answers" in r:
            print(
                f"\nevaluation ({r['variant']}, test split): eager attention gives {r['eval_identical']} of "
                f"{r['eval_answers']} answers identical to SDPA's; generation tok/s SDPA "
                f"{r['eval_gen_tokens_per_s']['sdpa']}, eager {r['eval_gen_tokens_per_s']['eager']}"
            )
    out = ROOT / "reports" / "bench" / "step_compare.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    for r in rows:
        for side in ("before", "after"):
            r[side].pop("model", None)
    out.write_text(
        json.dumps(
            {"steps": steps, "ratio_target": RATIO_TARGET, "loss_tolerance": LOSS_TOL, "rows": rows, "missed": failed},
            indent=2,
        )
    )
    print(f"\nwrote {out}")
    for f in failed:
        print("MISSED:", f)
    return 1 if failed else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--variants", default="lora,full")
    ap.add_argument("--steps", type=int, default=3, help="optimizer steps per variant; the last one is profiled")
    ap.add_argument("--compare", action="store_true", help="before/after the speed levers, with targets")
    ap.add_argument("--compare-steps", type=int, default=20)
    ap.add_argument(
        "--floor",
        action="store_true",
        help="with --compare: a third run per variant, the old settings "
        "with fused AdamW alone (exact same arithmetic), to show how far bf16 rounding alone moves the "
        "losses",
    )
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "step_profile.json"))
    args = ap.parse_args()
    from bakeoff.core.config import load_params

    params = load_params(ROOT / "params.yaml")
    if args.compare:
        sys.exit(compare(params, args.variants.split(","), args.compare_steps, args.floor))
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
        print(
            f"| {r['variant']} | {r['precision']} | {r['step_wall_s']} | {r['cpu_s']} | {r['train_tokens_per_s']} | "
            + " | ".join(f"{r['groups'].get(g, 0):.1%}" for g in names)
            + " |"
        )
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

"""The GPU check: every claim bakeoff makes about a CUDA GPU, measured in one run, one table, one JSON file.

    python benchmarks/gpu_check.py                  # one CUDA GPU (an H200: about 9 minutes); reports/bench/gpu.json
    python benchmarks/gpu_check.py --shape tiny     # CPU, tiny shapes, a few minutes: every part starts and runs

Installs nothing. Needs torch, transformers, peft, trl, bitsandbytes and bakeoff (``src/`` is put on the path); the
pipeline part needs the pipeline's stack too (mlflow, optuna, datasets, pandas, scipy; dvc and lm-eval when there),
and Unsloth's part unsloth and unsloth_zoo: a part whose libraries are missing is reported ``missing: <names>``.
Each row runs in its own process (clean CUDA peaks; Unsloth patches transformers when imported). The parts live
beside this file: ``gpu_step.py`` (one training step, a row), ``gpu_parts.py`` (env, 8b, unsloth, mfu, profile),
``gpu_pipeline.py`` (pipeline, oom) and ``gpu_record.py`` (targets, table, sizing's figures, merging and rescoring):

  env       compute capability, native bf16, what ``precision: auto`` picks, library versions
  pipeline  every stage of dvc.yaml in order (``dvc repro`` when dvc is installed, else the stage commands) on a
            random-weight Llama with the default model's real tokenizer (benchmarks/tokenizer/): variants full,
            lora, qlora, lora_lowmem, unsloth and dpo, 2 trials each; statuses, precision, attention, dtypes and
            Unsloth's patching evidence from the records
  oom       in the same pipeline, ``full_oom`` past its ``memory_budget_gb``: its trials and its run recorded
            ``oom``, the pipeline goes on
  8b        the memory claim (QLoRA at most 22 GiB, 10 GiB checkpointed) at Llama-3.1-8B's dimensions (random
            bf16 weights made on the GPU), 1 × 1024 tokens, the pipeline's own training step
            (``bakeoff.train.trainer.train``): QLoRA without and with checkpointing, LoRA, full fine-tuning where
            it fits; peak reserved + CUDA context beside
            ``bakeoff.decide.sizing``'s prediction
  unsloth   Unsloth's LoRA against PEFT's, same seed and batches, at the 1B shape: loss after N steps, tokens/s, peak
  mfu       full fine-tuning and LoRA at Llama-3.2-1B's dimensions, 4 × 1024 tokens, the pipeline's step: MFU
            (``bakeoff.core.flops.mfu``) against the card's dense bf16 peak from params.yaml's sizing.gpus
  profile   where that step's time goes: full fine-tuning and LoRA, one step each under torch.profiler, the GPU's
            busy share of the step and its kernels by group (not in the default --parts: asked for by name)

On CPU (``--shape tiny``) every shape is a 2-layer model and every length 64 tokens; CUDA-only figures are None.

Targets, each printed as met or MISSED; the script exits 1 on any miss (``--target name=value`` replaces one):
every part ran (``parts_failed`` ≤ 0) and every pipeline status is ``ok`` (``full_oom``: ``oom``; on CPU Unsloth
``skipped``); on CUDA also QLoRA at 8B ≤ 22 GiB, ≤ 10 GiB with checkpointing; QLoRA ≤ 0.6× LoRA's peak at 8B and
1B; every CUDA peak within 10% of the sizing model; MFU of full fine-tuning ≥ 35% and of LoRA ≥ 25% at 1B; Unsloth
ran. The tiny shape checks the first two (and, with a replaced target, that a miss exits 1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from gpu_parts import part_env, part_mfu, part_profile, part_steps, part_unsloth
from gpu_pipeline import part_pipeline
from gpu_record import check_targets, git_head, merged, rescore, rescored_from, sizing_figures, table
from gpu_step import ROOT, cuda
from targets import Targets
from targets import add_argument as add_target_argument

LIMIT_S = 9 * 60


def arguments() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("real", "tiny"), default="real")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "gpu.json"))
    ap.add_argument("--parts", default="env,pipeline,8b,unsloth,mfu")
    ap.add_argument(
        "--limit-s",
        type=float,
        default=LIMIT_S,
        help="stop starting parts after this many seconds (one device call: a part past it is 'not run')",
    )
    ap.add_argument(
        "--runner",
        choices=("auto", "dvc", "commands"),
        default="auto",
        help="the pipeline part: dvc repro, the stage commands in dvc.yaml's order, or dvc where installed",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="the pipeline's stage commands: how many of one level of "
        "dvc.yaml's graph run at once (a device call too short for them one by one); with --shape tiny "
        "also how many rows of 8b, mfu and profile",
    )
    ap.add_argument("--resume", help="a gpu.json from an earlier call: its parts are kept, those in --parts rerun")
    ap.add_argument(
        "--rescore",
        nargs="+",
        metavar="GPU_JSON",
        help="no GPU needed: these records merged (a later one's parts over an earlier one's, except a "
        "part it did not run), every CUDA row predicted again by today's memory model, the table "
        "and targets again",
    )
    ap.add_argument(
        "--commit",
        default=os.environ.get("BAKEOFF_COMMIT"),
        help="the commit the check ran at (a device's copy of the tree has no git; default: git's HEAD)",
    )
    add_target_argument(ap)
    return ap


def main() -> None:
    args = arguments().parse_args()
    if args.rescore:
        records = [json.loads(Path(p).read_text()) for p in args.rescore]
        res = merged(records)
        res["rescored"] = {"from": rescored_from(args.rescore, records), "at": time.strftime("%Y-%m-%d %H:%M:%S")}
        if args.commit:
            res["commit"] = args.commit
        return finish(rescore(res), Path(args.out), args.target, res.get("shape") == "tiny")
    tiny = args.shape == "tiny"
    if not tiny and not cuda():
        sys.exit("gpu_check: no CUDA GPU here; run with --shape tiny to check that the script starts on CPU")
    # LIMIT_S fits one device call; the tiny shape on a 2-core CPU only proves the script starts, and such a CPU can
    # run 1.4-1.9x slower from one hour to the next (measured): it gets twice the time, inside its test's 1,200 s
    deadline = time.time() + (2 * args.limit_s if tiny else args.limit_s)
    res: dict = {
        "shape": args.shape,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "commit": args.commit or git_head(),
    }
    kept = json.loads(Path(args.resume).read_text()) if args.resume else {}
    if kept:  # one GPU run in two device calls: the first call's parts, then this call's
        res = {**merged([kept]), "resumed": {"from": kept.get("started"), "rerun": args.parts}, "commit": res["commit"]}
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    parts = args.parts.split(",")
    seq = 64 if tiny else 1024
    row_jobs = args.jobs if tiny else 1  # on a GPU each row's peak is its own: one row at a time
    plan = {
        "env": lambda: part_env(),
        "pipeline": lambda: part_pipeline(work, "tiny" if tiny else "pipeline", deadline, args.runner, args.jobs),
        "8b": lambda: part_steps(work, "tiny" if tiny else "8b", seq, deadline, jobs=row_jobs),
        "unsloth": lambda: part_unsloth(work, "tiny" if tiny else "1b", seq, deadline),
        "mfu": lambda: part_mfu(work, "tiny" if tiny else "1b", seq, deadline, jobs=row_jobs),
        "profile": lambda: part_profile(work, "tiny" if tiny else "1b", seq, deadline, jobs=row_jobs),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for part in parts:
        if time.time() > deadline:
            if part not in kept:  # a resumed call keeps the earlier call's figures of a part it cannot run
                res[part] = {"status": f"not run: the {args.limit_s:.0f}-s limit was reached"}
            continue
        t0 = time.perf_counter()
        try:
            res[part] = plan[part]()
        except Exception as e:  # one part's failure is its row, the others still run
            res[part] = {"status": f"failed: {type(e).__name__}: {e}"[:400]}
        res[part]["part_s"] = round(time.perf_counter() - t0, 1)
        print(f"[gpu_check] {part}: {res[part].get('status')} ({res[part]['part_s']} s)", flush=True)
        out.write_text(json.dumps(res, indent=2, default=str))  # each part kept as it ends: a call cut short keeps it
    shutil.rmtree(work, ignore_errors=True)
    finish(res, out, args.target, tiny)


def finish(res: dict, out: Path, target_args, tiny: bool) -> None:
    """The table, sizing's figures, the targets; gpu.json written; exits 1 on a missed target."""
    res["sizing"] = sizing_figures(res)
    text = table(res)
    got = res["sizing"]
    if got["mfu"]:  # sizing's time estimates read sizing.mfu: this card's measured figures instead of assumed ones
        text += (
            "\nfor sizing on this card: dvc exp run "
            + " ".join(f"-S sizing.mfu.{t}={v}" for t, v in got["mfu"].items())
            + (f" -S sizing.cuda_overhead_gb={got['cuda_overhead_gb']}" if "cuda_overhead_gb" in got else "")
            + "   (utilisation as sizing's time estimate divides by it: HFU, recompute counted)"
        )
    print(text)
    targets = Targets.from_args(target_args)
    check_targets(res, targets, tiny)
    res["table"] = text.splitlines()
    res["targets"] = targets.results
    out.write_text(json.dumps(res, indent=2, default=str))
    print(f"[gpu_check] {out}")
    targets.exit()


if __name__ == "__main__":
    main()

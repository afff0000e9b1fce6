"""The GPU check's parts other than the pipeline (``benchmarks/gpu_check.py``): the environment, the 8B memory rows,
Unsloth against PEFT, MFU at 1B and where a step's time goes. Each part's rows are ``gpu_step`` processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpu_step import ROOT, cuda, make_model, missing, sub_step


def part_env() -> dict:
    import importlib.metadata as md

    import torch

    from bakeoff.core.models import cuda_bf16_native, resolve_precision

    versions = {}
    for name in (
        "torch",
        "transformers",
        "peft",
        "trl",
        "accelerate",
        "bitsandbytes",
        "unsloth",
        "unsloth_zoo",
        "mlflow",
        "optuna",
        "dvc",
        "lm_eval",
    ):
        for dist in (name.replace("_", "-"), *(["mlflow-skinny"] if name == "mlflow" else [])):
            try:
                versions[name] = md.version(dist)
                break
            except md.PackageNotFoundError:
                versions[name] = None
    env = {
        "status": "ok",
        "cuda": cuda(),
        "versions": versions,
        "precision_auto": resolve_precision("auto"),
        "process_start_s": process_start(),
    }
    if cuda():
        env.update(
            device=torch.cuda.get_device_name(),
            capability=".".join(map(str, torch.cuda.get_device_capability())),
            bf16_native=cuda_bf16_native(),
            bf16_reported=torch.cuda.is_bf16_supported(),
            memory_gb=round(torch.cuda.get_device_properties(0).total_memory / 1e9, 1),
        )
    return env


def process_start() -> float:
    """Seconds a new process takes to import the training stack (bakeoff's trainer, with torch, transformers, peft,
    trl and bitsandbytes; mlflow and optuna where installed) and touch the GPU: what every stage and training step of
    this check pays before it computes."""
    code = (
        "import importlib.util, torch; import bakeoff.train.trainer\n"
        "for m in ('mlflow', 'optuna'):\n    importlib.util.find_spec(m) and __import__(m)\n"
        "torch.cuda.is_available() and torch.zeros(1, device='cuda')"
    )
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=300, check=False)
    return round(time.perf_counter() - t0, 1)


EIGHT_B = [  # (row name, technique, extra TrainConfig fields)
    ("qlora", "qlora", {"gradient_checkpointing": False}),
    ("qlora + checkpointing", "qlora", {"gradient_checkpointing": True}),
    ("lora", "lora", {}),
    ("full", "full", {}),
]


def side_by_side(rows_: dict, jobs: int) -> dict:
    """Each row's result, ``jobs`` rows at a time: 1 on CUDA (each peak its own); on CPU the tiny shape's rows only
    prove they start and run (their speeds are then not figures), so ``--jobs`` runs them together as it does the
    pipeline's stages."""
    if jobs <= 1:
        return {name: run() for name, run in rows_.items()}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {name: pool.submit(run) for name, run in rows_.items()}
        return {name: f.result() for name, f in futures.items()}


def part_steps(work: Path, shape: str, seq: int, deadline: float, batch: int = 1, jobs: int = 1) -> dict:
    """The 8B rows: each technique's step in its own process, where it fits."""
    gone = missing("trl", "peft", "bitsandbytes")
    if gone:
        return {"status": f"missing: {', '.join(gone)}"}
    model = make_model(shape, work / f"{shape}-model")
    rows_ = side_by_side(
        {
            name: lambda t=technique, x=extra, n=name: sub_step(
                model, t, "hf", x, batch, seq, 3, work / n, deadline - time.time()
            )
            for name, technique, extra in EIGHT_B
        },
        jobs,
    )
    shutil.rmtree(model, ignore_errors=True)
    return {"status": "ok", "shape": shape, "seq": seq, "rows": rows_}


def part_unsloth(work: Path, shape: str, seq: int, deadline: float, steps: int = 10) -> dict:
    gone = missing("unsloth", "unsloth_zoo", "trl", "peft")
    if gone:
        return {"status": f"missing: {', '.join(gone)}"}
    if not cuda():
        return {"status": "skipped: no CUDA GPU (Unsloth's kernels need one)"}
    model = make_model(shape, work / f"{shape}-unsloth")
    got = {
        b: sub_step(model, "lora", b, {}, 1, seq, steps, work / f"unsloth-{b}", (deadline - time.time()) / 2)
        for b in ("unsloth", "hf")
    }
    shutil.rmtree(model, ignore_errors=True)
    return {"status": "ok", "steps": steps, "rows": got}


def part_mfu(work: Path, shape: str, seq: int, deadline: float, batch: int = 4, jobs: int = 1) -> dict:
    from bakeoff.core.config import load_params
    from bakeoff.core.flops import mfu

    model = make_model(shape, work / f"{shape}-mfu")
    peak = None
    if cuda():
        import torch

        name = torch.cuda.get_device_name().lower()
        gpus = load_params(ROOT / "params.yaml").sizing.gpus
        peak = next(
            (
                g["bf16_tflops"] * 1e12
                for g in sorted(gpus, key=lambda g: -len(g["name"]))
                if g["name"].lower().split("-")[0] in name
            ),
            None,
        )
    techniques = {
        "full": ("full", {}),
        "lora": ("lora", {}),
        "qlora": ("qlora", {}),
        "lora, all logits": ("lora", {"loss_logits": "all"}),
    }
    got = side_by_side(
        {
            name: lambda n=name, t=t, x=x: sub_step(
                model, t, "hf", x, batch, seq, 8, work / f"mfu-{n}", (deadline - time.time()) / 3
            )
            for name, (t, x) in techniques.items()
        },
        jobs,
    )
    for name, r in got.items():
        if peak and r.get("tokens_per_s"):
            r["mfu"] = round(mfu(r["tokens_per_s"], r["flop_params"], techniques[name][0], peak), 3)
    shutil.rmtree(model, ignore_errors=True)
    return {"status": "ok", "peak_tflops": peak and peak / 1e12, "rows": got}


def part_profile(work: Path, shape: str, seq: int, deadline: float, batch: int = 4, jobs: int = 1) -> dict:
    """Where the 1B step's time goes (the MFU rows' shape and batch): full fine-tuning and LoRA, one steady-state
    step each under torch.profiler; its tokens/s are not figures (the profiler slows the step it watches)."""
    model = make_model(shape, work / f"{shape}-profile")
    got = side_by_side(
        {
            name: lambda n=name: sub_step(
                model, n, "hf", {"profile": True}, batch, seq, 4, work / f"profile-{n}", (deadline - time.time()) / 2
            )
            for name in ("full", "lora")
        },
        jobs,
    )
    shutil.rmtree(model, ignore_errors=True)
    return {
        "status": "ok",
        "rows": {
            k: {"status": r.get("status"), "error": r.get("error"), **(r.get("profile") or {})} for k, r in got.items()
        },
    }

"""The GPU check's pipeline part (``benchmarks/gpu_check.py``): every stage of dvc.yaml on a random-weight model in a
fresh project, by ``dvc repro`` or by each stage's own command (a machine without dvc, such as the lent GPU's image),
and what each run's records say."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpu_step import ROOT, make_model, missing

PIPELINE_VARIANTS = {
    "full": {"technique": "full", "lr": 1.0e-4},
    "lora": {"technique": "lora"},
    "qlora": {"technique": "qlora"},
    "lora_lowmem": {"technique": "lora", "gradient_checkpointing": True, "micro_batch": 2, "optimizer": "adamw_8bit"},
    "unsloth": {"technique": "lora", "backend": "unsloth"},
    "full_oom": {"technique": "full", "memory_budget_gb": 0.01},  # part oom: past its budget from the first step
}


def part_pipeline(work: Path, shape: str, deadline: float, runner: str = "auto", jobs: int = 1) -> dict:
    """Every stage of dvc.yaml on a random-weight model in a fresh project; what each record says. ``runner``:
    ``dvc`` (``dvc repro``), ``commands`` (each stage's command in dvc.yaml's order: a machine without dvc, such as
    the lent GPU's image) or ``auto`` (dvc where installed). ``jobs``: with ``commands``, how many stages of one level
    of the graph run at once (their speeds are then not figures; their statuses, dtypes and peaks still are: each
    process measures its own)."""
    gone = missing("mlflow", "optuna", "datasets", "pandas", "scipy", "trl", "bitsandbytes")
    if gone:
        return {"status": f"missing: {', '.join(gone)}"}
    repo = work / "project"
    params = project(repo, make_model(shape, work / "pipeline-model"), tiny=shape == "tiny")
    py = sys.executable  # this interpreter runs every stage: a machine may have python3 and no plain python
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "PATH": f"{Path(py).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    t0 = time.perf_counter()
    if runner == "dvc" or (runner == "auto" and shutil.which("dvc") and not missing("dvc")):
        how = "dvc repro"
        levels = [["git init -q && git config user.email c@c && git config user.name c && dvc init -q"], ["dvc repro"]]
    else:
        how = "stage commands" + (f", {jobs} at a time" if jobs > 1 else "")
        levels = stage_levels(params, py, jobs)
    log, rc, status = run_levels(levels, repo, env, jobs, deadline)
    # the records of every stage that ran, a run cut short by the time limit included
    out = {
        "status": status or ("ok" if rc == 0 else f"exit {rc}"),
        "how": how,
        "wall_s": round(time.perf_counter() - t0, 1),
        "stages": len(log),
        "of": sum(map(len, levels)),
        "ran": log,
        "runs": {name: what_ran(repo / "runs" / name) for name in [*PIPELINE_VARIANTS, "dpo"]},
    }
    if rc:  # the stage that stopped it, its command and the end of its output
        out["failed"] = next(d for d in log if d["rc"])
        print(f"[gpu_check] pipeline stopped at: {out['failed']['cmd']}\n{out['failed']['tail']}", flush=True)
    return out


def project(repo: Path, model: Path, tiny: bool = False) -> dict:
    """A fresh project at ``repo``: this one's dvc.yaml and stages, the first rows of the shipped tasks, the model at
    ``model``, small searches of 2 trials, one share of the curve; its params. ``tiny`` (a CPU proving the part starts
    and runs): 1 trial each and no lm-eval probe, which test_pipeline and test_tune run on CPU already; on a GPU they
    are what is checked there."""
    import yaml

    repo.mkdir(parents=True)
    for item in ("dvc.yaml", "stages"):
        (shutil.copytree if (ROOT / item).is_dir() else shutil.copy)(ROOT / item, repo / item)
    (repo / "data" / "raw").mkdir(parents=True)
    for name, n in (("tickets.jsonl", 96), ("prefs.jsonl", 64)):  # 64 pairs: 16 val, 16 test, 32 to train
        lines = (ROOT / "data" / "raw" / name).read_text().splitlines(keepends=True)[:n]
        (repo / "data" / "raw" / name).write_text("".join(lines))
    shutil.copytree(ROOT / "data" / "probe", repo / "data" / "probe")
    (repo / "src").symlink_to(ROOT / "src")
    (repo / "reports" / "curve").mkdir(parents=True)  # compare reads the data-value curve's points there
    (repo / "reports" / "curve" / ".gitkeep").touch()
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["model"]["base"] = str(model)
    params["task"].update(val_size=16, test_size=16, max_new_tokens=16)
    params["train_defaults"].update(
        max_steps=6, eval_steps=2, effective_batch=4, micro_batch=4, logging_steps=1, warmup_steps_excluded=1
    )
    lm_eval = not missing("lm_eval") and not tiny
    params["eval"].update(
        latency_requests=2,
        bootstrap_resamples=200,
        probe=lm_eval,
        probe_limit=20,
        lm_eval="reuse" if lm_eval else "off",
        lm_eval_tasks=[],
    )
    params["baselines"] = {"zero_shot": {"shots": 0}}
    params["variants"] = PIPELINE_VARIANTS
    params["derived"] = {"dpo": {"technique": "dpo", "init_from": "lora", "lr": 5.0e-5, "max_steps": 4}}
    params["tune"].update(trials=1 if tiny else 2, trial_steps=0.5)
    params["tune"]["share"] = {"unsloth": "lora"}  # every other arm searches on its own
    params["curve"].update(fractions=[0.5], resamples=200)  # the data-value curve: one share of each arm
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return params


def stage_levels(params: dict, py: str, jobs: int) -> list[list[str]]:
    """Each stage's own command, in levels of dvc.yaml's graph: a level's stages need only earlier levels."""
    names, shared = list(params["baselines"]), set(params["tune"]["share"])
    own = [v for v in PIPELINE_VARIANTS if v not in shared]
    run = lambda stage, *names_: [f"{py} stages/{stage}.py {n}" for n in names_]
    # stages run together must not race to create the MLflow and Optuna databases (SQLite files): made first
    prime = (
        "from bakeoff.core import runs, tracking; from bakeoff.core.config import load_params; "
        "from bakeoff.search.study import storage_of, storage_url; p = load_params(); tracking._setup(p); "
        "storage_of(storage_url(p, runs.work_dir('prime.tune')))"
    )
    return [
        [f"{py} stages/model.py models/base"],
        [f"{py} stages/data.py models/base data/prepared"],
        *([[f'{py} -c "{prime}"']] if jobs > 1 else []),
        run("tune", *names, *own),
        run("baseline", *names) + run("tune", *shared) + run("train", *own),
        run("tune", "dpo") + run("train", *shared) + run("evaluate", *own),  # the longest first
        run("evaluate", *shared) + run("train", "dpo"),
        run("evaluate", "dpo"),
        # the export and the curve's points read the runs, not each other
        run("curve", *[f"{a} 0.5" for a in params["curve"]["arms"]]) + [f"{py} stages/export.py exports"],
        [f"{py} stages/compare.py reports"],
    ]


def run_levels(levels: list[list[str]], repo: Path, env: dict, jobs: int, deadline: float) -> tuple:
    """Each level's commands in ``repo``, ``jobs`` at a time, until a level has one that fails: what each did, the
    first failure's exit code and ``timeout`` where it was cut short."""
    py = sys.executable

    def one(cmd: str) -> dict:
        t1 = time.perf_counter()
        try:
            r = subprocess.run(
                cmd,
                shell=True,
                cwd=repo,
                env=env,
                capture_output=True,
                text=True,
                timeout=max(10, deadline - time.time()),
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"cmd": cmd.replace(py, "python"), "rc": None, "s": round(time.perf_counter() - t1, 1)}
        got = {"cmd": cmd.replace(py, "python"), "rc": r.returncode, "s": round(time.perf_counter() - t1, 1)}
        if r.returncode:
            got["tail"] = (r.stdout + r.stderr)[-3000:]
        return got

    log: list[dict] = []
    for level in levels:
        if jobs > 1:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                done = list(pool.map(one, level))
        else:  # one at a time: stop at the first that fails
            done = []
            for cmd in level:
                done.append(one(cmd))
                if done[-1]["rc"] != 0:
                    break
        log += done
        bad = [d for d in done if d["rc"] != 0]
        if bad:
            return log, bad[0]["rc"] or 0, "timeout" if bad[0]["rc"] is None else None
    return log, 0, None


def what_ran(run: Path) -> dict:
    """What one arm's records say: its statuses, its search's trials, precision, attention, dtypes, peak, quality."""
    train, ev, tuned = (
        json.loads(p.read_text()) if (p := run / f).exists() else {} for f in ("train.json", "eval.json", "tuned.json")
    )
    m = train.get("metrics") or {}
    return {
        "train": train.get("status"),
        "eval": ev.get("status"),
        "error": (train.get("error") or ev.get("error") or "").split("\n")[0][:200],
        "trials": [t.get("state") for t in tuned.get("trials", [])],
        "search": tuned.get("skipped") or tuned.get("values"),
        "precision": m.get("precision"),
        "attention": (train.get("kernel_choice") or {}).get("attention"),
        "dtypes": m.get("dtypes"),
        "evidence": m.get("backend_evidence"),
        "peak_reserved_mb": m.get("train_peak_reserved_mb"),
        "quality": (ev.get("metrics") or {}).get("quality"),
    }

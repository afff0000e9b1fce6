"""Several training processes: the launcher (torchrun on CPU, accelerate launch on GPUs) that starts them, and every
rank's failure made the arm's recorded status."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from bakeoff.train.trainer import rank

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def launch_command(script: str, name: str, t) -> list[str]:
    """The command that runs ``script name`` as ``t.processes`` processes: accelerate launch on GPUs (with
    ``accelerate_config`` for FSDP or DeepSpeed), torchrun on CPU (accelerate cannot start CPU processes here)."""
    if torch.cuda.is_available():
        cmd = ["accelerate", "launch", "--num_processes", str(t.processes)]
        if t.accelerate_config:
            cmd += ["--config_file", t.accelerate_config]
        return cmd + [script, name]
    return ["torchrun", "--standalone", "--nproc_per_node", str(t.processes), script, name]


def launch(script: str, name: str, params: Params, v) -> None:
    """Run this stage as ``v.train.processes`` processes. When any of them fails (a rank that raised, ran out of
    memory or was killed), the arm's record says so, and so does its MLflow run: the stage itself succeeds, so
    ``dvc repro`` goes on with the other arms."""
    from bakeoff.core import runs

    record_path = runs.train_record(name)
    for old in rank_failure_path(name, 0).parent.glob("rank-*.json"):
        old.unlink()
    record_path.unlink(missing_ok=True)  # what rank 0 writes now is this launch's, nothing older
    t0 = time.time()
    cmd = launch_command(script, name, v.train)
    print("launch:", " ".join(cmd), flush=True)
    rc = subprocess.run(cmd, check=False).returncode
    if rc != 0:
        record_failed_launch(params, name, v, rc, t0)


def rank_failure_path(name: str, r: int) -> Path:
    """Where rank ``r`` of a multi-process run writes its failure: beside the run's scratch folder, which rank 0
    empties when it starts."""
    from bakeoff.core import runs

    return runs.work_dir(f"{name}.ranks") / f"rank-{r}.json"


def record_failed_launch(params: Params, name: str, v, rc: int, t0: float) -> dict:
    """The arm's record after a multi-process run that exited ``rc`` != 0: rank 0's own record when it wrote one
    (its status turned to the failure of the others), else a new one; every failed rank's status and reason, from
    the files the ranks wrote (``rank_failure_path``), or the launcher's exit code when none could write."""
    from bakeoff.core import runs, tracking

    failures = [runs.read_json(f) for f in sorted(rank_failure_path(name, 0).parent.glob("rank-*.json"))]
    said = (
        "; ".join(f"rank {f['rank']} {f['status']}: {f['error'].splitlines()[0]}" for f in failures)
        or f"the {v.train.processes}-process launch exited with code {rc} before a rank could say why"
    )
    own = runs.read_json(runs.train_record(name))  # rank 0's, written by this launch (launch() removed older ones)
    if own and own.get("status") != "ok":  # rank 0 failed too: its reason first, the other ranks' after it
        status, error = own["status"], f"{own.get('error', '')}\n{said}".strip()
    else:
        status, error = (failures[0]["status"] if failures else "failed"), said
    record = own or {
        "name": name,
        "kind": "variant",
        "technique": v.technique,
        "backend": v.backend,
        "parent": v.parent,
    }
    record.update(status=status, error=error, metrics={}, ranks_failed=failures)
    out = runs.fresh_dir(runs.variant_dir(name))
    (out / "NOT_TRAINED").write_text(f"{status}: {error}\n")
    state = runs.work_dir(name) / "resume.json"  # rank 0 writes its MLflow run there once it opened it
    run_id = (runs.read_json(state) or {}).get("run_id") if state.exists() and state.stat().st_mtime >= t0 else None
    run_id = run_id or tracking.opened_since(params, name, t0)  # rank 0 stopped after opening its run, before saying so
    with tracking.resume(params, run_id, tracking.RunTags(name, "variant", v.technique), {}) as run:
        record["run_id"] = run.info.run_id
        tracking.mark(record)
    runs.stamp_device(record)
    runs.write_json(runs.train_record(name), record)
    print(f"[{name}] {status}: {error.splitlines()[0]}", flush=True)
    return record


def guard_rank(name: str, work) -> None:
    """Run ``work()`` on a rank other than 0; a failure is written where the launcher reads it, then raised, so
    torchrun or accelerate stops the other ranks."""
    from bakeoff.core import runs

    try:
        work()
    except Exception as e:
        status, reason = runs.classify(e)
        runs.write_json(rank_failure_path(name, rank()), {"rank": rank(), "status": status, "error": reason})
        raise

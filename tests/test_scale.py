"""Runs that survive: a training killed mid-run resumes under `dvc repro`, and 2 CPU processes (torchrun, gloo)
train like 1. On a tiny model with the real tokenizer, in a fresh DVC repository."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import faults
import pytest
import yaml
from conftest import make_dvc_repo

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def env(**extra) -> dict:
    e = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", **extra}
    e.pop("MLFLOW_TRACKING_URI", None)
    return e


def sh(cmd: str, cwd: Path, ok: bool = True, **extra) -> str:
    r = subprocess.run(cmd, shell=True, cwd=cwd, env=env(**extra), capture_output=True, text=True, check=False)
    if ok:
        assert r.returncode == 0, f"{cmd} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout + r.stderr


LORA = {"technique": "lora", "r": 4, "alpha": 8, "precision": "fp32"}


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_model_dir):
    repo = tmp_path_factory.mktemp("scale")
    params = make_dvc_repo(repo, tiny_model_dir, rows=80)
    params["train_defaults"].update(
        max_steps=30, effective_batch=8, micro_batch=2, logging_steps=1, warmup_steps_excluded=1
    )
    params["baselines"] = {"zero_shot": {"shots": 0}}
    params["variants"] = {
        "lora": {**LORA, "checkpoint_steps": 3},  # killed and resumed
        "lora_ref": {**LORA, "checkpoint_steps": 3},  # the same, uninterrupted
        "one_proc": {**LORA, "max_steps": 6},
        "two_proc": {**LORA, "max_steps": 6, "processes": 2},
        "two_proc_fault": {**LORA, "max_steps": 6, "processes": 2, "seed": 1},  # its rank 1 raises (below)
    }
    params["derived"] = {}
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sh("git init -q && git config user.email t@t && git config user.name t && dvc init -q", repo)
    sh("git add -A && git commit -qm init", repo)
    sh("dvc repro data", repo)
    return repo


def _train_processes(pid: int):
    import psutil

    return [
        p
        for p in psutil.Process(pid).children(recursive=True)
        if any("stages/train.py" in part for part in p.cmdline())
    ]


def test_killed_training_resumes_from_its_checkpoint(repo):
    from safetensors.torch import load_file

    proc = subprocess.Popen(
        "dvc repro train@lora",
        shell=True,
        cwd=repo,
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    work = repo / ".bakeoff_tmp" / "lora"
    deadline = time.time() + 300
    while not list(work.glob("checkpoint-*/trainer_state.json")):
        assert proc.poll() is None, "training finished before it could be killed:\n" + proc.stdout.read()[-2000:]
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.02)
    for p in _train_processes(proc.pid):
        p.send_signal(signal.SIGKILL)  # as the OOM killer or a preempted machine would
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode != 0, out[-2000:]
    assert not (repo / "runs" / "lora" / "train.json").exists()
    killed_at = max(int(p.name.split("-")[1]) for p in work.glob("checkpoint-*"))
    assert killed_at < 30

    again = sh("dvc repro train@lora", repo)
    assert "resuming from" in again
    rec = json.loads((repo / "runs" / "lora" / "train.json").read_text())
    assert rec["status"] == "ok" and rec["metrics"]["resumed_from_step"] >= 3 and rec["metrics"]["train_steps"] < 30
    assert not work.exists()  # checkpoints removed once the run finished

    sh("dvc repro train@lora_ref", repo)
    a = load_file(repo / "models" / "variants" / "lora" / "adapter_model.safetensors")
    b = load_file(repo / "models" / "variants" / "lora_ref" / "adapter_model.safetensors")
    for k in a:
        assert (a[k] - b[k]).abs().max() < 1e-4, k  # the resumed run ends where the uninterrupted one does

    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{repo / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["tickets"], filter_string="tags.`bakeoff.name` = 'lora'")
    assert len(runs) == 1  # the resume continued the killed run
    assert runs.iloc[0]["run_id"] == rec["run_id"]
    assert runs.iloc[0]["tags.bakeoff.resumed_from"].startswith("checkpoint-")


def test_two_cpu_processes_train_like_one(repo):
    out = sh("dvc repro train@one_proc train@two_proc", repo)
    assert "torchrun --standalone --nproc_per_node 2" in out
    one = json.loads((repo / "runs" / "one_proc" / "train.json").read_text())
    two = json.loads((repo / "runs" / "two_proc" / "train.json").read_text())
    assert one["status"] == "ok" and two["status"] == "ok", two.get("error")
    m1, m2 = one["metrics"], two["metrics"]
    assert m2["processes"] == 2 and len(m2["train_peak_rss_mb_per_process"]) == 2
    assert m2["effective_batch"] == m1["effective_batch"] == 8 and m2["grad_accum"] == 2 and m1["grad_accum"] == 4
    assert m2["tokens_seen"] == m1["tokens_seen"]  # the same rows, split across the processes
    l1 = [h["loss"] for h in one["history"]]
    l2 = [h["loss"] for h in two["history"]]
    assert len(l1) == len(l2) == 6
    for a, b in zip(l1, l2):
        assert abs(a - b) <= 0.02 * abs(a), (l1, l2)
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{repo / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["tickets"], filter_string="tags.`bakeoff.name` = 'two_proc'")
    assert len(runs) == 1 and runs.iloc[0]["metrics.train_tokens_per_s"] > 0


def test_a_failing_rank_of_a_two_process_run_is_the_arms_recorded_status(repo, tmp_path):
    """Rank 1 of 2 raises: `dvc repro` exits 0, the arm's train and eval records say `failed` with rank 1's reason,
    its model folder says it was not trained, and its one MLflow run is tagged with the status."""
    fault = faults.env(tmp_path, [("bakeoff.train.trainer", "train", "stages/train.py", 1)])
    out = sh("dvc repro evaluate@two_proc_fault", repo, **fault)
    assert "torchrun --standalone --nproc_per_node 2" in out
    rec = json.loads((repo / "runs" / "two_proc_fault" / "train.json").read_text())
    assert rec["status"] == "failed", rec
    assert "rank 1 failed: RuntimeError: planted fault in bakeoff.train.trainer.train" in rec["error"], rec["error"]
    assert [f["rank"] for f in rec["ranks_failed"]] == [1]
    assert (repo / "models" / "variants" / "two_proc_fault" / "NOT_TRAINED").read_text().startswith("failed: ")
    ev = json.loads((repo / "runs" / "two_proc_fault" / "eval.json").read_text())
    assert ev["status"] == "failed" and "planted fault in bakeoff.train.trainer.train" in ev["error"], ev
    import mlflow

    mlflow.set_tracking_uri(f"sqlite:///{repo / 'mlflow.db'}")
    runs = mlflow.search_runs(experiment_names=["tickets"], filter_string="tags.`bakeoff.name` = 'two_proc_fault'")
    assert len(runs) == 1 and runs.iloc[0]["tags.status"] == "failed", runs.T
    assert runs.iloc[0]["run_id"] == rec["run_id"] == ev["run_id"]

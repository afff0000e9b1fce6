"""One bake-off on several machines, on real servers this file starts on 127.0.0.1 and stops: PostgreSQL (the shared
studies and locks), an MLflow server, a DVC remote folder. Clones of one project stand for the machines.

- locks: a second holder waits and is told who holds it; a killed holder's lock is free at once;
- a shared study: two workers, `tune.trials: 4`, exactly 4 trials and no point drawn twice, the same choice on
  both; a worker draws nothing while another holds the study's lock; a worker killed mid-trial leaves that trial
  failed, uncounted, and its place drawn again;
- the split: two machines run a small bake-off's arms (both starting at once), a third pulls and runs what is
  left: it trains nothing, its report is a single machine's except for timings, and MLflow holds each arm once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from services import MlflowServer, Postgres

ROOT = Path(__file__).resolve().parents[1]


# the database's password: every client here reads it from PGPASSWORD, as libpq does; the URLs hold none, and the
# three-machine test checks that it reaches no file, no MLflow run and no log
PLANTED = "pl4nted-Pg-s3cret"


@pytest.fixture(scope="module")
def pg():
    with Postgres(password=PLANTED) as server, pytest.MonkeyPatch.context() as mp:
        mp.setenv("PGPASSWORD", PLANTED)
        yield server


def _env(**extra) -> dict:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONUNBUFFERED": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.update(extra)
    return env


HOLD = textwrap.dedent("""
    import sys, time
    from bakeoff.search.locks import Lock
    with Lock(sys.argv[1], "stage:tickets:train@lora"):
        print("holding", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def test_a_second_holder_waits_says_who_holds_it_and_a_killed_holders_lock_is_free_at_once(pg):
    from bakeoff.search.locks import Lock

    url = pg.create("locks")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, url, "600"], stdout=subprocess.PIPE, text=True, env=_env())
    assert holder.stdout.readline().strip() == "holding"
    said = []
    lock = Lock(url, "stage:tickets:train@lora", say=said.append)
    killer = subprocess.Popen(["bash", "-c", f"sleep 2; kill -9 {holder.pid}"])
    t = time.perf_counter()
    with lock:  # blocks until the holder is killed: its session ends, and the lock with it
        waited = time.perf_counter() - t
    killer.wait()
    holder.wait()
    assert 1.5 < waited < 30 and lock.waited == pytest.approx(waited, abs=1.0)
    assert len(said) == 1 and "stage:tickets:train@lora is held by " in said[0], said
    assert f"pid {holder.pid} since " in said[0] and said[0].endswith("waiting for it")
    with Lock(url, "stage:tickets:train@lora") as again:  # free: no wait
        assert again.waited == 0.0


WORKER = textwrap.dedent("""
    import json, sys, time
    import optuna
    from bakeoff.search.storage import storage_of
    from bakeoff.search.study import Draws, run_study, values_drawn
    url, role, trials = sys.argv[1], sys.argv[2], int(sys.argv[3])
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="shared", storage=storage_of(url), load_if_exists=True,
                                direction="minimize")
    def objective(trial):
        lr = trial.suggest_float("lr", 1e-4, 1e-2, log=True)
        values_drawn()
        trial.set_user_attr("worker", role)
        print(f"trial {trial.number} running", flush=True)
        time.sleep(600 if role == "victim" else 1.0)
        return abs(lr - 1e-3)
    rec = run_study(study, objective, trials, draws=Draws(
        url, sampler_for=lambda n: optuna.samplers.TPESampler(seed=n, n_startup_trials=2)))
    print("RECORD " + json.dumps(rec), flush=True)
""")


@pytest.mark.slow  # a PostgreSQL server, two worker processes and the heartbeat's grace period (15 s here)
def test_a_worker_killed_mid_trial_leaves_it_failed_and_its_place_is_drawn_again(pg):
    """The victim takes a trial and is killed in it (SIGKILL: no goodbye). Its heartbeat stops; after the grace
    period the survivor's wait marks it failed, and since a lost trial is not counted the survivor draws a fourth."""
    import optuna

    from bakeoff.search.storage import GRACE_S, storage_of

    url = pg.create("killed")
    grace = _env(BAKEOFF_STUDY_GRACE_S="15")  # 15 s without a heartbeat (every 2 s): the victim is dead
    victim = subprocess.Popen(
        [sys.executable, "-c", WORKER, url, "victim", "4"], stdout=subprocess.PIPE, text=True, env=grace
    )
    assert victim.stdout.readline().startswith("trial 0 running")
    survivor = subprocess.Popen(
        [sys.executable, "-c", WORKER, url, "survivor", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=grace,
    )
    time.sleep(2)
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    out, _ = survivor.communicate(timeout=GRACE_S + 120)
    assert survivor.returncode == 0, out
    rec = json.loads(out.split("RECORD ", 1)[1])
    trials = optuna.load_study(study_name="shared", storage=storage_of(url)).trials
    states = {t.number: (t.state.name, t.user_attrs.get("worker")) for t in trials}
    assert states[0] == ("FAIL", "victim"), states  # the killed worker's trial: failed
    assert "status" not in trials[0].user_attrs  # lost, not a failure of its own
    assert sorted(s for s, w in states.values() if w == "survivor") == ["COMPLETE"] * 4, states
    assert len(trials) == 5 and rec["lost_trials"] == [0] and len(rec["trials"]) == 4
    assert "still running on another worker" in out
    lrs = [t.params["lr"] for t in trials]
    assert len(set(lrs)) == len(lrs)  # no point drawn twice


@pytest.mark.parametrize("value", ["soon", "3", ""])
def test_a_bad_study_grace_stops_with_a_message_not_a_traceback(value):
    r = subprocess.run(
        [sys.executable, "-c", "import bakeoff.search.storage"],
        capture_output=True,
        text=True,
        env=_env(BAKEOFF_STUDY_GRACE_S=value),
        check=False,
    )
    assert r.returncode != 0 and "BAKEOFF_STUDY_GRACE_S must be a whole number of seconds" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_worker_draws_no_trial_while_another_holds_the_study_lock(pg):
    """The lock is what keeps the budget and the draws apart: while this test holds the study's lock, a worker that
    has opened the study says who holds it and draws nothing; once it is released, the worker runs its trials."""
    import optuna

    from bakeoff.search.locks import Lock
    from bakeoff.search.storage import storage_of

    url = pg.create("held")
    with Lock(url, "study:shared"):
        worker = subprocess.Popen(
            [sys.executable, "-c", WORKER, url, "worker", "2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
        )
        first = worker.stdout.readline()  # a broken lock prints "trial 0 running" here
        assert "study:shared is held by " in first and first.rstrip().endswith("waiting for it"), first
        time.sleep(2)
        assert optuna.load_study(study_name="shared", storage=storage_of(url)).trials == []
    out, _ = worker.communicate(timeout=120)
    assert worker.returncode == 0, first + out
    trials = optuna.load_study(study_name="shared", storage=storage_of(url)).trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"]


def _project(repo: Path, tiny_model_dir: Path, storage: str, trials: int) -> dict:
    """A small bake-off on the tiny model: zero-shot, a LoRA searched on validation, full fine-tuning."""
    import yaml
    from conftest import make_dvc_repo

    params = make_dvc_repo(repo, tiny_model_dir, rows=64)
    params["train_defaults"].update(
        max_steps=4,
        effective_batch=4,
        micro_batch=2,
        precision="fp32",
        eval_steps=2,
        warmup_steps_excluded=1,
        logging_steps=1,
    )
    params["baselines"] = {"zero_shot": {"shots": 0}}
    params["variants"] = {"lora": {"technique": "lora", "r": 4, "alpha": 8}, "full": {"technique": "full"}}
    params["derived"] = {}
    params["tune"].update(
        trials=trials,
        trial_steps=0.5,
        storage=storage,
        share={},
        spaces={"lora": {"lr": {"low": 1.0e-4, "high": 1.0e-2, "log": True}}},
    )
    params["eval"].update(latency_requests=2, bootstrap_resamples=200, lm_eval="off", probe=False)
    params["export"].update(serve=False)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return params


def sh(cmd: str, cwd: Path, **extra) -> str:
    r = subprocess.run(cmd, shell=True, cwd=cwd, env=_env(**extra), capture_output=True, text=True, check=False)
    assert r.returncode == 0, f"{cmd} failed in {cwd}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r.stdout + r.stderr


@pytest.mark.slow
def test_two_tune_workers_on_one_postgres_study_run_its_four_trials_once(pg, tiny_model_dir, tmp_path):
    """Two machines (two copies of one prepared project) run `python stages/tune.py lora` at once on one study."""
    import shutil

    import optuna

    from bakeoff.search.storage import storage_of

    url = pg.create("two_workers")
    one = tmp_path / "one"
    one.mkdir()
    _project(one, tiny_model_dir, url, trials=4)
    sh("git init -q && dvc init -q && dvc repro -q data", one)
    two = tmp_path / "two"
    shutil.copytree(one, two, symlinks=True)
    procs = [
        subprocess.Popen(
            [sys.executable, "stages/tune.py", "lora"],
            cwd=d,
            env=_env(),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for d in (one, two)
    ]
    outs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    studies = optuna.get_all_study_summaries(storage=storage_of(url))
    assert len(studies) == 1
    trials = optuna.load_study(study_name=studies[0].study_name, storage=storage_of(url)).trials
    assert len(trials) == 4 and all(t.state.name in ("COMPLETE", "PRUNED") for t in trials), trials
    lrs = [t.params["lr"] for t in trials]
    assert len(set(lrs)) == 4  # no point drawn twice
    recs = [json.loads((d / "runs" / "lora" / "tuned.json").read_text()) for d in (one, two)]
    for key in ("values", "best_trial", "best_value", "n_pruned"):  # whichever finished last: the same choice
        assert recs[0].get(key) == recs[1].get(key), (key, [r.get("skipped") or r.get("error") for r in recs], outs)
    assert [t["values"] for t in recs[0]["trials"]] == [t["values"] for t in recs[1]["trials"]]


# a column is masked by its header's unit or what it measures: "step s (median)", "p50 s", "train wall s", "peak RSS
# MB", "measured GB"; and a sizing table's "error" (predicted against measured memory), nothing else of that name
MEASURED = re.compile(
    r"tok/s|tokens/s|latency|\bp\d\d\b|(?:^| )s(?: |$)|seconds|wall|RSS|\bMB\b|\bGB\b|memory", re.IGNORECASE
)
WITH_UNIT = re.compile(r"\d[\d,]*(?:\.\d+)?\s?(?:ms|s|min|h|MB|GB)\b")


def timings_masked(md: str) -> str:
    """The report with what a rerun measures differently masked: columns of times, speeds and memory, numbers
    with those units, and the lines whose conclusion rests on them (latency ties, the least memory)."""
    out, header = [], None
    for line in md.splitlines():
        if not line.startswith("|"):
            header = None
            measured = re.search(r"latency|least training memory|fitted overhead|trained in", line, re.IGNORECASE)
            out.append("# a measured line" if measured else WITH_UNIT.sub("#", line))
            continue
        cells = line.strip().strip("|").split("|")
        if header is None:
            header = [c.strip() for c in cells]
            sizing = "measured GB" in header
        elif len(cells) == len(header) and not set(line.strip()) <= set("|-"):
            cells = ["#" if MEASURED.search(h) or (sizing and h == "error") else c for h, c in zip(header, cells)]
        out.append("|".join(cells))
    return "\n".join(out)


@contextlib.contextmanager
def _reaped(proc: subprocess.Popen):
    """``proc`` killed on the way out if it still runs (a failed assertion does not leave a machine working)."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _stage_lines(log: str, word: str) -> list[str]:
    return sorted(re.findall(rf"\] (\S+) — {word}", log))


@pytest.mark.slow
def test_three_machines_split_a_bakeoff_and_the_third_trains_nothing(pg, tiny_model_dir, tmp_path):
    """Machines A and B start at once on their share of the arms (both need the base model and the data, and both
    were given train@lora): each stage runs on one of them, the other waits or restores. C runs the rest (export,
    compare) from what they pushed. A single machine with the same params (its own study database) writes the same
    report, timings aside, and the same predictions."""
    import mlflow

    split = pg.create("split")
    origin = tmp_path / "origin"
    origin.mkdir()
    _project(origin, tiny_model_dir, split, trials=2)
    remote = tmp_path / "remote"
    sh(
        f"git init -q && git config user.email t@t && git config user.name t && dvc init -q && "
        f"dvc remote add -d shared {remote} && git add -A && git commit -qm bakeoff",
        origin,
    )
    for name in ("single", "a", "b", "c"):
        sh(f"git clone -q {origin} {tmp_path / name}", tmp_path)
    single = tmp_path / "single"
    text = (single / "params.yaml").read_text()
    (single / "params.yaml").write_text(text.replace(split, pg.create("single")))  # its own studies
    # its own local MLflow store; it runs beside A and B (a machine of its own: nothing shared with theirs)
    alone = subprocess.Popen(
        [sys.executable, "-m", "bakeoff.run.clock"],
        cwd=single,
        env=_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )

    with MlflowServer(tmp_path / "mlflow") as server, _reaped(alone):
        env = _env(MLFLOW_TRACKING_URI=server.uri)
        a = subprocess.Popen(
            [sys.executable, "-m", "bakeoff.run.worker", "evaluate@lora"],
            cwd=tmp_path / "a",
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        b = subprocess.Popen(
            [sys.executable, "-m", "bakeoff.run.worker", "evaluate@full", "baseline@zero_shot", "evaluate@lora"],
            cwd=tmp_path / "b",
            env=env,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        logs = {"a": a.communicate(timeout=1200)[0], "b": b.communicate(timeout=1200)[0]}
        for m, log in logs.items():  # kept beside the clones for a look after a failure
            (tmp_path / f"{m}.log").write_text(log)
        assert (a.returncode, b.returncode) == (0, 0), logs
        c_log = sh("python -m bakeoff.run.worker", tmp_path / "c", MLFLOW_TRACKING_URI=server.uri)
        (tmp_path / "c.log").write_text(c_log)
        runs = mlflow.MlflowClient(server.uri).search_runs(
            [mlflow.MlflowClient(server.uri).get_experiment_by_name("tickets").experiment_id], max_results=1000
        )
        single_log = alone.communicate(timeout=1200)[0]
        assert alone.returncode == 0, single_log[-4000:]

    both = logs["a"] + logs["b"]
    for stage in ("model", "data", "tune@lora", "train@lora", "evaluate@lora"):  # both planned it: one ran it
        assert _stage_lines(both, "done").count(stage) == 1, (stage, logs)
        assert _stage_lines(both, "restored").count(stage) == 1, (stage, logs)
    # C trained, tuned and evaluated nothing: every arm's stage came from the remote
    ran_on_c = _stage_lines(c_log, "done")
    assert ran_on_c == ["compare", "export"], c_log
    assert set(_stage_lines(c_log, "restored")) >= {
        "model",
        "data",
        "tune@lora",
        "tune@full",
        "train@lora",
        "train@full",
        "evaluate@lora",
        "evaluate@full",
        "baseline@zero_shot",
        "tune_prompt@zero_shot",
    }, c_log
    # the same result as one machine: report (timings aside), predictions, the search's trials
    report = {m: (tmp_path / m / "reports" / "comparison.md").read_text() for m in ("single", "c")}
    assert timings_masked(report["c"]) == timings_masked(report["single"])
    quality = [ln for ln in timings_masked(report["c"]).splitlines() if ln.strip().startswith("lora | ")]
    assert quality and "%" in quality[0] and "ok" in quality[0], quality  # the qualities are compared, not masked
    for arm in ("zero_shot", "lora", "full"):
        assert (tmp_path / "c" / "runs" / arm / "predictions.jsonl").read_bytes() == (
            single / "runs" / arm / "predictions.jsonl"
        ).read_bytes(), arm
    tuned = {m: json.loads((tmp_path / m / "runs" / "lora" / "tuned.json").read_text()) for m in ("single", "c")}
    assert [t["values"] for t in tuned["c"]["trials"]] == [t["values"] for t in tuned["single"]["trials"]]
    assert tuned["c"]["values"] == tuned["single"]["values"]
    # MLflow on the server: every arm's run once (each logged by the machine that ran it), one comparison
    arms = [r.data.tags.get("bakeoff.name") for r in runs if r.data.tags.get("kind") in ("baseline", "variant")]
    assert sorted(arms) == ["full", "lora", "zero_shot"], arms
    assert [r.data.tags.get("bakeoff.name") for r in runs].count("comparison") == 1
    # the database's password (PGPASSWORD only) is nowhere: params, dvc.lock, the DVC caches and the remote's
    # run-cache, the records, MLflow's store and its runs' params and tags, the machines' logs
    for r in runs:
        assert PLANTED not in json.dumps([r.data.params, r.data.tags]), r.info.run_name
    for log in [c_log, *logs.values()]:
        assert PLANTED not in log
    holding = [str(f) for f in tmp_path.rglob("*") if f.is_file() and PLANTED.encode() in f.read_bytes()]
    assert not holding, holding
    assert list((remote / "runs").rglob("*")), "the remote holds no run-cache: the check above saw none"


def test_the_worker_prints_its_services_without_their_passwords():
    from bakeoff.core.schema import without_secret

    assert without_secret("postgresql://bob:s3cret@db.example:5432/bakeoff") == "postgresql://db.example:5432/bakeoff"
    assert without_secret("http://u:p@mlflow:5000") == "http://mlflow:5000"
    assert without_secret("sqlite:////work/mlflow.db") == "sqlite:////work/mlflow.db"
    assert without_secret(None) == "local SQLite"

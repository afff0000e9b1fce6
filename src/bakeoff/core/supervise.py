"""A stage's work in a child process, so a kill (the host's out-of-memory killer, a SIGKILL) becomes the arm's
recorded status and ``dvc repro`` goes on with the other arms, instead of a stage that ends with no record.

    supervise("train", "lora")      # first thing in a stage's main: returns in the child, exits in the parent

The parent imports no torch and holds no model: it waits, exits with the child's code when the child exited, and
when a signal ended it, writes the arm's record (``oom`` for SIGKILL, with the peak resident memory the child reached;
``failed`` for a crash such as SIGSEGV) and the outputs DVC expects, then exits 0. A stop you asked for (SIGINT,
SIGTERM, SIGHUP) is passed on, with no record. Ranks started by torchrun or accelerate are not
supervised (the launcher records a killed rank: ``bakeoff.train.launch``).
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys

ENV = "BAKEOFF_SUPERVISED"
# a stop you asked for (Ctrl-C, a terminated job) stays a stop: no record, so the next repro runs the stage again
ASKED = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def killed_words(rc: int, peak_mb: float) -> tuple[str, str]:
    """(status, reason) for a child that a signal ended (``rc`` = −signal)."""
    sig = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else f"signal {-rc}"
    likely = ", likely the host's out-of-memory killer" if sig == "SIGKILL" else ""
    return (
        "oom" if sig == "SIGKILL" else "failed",
        f"the process was killed by {sig}{likely}, at a peak of {peak_mb:,.0f} MB resident: no record of its own",
    )


def supervise(stage: str, name: str, tries: int = 1) -> None:
    """Run this same command again as a child (``stage``: ``train``, ``evaluate`` or ``tune``; ``name``: the arm) and
    stand by it; return at once inside the child or a rank. ``tries``: how many times a killed child is started
    again (a search resumes its study, where a trial killed after the first lost one counts as failed)."""
    if os.environ.get(ENV) or "LOCAL_RANK" in os.environ:
        return
    for attempt in range(1, tries + 1):
        sys.stdout.flush()
        rc = subprocess.run([sys.executable, *sys.argv], env={**os.environ, ENV: "1"}, check=False).returncode
        if rc >= 0:
            sys.exit(rc)
        if -rc in {int(s) for s in ASKED}:
            sys.exit(128 - rc)
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
        status, reason = killed_words(rc, peak_mb)
        if attempt < tries:
            print(f"[{name}] {reason}; {stage} started again ({attempt + 1} of {tries})", file=sys.stderr, flush=True)
    record_killed(stage, name, status, reason, peak_mb)
    sys.exit(0)


def record_killed(stage: str, name: str, status: str, reason: str, peak_mb: float) -> dict:
    """The arm's record and the outputs DVC expects of ``stage``, for a process killed before it could write them."""
    from bakeoff.core import runs
    from bakeoff.core.config import load_params

    params = load_params()
    if stage == "tune":  # the search could not finish: the arm trains (or prompts) on params.yaml's values
        record = {
            "name": name,
            "status": status,
            "error": reason,
            "trials": [],
            "values": {},
            "killed": True,
            "skipped": f"the search was killed ({reason}): params.yaml's values stand",
        }
        runs.write_json(runs.tuned_record(name), record)
        print(f"[{name}] {status}: {reason}", flush=True)
        return record
    v = params.variant(name)
    record = {
        "name": name,
        "kind": "variant",
        "technique": v.technique,
        "backend": v.backend,
        "parent": v.parent,
        "status": status,
        "error": reason,
        "metrics": {f"{stage}_peak_rss_mb": round(peak_mb, 1)},
        "killed": True,
    }
    if stage == "train":
        out = runs.fresh_dir(runs.variant_dir(name))
        (out / "NOT_TRAINED").write_text(f"{status}: {reason}\n")
        path = runs.train_record(name)
    else:
        from bakeoff.core.records import read_run

        record["run_id"] = read_run(runs.train_record(name)).run_id
        runs.predictions(name).parent.mkdir(parents=True, exist_ok=True)
        runs.predictions(name).write_text("")
        path = runs.eval_record(name)
    runs.finish(record, path)
    return record

"""torch's CPU threads (bakeoff.core.threads): one per physical core the process may run on, within a cgroup quota,
the user's OMP_NUM_THREADS first, and named in the machine line every record and clock.json carry.

    pytest tests/test_threads.py      (about 10 s: one process imports torch)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from bakeoff.core import threads

# two logical CPUs on one core (hyper-threads), then a second core
CPUINFO = (
    "\n\n".join(
        f"processor\t: {p}\nphysical id\t: 0\ncore id\t\t: {c}\nflags\t\t: fpu avx2"
        for p, c in ((0, 0), (1, 0), (2, 1), (3, 1))
    )
    + "\n"
)


def test_hyper_threads_of_one_core_count_as_one_core():
    assert threads.cores(CPUINFO, {0, 1, 2, 3}) == 2
    assert threads.cores(CPUINFO, {0, 1}) == 1
    assert threads.cores(CPUINFO, {1, 2}) == 2
    assert threads.cores("processor : 0\n", {0, 1, 2}) == 3  # no topology given: the logical CPUs


def test_a_cgroup_quota_caps_the_count():
    assert threads.quota("200000 100000\n") == 2
    assert threads.quota("150000 100000") == 2
    assert threads.quota("50000 100000") == 1
    assert threads.quota("max 100000") is None
    assert threads.quota("") is None


def test_the_users_omp_num_threads_wins(monkeypatch):
    monkeypatch.delenv(threads.AUTO, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.count() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "junk")
    assert threads.count() == min(threads.cores(), threads.quota() or threads.cores())


def test_a_stage_on_one_cpu_computes_with_one_thread_and_says_so(tmp_path):
    """A process confined to one CPU (as a 1-core machine or a pinned job is) that set torch to 4 threads before it
    imported bakeoff computes with one thread once bakeoff loads; the record it writes says one torch thread beside a
    device of one core, and the clock's machine line says both."""
    record = tmp_path / "eval.json"
    code = (
        "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
        "import torch; torch.set_num_threads(4); "
        "import bakeoff; from pathlib import Path; from bakeoff.core import runs; "
        f"runs.finish({{'name': 'x', 'status': 'ok', 'metrics': {{}}}}, Path({str(record)!r})); "
        "print(torch.get_num_threads()); print(os.environ['OMP_NUM_THREADS']); print(runs.machine_line())"
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, check=True)
    n, omp, line = r.stdout.splitlines()[-3:]
    assert (n, omp) == ("1", "1"), r.stdout
    rec = json.loads(record.read_text())
    assert rec["torch_threads"] == 1 and line == f"{rec['device']}, 1 torch thread", (rec, line)
    if not shutil.which("nvidia-smi"):  # on a CUDA machine the device is the card
        assert ", 1 core (" in rec["device"], rec["device"]


def test_the_ranks_of_one_run_share_the_cores_bakeoff_chose(monkeypatch):
    """torchrun keeps an OMP_NUM_THREADS its parent had: one bakeoff chose is divided among the run's processes on
    the machine (2 processes on 2 cores: 1 thread each, not 2), one the user set is kept."""
    monkeypatch.setattr(threads, "cores", lambda *a: 2)
    monkeypatch.setattr(threads, "quota", lambda *a: None)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(threads.AUTO, raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert threads.apply() == 2 and os.environ["OMP_NUM_THREADS"] == "2" and os.environ[threads.AUTO] == "1"
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # a rank torchrun started, with the parent's environment
    assert threads.apply() == 1 and os.environ["OMP_NUM_THREADS"] == "1"
    monkeypatch.delenv(threads.AUTO)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")  # the user's own choice
    assert threads.apply() == 2

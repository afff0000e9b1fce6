"""The CPU threads torch computes with: one per physical core this process may run on, shared among the processes
of one run (torchrun's ``LOCAL_WORLD_SIZE``), set once per process before torch loads, recorded as each record's
``torch_threads`` and in the clock's machine line (``bakeoff.core.runs.machine_line``).

A second hardware thread on a core shares that core's vector units, so a matrix multiply gains nothing from it and
two threads on one core wait on each other; a container's CPU quota (cgroup v2 ``cpu.max``) caps the count the
same way, since more threads than the quota allows are parked by the scheduler. ``OMP_NUM_THREADS`` set by the user
wins (torch reads it when it loads, and so does every OpenMP library it brings); one bakeoff set itself
(``AUTO`` marks it) is worked out again in each process, since torchrun leaves an inherited value as it is.

    python -c "from bakeoff.core import threads; print(threads.count(), threads.cores())"
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

CPUINFO, CPU_MAX = Path("/proc/cpuinfo"), Path("/sys/fs/cgroup/cpu.max")
AUTO = "BAKEOFF_AUTO_THREADS"  # set beside OMP_NUM_THREADS when bakeoff chose it, not the user


def logical() -> int:
    """The logical CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cores(cpuinfo: str | None = None, allowed: set[int] | None = None) -> int:
    """The physical cores under this process's logical CPUs: distinct (physical id, core id) pairs in /proc/cpuinfo;
    the logical count where cpuinfo does not say (another OS, a VM that hides its topology)."""
    try:
        text = cpuinfo if cpuinfo is not None else CPUINFO.read_text()
        allowed = allowed if allowed is not None else os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return logical()
    pairs = set()
    for block in text.split("\n\n"):
        cpu = {k.strip(): v.strip() for k, v in (ln.split(":", 1) for ln in block.splitlines() if ":" in ln)}
        if "processor" in cpu and "core id" in cpu and int(cpu["processor"]) in allowed:
            pairs.add((cpu.get("physical id", "0"), cpu["core id"]))
    return len(pairs) or len(allowed) or 1


def quota(cpu_max: str | None = None) -> int | None:
    """The CPUs a cgroup v2 quota allows (``cpu.max``: "200000 100000" is 2), None when unlimited or unknown."""
    try:
        text = cpu_max if cpu_max is not None else CPU_MAX.read_text()
        limit, period = text.split()[:2]
        return None if limit == "max" else max(1, math.ceil(int(limit) / int(period)))
    except (OSError, ValueError):
        return None


def count() -> int:
    """The threads torch is to use here: the user's ``OMP_NUM_THREADS`` when set, else the physical cores within the
    quota, shared among this run's processes on the machine (torchrun's ``LOCAL_WORLD_SIZE``)."""
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) > 0 and not os.environ.get(AUTO):
        return int(given)
    q = quota()
    here = min(cores(), q) if q else cores()
    ranks = os.environ.get("LOCAL_WORLD_SIZE", "").strip()
    return max(1, here // (int(ranks) if ranks.isdigit() and int(ranks) > 0 else 1))


def apply() -> int:
    """Set the count for this process (before torch loads: OMP_NUM_THREADS; after: ``torch.set_num_threads``)."""
    n, auto = count(), not os.environ.get("OMP_NUM_THREADS", "").strip() or os.environ.get(AUTO)
    os.environ["OMP_NUM_THREADS"] = str(n)
    if auto:
        os.environ[AUTO] = "1"
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
    return n


def in_use() -> int:
    """The threads torch computes with in this process (what it was set to, where torch is not loaded)."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else count()

"""The clock's record (reports/clock.json) as typed records: each stage's last time here, with the machine and the
speed probe it was timed at, and each `make repro` run's total beside its estimate. Read and written back key for key
(``bakeoff.core.record.Record``).

    rec = read_record(Path("reports/clock.json"))    # ClockRecord; empty where there is none
    rec.stages["train@lora"].actual_s, rec.runs[-1].error_pct
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from bakeoff.core.record import Record

RECORD = Path("reports/clock.json")


@dataclass
class StageTime(Record):
    """A stage's last status and time here, its estimate then and what the estimate rested on; where it ran, its
    seconds (``actual_s``), the machine and the speed probe at the time."""

    last_status: str | None = None
    last_s: float | None = None
    estimated_s: float | None = None
    estimated_from: str | None = None
    at: str | None = None
    actual_s: float | None = None
    machine: str | None = None
    probe_s: float | None = None


@dataclass
class ClockRun(Record):
    """One `make repro`: when, at which commit, on which machine, its estimate before the first stage and its actual
    total (``error_pct``: how far off the estimate was; ``estimated_ended_s``: the estimate of the stages it ended,
    where it stopped early)."""

    started: str | None = None
    git_commit: str | None = None
    machine: str | None = None
    stages_planned: int | None = None
    estimated_total_s: float | None = None
    probe_s: float | None = None
    actual_total_s: float | None = None
    stages_ran: int | None = None
    completed: bool | None = None
    stages_restored: int | None = None
    estimated_ended_s: float | None = None
    error_pct: float | None = None


@dataclass
class ClockRecord(Record):
    """Every stage's last time and the last 20 runs, and this machine's line."""

    stages: dict[str, StageTime] | None = None
    runs: list[ClockRun] | None = None
    machine: str | None = None


def read_record(path: Path = RECORD) -> ClockRecord:
    """The record at ``path`` (an empty one where there is none or it cannot be read)."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        raw = {}
    rec = ClockRecord.from_dict(raw)
    return rec.with_(stages=rec.stages or {}, runs=rec.runs or [])


def write_record(rec: ClockRecord, path: Path = RECORD) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(rec.to_dict(), indent=2) + "\n")
    os.replace(tmp, path)

"""Where a search's Optuna study lives: ``tune.storage`` (PostgreSQL for several machines) or the default SQLite
file, with heartbeats, so a killed worker's trial is marked failed after ``GRACE_S`` (``BAKEOFF_STUDY_GRACE_S``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def _grace() -> int:
    """Seconds a running trial may go without a heartbeat before its worker counts as dead: BAKEOFF_STUDY_GRACE_S
    (longer for machines whose workers stall, shorter where a worker is killed on purpose, as in a test), else 60;
    the heartbeat is a sixth of it. A value that is not a number of seconds stops with a message."""
    raw = os.environ.get("BAKEOFF_STUDY_GRACE_S", "60")
    if not raw.strip().isdigit() or int(raw) < 6:
        raise SystemExit(f"error: BAKEOFF_STUDY_GRACE_S must be a whole number of seconds, 6 or more; got {raw!r}")
    return int(raw)


GRACE_S = _grace()
HEARTBEAT_S = GRACE_S // 6


def storage_url(params: Params, work_dir: Path) -> str:
    """``tune.storage`` (``postgresql://`` through the psycopg driver) or the default SQLite file."""
    from bakeoff.search.locks import driver_url

    tc = params.tune
    if not tc.storage:  # the default file's folder does not exist yet on a fresh clone
        Path(work_dir).parent.mkdir(parents=True, exist_ok=True)
    return driver_url(tc.storage) if tc.storage else f"sqlite:///{(Path(work_dir).parent / 'tune.db').resolve()}"


def storage_of(url: str):
    """Optuna's RDB storage at ``url`` with heartbeats (every HEARTBEAT_S; GRACE_S without one: failed)."""
    import warnings

    import optuna

    from bakeoff.search.locks import driver_url

    with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna since 2.9: said once here, not per run
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(driver_url(url), heartbeat_interval=HEARTBEAT_S, grace_period=GRACE_S)

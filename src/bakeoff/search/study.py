"""An Optuna study in its database, safe for several workers: the budget holds across them, no two draw from the
same state, a worker that dies gives its trial's place back, and every worker returns the whole study's choice.

    study, url = open_study(params, "lora", space, SearchDirs(base, data_dir, work_dir), "minimize", rung_steps=10)
    rec = run_study(study, objective, trials=4, draws=Draws(url, sampler_for=lambda n: ..., recipe=recipe))

Each worker holds the study's lock (``bakeoff.search.locks``: an advisory lock on PostgreSQL, a file lock on the default
SQLite file) from counting the trials left until its next trial's values are drawn; trials beat a heartbeat
(Optuna's ``RDBStorage(heartbeat_interval=...)``), so a killed worker's trial is marked failed after ``GRACE_S``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.search.space import SearchDirs, study_name
from bakeoff.search.storage import GRACE_S, storage_of, storage_url

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def _sampler_and_pruner(tc, space: dict, rung_steps: int | None = None, number: int = 0):
    """The sampler that draws trial ``number``'s values, seeded by ``tune.seed`` and the number, so a trial's draw
    depends on the study's trials before it and not on which worker or process draws it; and the pruner."""
    import optuna

    if finite(space):  # every trial's values are queued (grid_order): the sampler draws nothing
        sampler = optuna.samplers.RandomSampler(seed=tc.seed + number)
    else:  # constant liar: a trial still running elsewhere counts as a poor one, so a parallel worker draws away
        sampler = optuna.samplers.TPESampler(
            seed=tc.seed + number, n_startup_trials=max(1, tc.trials // 2), constant_liar=True
        )
    pruner = {
        "median": optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=1),
        # rungs at rung_steps × 2^k: a trial goes on to the next only while it is in the better half there
        "halving": optuna.pruners.SuccessiveHalvingPruner(min_resource=rung_steps or "auto", reduction_factor=2),
        "none": optuna.pruners.NopPruner(),
    }[tc.pruner]
    return sampler, pruner


def seeded(tc, space: dict, rung_steps: int | None = None) -> Callable:
    """A search's ``Draws.sampler_for``: trial number → the sampler that draws it (``_sampler_and_pruner``)."""
    return lambda number: _sampler_and_pruner(tc, space, rung_steps, number)[0]


def finite(space: dict) -> bool:
    return all("choices" in spec for spec in space.values())


def grid_order(space: dict, seed: int, first: dict | None = None) -> list[dict]:
    """Every point of a finite ``space`` in one seeded order, ``first`` (the plain recipe) leading it: trial k takes
    the first point no counted trial has taken (a lost trial's point is taken again)."""
    import itertools
    import random

    keys = sorted(space)
    points = [dict(zip(keys, combo)) for combo in itertools.product(*(space[k]["choices"] for k in keys))]
    random.Random(seed).shuffle(points)
    return ([first] + [p for p in points if p != first]) if first is not None else points


POLL_S = 2.0  # how often a worker that finished its share looks again at trials still running elsewhere


def open_study(params: Params, name: str, space: dict, dirs: SearchDirs, direction: str, rung_steps: int | None = None):
    """(study, storage URL): the study of ``name`` in ``tune.storage`` (default: .bakeoff_tmp/tune.db), created or
    continued, with heartbeats: a trial whose worker stops beating for ``GRACE_S`` is marked failed."""
    import optuna

    from bakeoff.core.records import read_stats

    tc = params.tune
    data_hash = read_stats(Path(dirs.data) / "stats.json").data_hash or ""
    url = storage_url(params, dirs.work)
    sampler, pruner = _sampler_and_pruner(tc, space, rung_steps)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # one line per trial comes from the stage instead
    from bakeoff.search.locks import Lock

    # two workers starting at once would both create Optuna's tables or the study (PostgreSQL: a UniqueViolation
    # for the second, found by tests/test_machines.py under CI's load): one at a time
    with Lock(url, "optuna:open-study", say=lambda m: None):
        storage = storage_of(url)
        study = optuna.create_study(
            study_name=study_name(params, name, space, data_hash),
            storage=storage,
            load_if_exists=True,
            direction=direction,
            sampler=sampler,
            pruner=pruner,
        )
    return study, url


_HELD: list = []  # the study lock of the trial being drawn, released by values_drawn()


def values_drawn() -> None:
    """An objective calls this once its trial's values are drawn: the study's lock goes to the next worker."""
    while _HELD:
        _HELD.pop().release()


LOST = (
    "its process was lost with no word (killed, likely by the host's out-of-memory killer, or its machine "
    "stopped) after the study had already drawn one lost trial again: counted as failed, not drawn again"
)


def lost(t) -> bool:
    """A trial failed because its worker stopped beating (killed, its machine lost): it recorded nothing."""
    import optuna

    return t.state == optuna.trial.TrialState.FAIL and "status" not in t.user_attrs


def counts(t, every: list | None = None) -> bool:
    """Whether trial ``t`` takes a place in the budget: finished, pruned, running, or failed on its own (out of
    memory, unsupported, a crash: the objective records why). The study's first lost trial (``lost``) gives its
    place back and the budget draws it again (a machine lost mid-trial); every later one counts as failed (``every``:
    the study's trials), so a trial that kills its process is not drawn again on every rerun."""
    import optuna

    S = optuna.trial.TrialState
    if t.state in (S.COMPLETE, S.PRUNED, S.RUNNING) or (t.state == S.FAIL and "status" in t.user_attrs):
        return True
    if every is None or not lost(t):
        return False
    return t.number != min(x.number for x in every if lost(x))


def _lock_for(study, url: str | None):
    from bakeoff.search.locks import Lock

    url = url or getattr(getattr(study, "_storage", None), "url", None)  # the study's own database
    return Lock(url, f"study:{study.study_name}", say=lambda m: print(m.replace("[lock]", "[tune]"), flush=True))


def _fail_stale(study) -> None:
    """Optuna's own check: a running trial without a heartbeat for GRACE_S is marked failed."""
    import warnings

    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


@dataclass
class Draws:
    """How a study's trials are drawn. Several workers on one study (``url``: its database): each holds the study's
    lock (``bakeoff.search.locks``) from counting the trials left until its next trial's values are drawn (the
    objective calls ``values_drawn``), so the trial count holds across workers and no two draw from the same state;
    ``sampler_for(number)`` gives the sampler seeded for that trial number; ``recipe`` is trial 0's values (the plain
    recipe), queued first and queued again when its trial is lost; ``grid`` (a finite space, ``grid_order``) queues
    every trial's point; ``propose()``, asked under the lock before a draw, may return values to queue (a range just
    widened)."""

    url: str | None = None
    sampler_for: Callable | None = None
    recipe: dict | None = None
    grid: list[dict] | None = None
    propose: Callable | None = None


def run_study(study, objective, trials: int, token_budget: float | None = None, draws: Draws | None = None) -> dict:
    """Run the trials still missing from ``study`` (a resumed, shared or parallel study counts what it has), drawn as
    ``draws`` says, and return its choice and every finished trial. ``token_budget`` (``tune.budget: tokens``): trials
    go on, up to ``trials`` of them, only while the finished ones have trained fewer tokens than it. Then each worker
    waits for trials still running elsewhere, so every worker returns the same, whole study's choice."""
    import optuna

    draws = draws or Draws()
    grid = draws.grid

    S = optuna.trial.TrialState
    finished = (S.COMPLETE, S.PRUNED, S.FAIL)
    budget = min(trials, len(grid)) if grid is not None else trials  # a grid runs each point once at most

    def full() -> bool:  # every place of the budget taken (a running trial holds one), or the tokens spent
        every = study.get_trials(deepcopy=False)
        spent = sum(t.user_attrs.get("tokens_seen") or 0 for t in every if t.state in finished)
        return sum(counts(t, every) for t in every) >= budget or bool(token_budget and spent >= token_budget)

    def guarded(trial):
        try:
            return objective(trial)
        except optuna.TrialPruned:
            raise
        except Exception as e:  # failed before the objective said why: still its own failure, so it counts
            if "status" not in trial.user_attrs:
                trial.set_user_attr("status", "failed")
                trial.set_user_attr("error", f"{type(e).__name__}: {e}"[:500])
            raise
        finally:
            values_drawn()

    while True:
        _draw_until_full(study, guarded, full, draws)
        _wait_for_others(study)  # a trial lost there (its worker died) gives its place back: draw it again
        if full():
            break
    return _record(study)


def next_point(every: list, recipe: dict | None, grid: list[dict] | None) -> dict | None:
    """The values to queue for the next trial, given the study's trials: the recipe while no counted trial ran it
    (first, or again when its trial was lost), else a grid's first point not taken; None: the sampler draws."""
    import optuna

    if any(t.state == optuna.trial.TrialState.WAITING for t in every):
        return None  # one already queued
    counted = [t for t in every if counts(t, every)]
    if recipe is not None and not any(t.user_attrs.get("recipe") for t in counted):
        return recipe
    taken = [t.params for t in counted]
    return next((p for p in grid if p not in taken), None) if grid is not None else None


def _draw_until_full(study, guarded, full, draws: Draws) -> None:
    """Trials one at a time, each drawn under the study's lock, until the budget's places are taken."""
    import optuna

    url, sampler_for, recipe, grid, propose = draws.url, draws.sampler_for, draws.recipe, draws.grid, draws.propose
    S = optuna.trial.TrialState
    while True:
        lock = _lock_for(study, url)
        lock.acquire()
        try:
            _fail_stale(study)
            if full():
                break
            every = study.get_trials(deepcopy=False)
            point = next_point(every, recipe, grid)
            if point is None and propose is not None and not any(t.state == S.WAITING for t in every):
                point = propose()
            if point is not None:  # the plain recipe at full length, or a grid's next point
                study.enqueue_trial(point, user_attrs={"recipe": True} if point == recipe else {})
            every = study.get_trials(deepcopy=False)
            waiting = [t.number for t in every if t.state == S.WAITING]
            if sampler_for is not None:
                study.sampler = sampler_for(min(waiting) if waiting else len(every))
            _HELD.append(lock)
            try:
                study.optimize(guarded, n_trials=1, gc_after_trial=True, catch=(Exception,))
            except optuna.exceptions.UpdateFinishedTrialError:  # another worker saw no heartbeat and marked it lost
                print(
                    f"[tune] {study.study_name}: a trial here was marked lost by another worker (no heartbeat for "
                    f"{GRACE_S} s: an overloaded machine?); its result is dropped and its place drawn again",
                    flush=True,
                )
        finally:
            values_drawn()
            lock.release()


def _record(study) -> dict:
    """The study's trials that count (a lost one is listed by number only), its cost and its choice."""
    import optuna

    S = optuna.trial.TrialState
    done = study.get_trials(deepcopy=False, states=(S.COMPLETE, S.PRUNED, S.FAIL))
    every = study.get_trials(deepcopy=False)
    listed = [
        {
            "number": t.number,
            "values": t.params,
            "value": t.value,
            "val_curve": t.user_attrs.get("val_curve")
            or [{"step": k, "loss": round(x, 5)} for k, x in sorted(t.intermediate_values.items())],
            **{k: x for k, x in t.user_attrs.items() if not k.startswith("rows@")},  # per-row losses: the pruner's
            "state": t.user_attrs.get("status") or t.state.name.lower(),
            **({"error": LOST} if lost(t) else {}),
        }
        for t in done
        if counts(t, every)
    ]
    given_back = [t.number for t in done if not counts(t, every)]
    failed = [t for t in listed if t["state"] not in ("complete", "pruned")]
    common = {
        "study": study.study_name,
        "trials": listed,
        "n_pruned": sum(t.state == S.PRUNED for t in done),
        "n_failed": len(failed),
        # trials whose worker stopped mid-trial: marked failed, not counted, drawn again
        **({"lost_trials": given_back} if given_back else {}),
        # the whole study's cost, trials of earlier or parallel workers included: the verdict's cost adds it
        "tune_tokens": sum(t.user_attrs.get("tokens_seen") or 0 for t in done),
        "tune_wall_s": round(sum(t.user_attrs.get("wall_s") or 0 for t in done), 1),
    }
    complete = [t for t in done if t.state == S.COMPLETE]
    if not complete:
        counts_by = {}
        for t in listed:
            counts_by[t["state"]] = counts_by.get(t["state"], 0) + 1
        how = ", ".join(f"{n} {state}" for state, n in counts_by.items())
        return {**common, "values": {}, "skipped": f"no trial finished ({how}): params.yaml's values stand"}
    best = study.best_trial
    return {**common, "values": best.params, "best_value": best.value, "best_trial": best.number}


def _wait_for_others(study) -> None:
    """Until no trial of ``study`` is running: another worker's trials decide the choice too. A worker that died
    stops beating; after GRACE_S its trial is marked failed and the wait ends."""
    import optuna

    said = False
    while running := study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if not said:
            print(
                f"[tune] {study.study_name}: trial {', '.join(str(t.number) for t in running)} still running on "
                f"another worker; waiting for it, so the choice is the whole study's",
                flush=True,
            )
            said = True
        time.sleep(POLL_S)
        _fail_stale(study)

"""The search of the tune stage: an Optuna study per variant, its trials short runs of the shared training loop,
pruned on validation loss and judged on the validation split (the test split is never read).

    rec = search(params, "lora", SearchDirs(runs.BASE, runs.PREPARED, runs.work_dir("lora.tune")))
    rec["values"]   # {"lr": 0.0012}: what train@lora trains with (bakeoff.core.spaces.apply)

Samplers: a finite space (every dimension a list of choices) is tried point by point (grid); otherwise TPE, seeded.
The study lives in ``tune.storage`` (a local SQLite file by default): a killed search continues where it stopped, a
variant that shares another's search finds it complete, and several machines can work on one study.
"""

from __future__ import annotations

import shutil
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core.spaces import apply, run_identity
from bakeoff.search.space import SearchDirs, rung_steps, token_budget, trial_variant
from bakeoff.search.study import Draws, counts, finite, grid_order, open_study, run_study, seeded, values_drawn
from bakeoff.search.widen import into_new_region, outside, widened

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def recipe_values(variant, space: dict) -> dict:
    """The plain recipe's point of ``space``: the values params.yaml writes for the variant (its twin, trial 0)."""
    from dataclasses import fields

    train = {f.name for f in fields(variant.train)}
    return {k: getattr(variant.train, k) if k in train else variant.options.get(k) for k in space}


def with_recipe(space: dict, recipe: dict) -> dict:
    """``space`` with the recipe's value added to each list of choices that lacks it: trial 0, the plain recipe,
    is a point of every search, so the choice is never worse on validation than what params.yaml writes."""
    return {
        k: (
            {**spec, "choices": [recipe[k], *spec["choices"]]}
            if "choices" in spec and recipe.get(k) not in spec["choices"]
            else spec
        )
        for k, spec in space.items()
    }


def suggest(trial, name: str, spec: dict):
    if "choices" in spec:
        return trial.suggest_categorical(name, spec["choices"])
    kind = (
        trial.suggest_int
        if isinstance(spec["low"], int) and isinstance(spec["high"], int) and not spec.get("log")
        else trial.suggest_float
    )
    return kind(name, spec["low"], spec["high"], log=bool(spec.get("log")))


def pruning_callback(trial, noise_z: float = 2.0):
    """A TrainerCallback reporting each evaluation's loss to ``trial`` and stopping the run when Optuna prunes it
    beyond the paired noise (``bakeoff.search.pruning.PruningReport``)."""
    from bakeoff.search.pruning import PruningReport

    return PruningReport(trial, noise_z)


def search_variant(params: Params, name: str, dirs: SearchDirs, score_fn=None, log_trial=None) -> dict:
    """Run (or continue) the study of variant ``name``; return the record train@<name> reads.

    ``score_fn(variant, out_dir) → float``: the primary metric on the validation split, for ``objective: metric``.
    ``log_trial(number, values, result)``: called once per finished or pruned trial (the stage logs it to MLflow).
    """
    from bakeoff.data.raft import variant_rows
    from bakeoff.train.techniques import get_technique

    tc, v = params.tune, params.variant(name)
    space = tc.spaces.get(v.technique) or {}
    technique = get_technique(v.technique)
    rows, val = variant_rows(technique, v, dirs.data, params.retrieval.embedder, dirs.base)  # with passages, if set
    if not tc.trials or not space or not val:
        why = (
            "tune.trials is 0"
            if not tc.trials
            else f"tune.spaces has no {v.technique!r} space"
            if not space
            else f"{v.technique} has no validation rows to judge trials on"
        )
        return {"variant": name, "values": {}, "trials": [], "searched": space, "skipped": why}
    return VariantSearch(params, name, (technique, rows, val, space), dirs, score_fn, log_trial).run()


class VariantSearch:
    """One variant's study: each trial a short run of the shared training loop, pruned on validation loss, judged on
    the validation split; the recipe first, the range widened on the evidence in the second half."""

    def __init__(self, params: Params, name, arm: tuple, dirs: SearchDirs, score_fn, log_trial):
        """``arm``: the variant's technique, its training and validation rows, its space."""
        from bakeoff.core import runs
        from bakeoff.core.models import resolve_precision
        from bakeoff.search.space import objective_of

        technique, rows, val, space = arm
        self.tc, self.v, self.name, self.technique = params.tune, params.variant(name), name, technique
        self.rows, self.val, self.base_dir, self.data_dir = rows, val, dirs.base, dirs.data
        self.work_dir, self.score_fn, self.log_trial = dirs.work, score_fn, log_trial
        self.judged_by = objective_of(self.tc, self.v)
        self.direction = "minimize" if self.judged_by == "val_loss" else "maximize"
        self.rung = rung_steps(self.v, self.tc)
        self.recipe = recipe_values(self.v, space)
        self.space = with_recipe(space, self.recipe)
        self.study, self.storage = open_study(params, name, self.space, dirs, self.direction, self.rung)
        self.precision = resolve_precision(self.v.train.precision)
        self.parent = runs.variant_dir(self.v.parent) if self.v.parent else None

    def widen(self):
        """Under the study's lock, before a trial is drawn: the second half follows the evidence."""
        study, space, tc = self.study, self.space, self.tc
        every = study.get_trials(deepcopy=False)
        counted = [t for t in every if counts(t, every)]
        best = _best_finished(study, self.direction)
        if finite(space) or best is None or len(counted) < max(2, tc.trials // 2):
            return None
        before = study.user_attrs.get("widened") or []
        current, widenings = widened(study.user_attrs.get("space") or space, best.params, before)
        if len(widenings) == len(before):
            return None
        study.set_user_attr("space", current)
        study.set_user_attr("widened", widenings)
        return into_new_region(best.params, widenings[len(before) :], current)  # the next trial tries it

    def objective(self, trial):
        """One trial: the variant at the drawn values, trained at full length unless pruned, its score; inside its
        MLflow run where the stage opens one per trial (``log_trial.opened``)."""
        v, study = self.v, self.study
        current = study.user_attrs.get("space") or self.space
        values = {k: suggest(trial, k, spec) for k, spec in current.items()}
        values_drawn()
        tv = trial_variant(v, self.tc, values)
        opened = getattr(self.log_trial, "opened", None)
        with opened(trial.number, values) if opened else nullcontext({"callbacks": [], "result": {}}) as held:
            return self._trial(trial, v, tv, values, held)

    def _judged(self, trial, v, tv, rec: dict, out: Path) -> float:
        """A finished trial's value: the validation loss of the weights it ends on (its best evaluation's where the
        variant's run keeps those), or the task metric on validation; its curve noted on the trial."""
        losses = [p["loss"] for p in rec["val_curve"]]
        loss = (min(losses) if keeps_best(v) else losses[-1]) if losses else None
        value = loss if self.judged_by == "val_loss" else self.score_fn(tv, out / "model")
        trial.set_user_attr("would_stop_at", rec.get("would_stop_at"))
        trial.set_user_attr("val_curve", [{"step": p["step"], "loss": round(p["loss"], 5)} for p in rec["val_curve"]])
        return value

    def _trial(self, trial, v, tv, values: dict, held: dict):
        import optuna

        from bakeoff.train.trainer import Job, train

        out, study = Path(self.work_dir) / f"trial-{trial.number}", self.study
        result = held["result"] = {"state": "pruned"}
        t_start = time.perf_counter()
        kept = False
        try:
            job = Job(
                self.technique,
                tv,
                self.base_dir,
                out / "model",
                self.precision,
                out / "work",
                parent_dir=self.parent,
                judge_patience=v.train.early_stopping_patience,
                keep_best=keeps_best(v),
            )
            rec = train(
                job,
                self.rows,
                val_rows=self.val,
                extra_callbacks=[pruning_callback(trial, v.train.early_stopping_noise), *held["callbacks"]],
            )
            value = self._judged(trial, v, tv, rec, out)
            result.update(
                {
                    "state": "complete",
                    "value": value,
                    "tokens_seen": rec.get("tokens_seen"),
                    "val_curve": rec["val_curve"],
                }
            )
            kept = _keep_if_best(study, self.direction, value, out, rec, self.work_dir)
            return value
        except optuna.TrialPruned as e:  # the tokens it saw before the pruner stopped it still count
            result["tokens_seen"] = (getattr(e, "partial_metrics", None) or {}).get("tokens_seen")
            raise
        except Exception as e:  # out of memory, unsupported, a crash: this trial's result, not the study's end
            result.update(trial_failure(e))
            for k in ("status", "error", "peak_mb"):
                trial.set_user_attr(k, result[k])
            raise  # Optuna records the trial as failed (run_study catches it) and the study goes on
        finally:
            result["wall_s"] = round(time.perf_counter() - t_start, 1)
            trial.set_user_attr("tokens_seen", result.get("tokens_seen") or 0)
            trial.set_user_attr("wall_s", result["wall_s"])
            if self.log_trial and not getattr(self.log_trial, "opened", None):
                self.log_trial(trial.number, values, result)
            if not kept:
                shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(out / "work", ignore_errors=True)

    def run(self) -> dict:
        """The study's trials (across every worker), then the record: the choice, the recipe's trial, adoption."""
        tc, space, study, recipe = self.tc, self.space, self.study, self.recipe
        budget, budget_from = token_budget(tc, self.v)
        rec = run_study(
            study,
            self.objective,
            tc.trials,
            budget,
            Draws(
                self.storage,
                sampler_for=seeded(tc, space, self.rung),
                recipe=recipe,
                grid=grid_order(space, tc.seed, recipe) if finite(space) else None,
                propose=self.widen,
            ),
        )
        twin = next((t for t in rec["trials"] if t.get("recipe")), None)
        out = {
            "variant": self.name,
            "storage": self.storage.split("://")[0],
            "searched": study.user_attrs.get("space") or space,
            "space_written": space,
            "widened": outside(study.user_attrs.get("widened") or [], rec["trials"]),
            "objective": self.judged_by,
            "trial_steps": self.v.train.max_steps,
            "rung_steps": self.rung,
            **rec,
            **({"token_budget": budget, "token_budget_from": budget_from} if budget else {}),
        }
        if twin is not None:  # the floor: the plain recipe at full length, judged on validation like every trial
            out["recipe"] = {"values": recipe, "state": twin["state"], "value": twin.get("value")}
            out["beat_recipe"] = bool(rec.get("values")) and rec.get("best_trial") != twin["number"]
        adopt = adoptable(self.v, rec, Path(self.work_dir), self.data_dir, self.parent)
        return {**out, **({"adopt": adopt} if adopt else {})}


def trial_failure(e: BaseException) -> dict:
    """What a trial that raised leaves in its record: its status (``runs.classify``: oom, skipped or failed), the
    reason's first line, the tokens it trained and the peak memory it reached (MB; reserved CUDA memory on a GPU,
    resident memory on CPU), both from the trainer's partial measurement."""
    from bakeoff.core import runs

    status, reason = runs.classify(e)
    partial = getattr(e, "partial_metrics", None) or {}
    peaks = [partial[k] for k in ("train_peak_reserved_mb", "train_peak_rss_mb") if partial.get(k)]
    return {
        "state": status,
        "status": status,
        "error": reason.split("\n")[0][:500],
        "tokens_seen": partial.get("tokens_seen") or 0,
        "peak_mb": peaks[0] if peaks else None,
    }


def _keep_if_best(study, direction: str, value: float, out: Path, rec: dict, work_dir: Path) -> bool:
    """Keep this finished trial's model and record (``out``) when it is the best finished so far, dropping the one
    kept before: train@ can adopt it instead of training the same run again (``adoptable``)."""
    best = _best_finished(study, direction)
    if best is not None and not (value < best.value if direction == "minimize" else value > best.value):
        return False
    for old in Path(work_dir).glob("trial-*"):
        if old != out:
            shutil.rmtree(old, ignore_errors=True)
    from bakeoff.core import runs

    runs.write_json(out / "record.json", rec)
    return True


def keeps_best(v) -> bool:
    """Whether the variant's own run ends on its best evaluation's weights (it evaluates and stops early), and so
    its search's trials do too."""
    return bool(v.train.early_stopping_patience and v.train.eval_steps)


def adoptable(v, rec: dict, work_dir: Path, data_dir: Path, parent: Path | None) -> dict | None:
    """{trial, dir, fingerprint} when the chosen trial is the very run train@ would train: it finished at the full
    length, the variant's own early stopping would not have stopped it, it ended on the weights that run ends on
    (its best evaluation's, ``keeps_best``), and its model and record were kept. train@ adopts it when its fingerprint
    (bakeoff.search.space.run_identity, the data, the parent's run) matches; else it trains as usual."""
    from bakeoff.core import runs
    from bakeoff.core.records import read_run, read_stats
    from bakeoff.train.trainer import fingerprint

    if "best_trial" not in rec or v.train.seeds > 1 or v.train.processes > 1:
        return None
    trial = next(t for t in rec["trials"] if t["number"] == rec["best_trial"])
    folder = Path(work_dir) / f"trial-{trial['number']}"
    saved = runs.read_json(folder / "record.json")
    if not saved or trial.get("would_stop_at") is not None or not (folder / "model").exists():
        return None
    if keeps_best(v) != bool(saved.get("kept_best")) and saved["best_step"] != saved["stopped_at_step"]:
        return None  # the trial ended on other weights than the variant's own run would (a study from before)
    data_hash = read_stats(Path(data_dir) / "stats.json").data_hash or ""
    parent_run = read_run(runs.train_record(v.parent)).run_id if parent else None
    fp = fingerprint(run_identity(apply(v, rec["values"]), rec["values"]), data_hash, parent_run)
    return {"trial": trial["number"], "dir": str(folder), "fingerprint": fp}


def _best_finished(study, direction: str):
    """The best trial that ran to the full length (pruned ones stopped at a rung), or None."""
    import optuna

    done = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))]
    if not done:
        return None
    return (min if direction == "minimize" else max)(done, key=lambda t: t.value)

"""One arm's search as the tune stage runs it (``tune@<variant>``, ``tune_prompt@<baseline>``, ``tune_from@<variant>``):
the search (``bakeoff.search.trials``, ``bakeoff.search.prompt``) inside its MLflow run, each trial a child run, and
runs/<name>/tuned.json, which the arm's train or baseline stage reads. With ``tune.trials: 0`` it writes an empty
choice without loading torch; a search that cannot run is the arm's note, and the arm trains as written.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from bakeoff.core.errors import UserError
from bakeoff.core.records import LossPoint, Trial

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def tune_arm(params: Params, name: str) -> None:
    """The tune stage: this arm's search (or a note that it is off, or why it stopped), written to its tuned.json."""
    baseline = name in params.baselines
    if not baseline:
        params.variant(name)  # a clear error for a name that is neither
    from bakeoff.core import runs

    target = params.tune.share.get(name, name)
    if not params.tune.trials or (baseline and not params.baseline(name).search):
        why = "tune.trials is 0" if not params.tune.trials else f"baselines.{name} has no search"
        runs.write_json(
            runs.tuned_record(name), {"name": name, "values": {}, "trials": [], "status": "off", "skipped": why}
        )
        print(f"[{name}] not tuned: {why}")
        return
    try:
        rec = {"status": "ok", **(tune_prompt(params, name) if baseline else tune_one(params, name, target))}
    except UserError:
        raise
    except Exception as e:  # a search that cannot run is this arm's note, not the pipeline's end: it trains as written
        status, reason = runs.classify(e)
        rec = {
            "name": name,
            "values": {},
            "trials": [],
            "status": status,
            "error": reason,
            "skipped": f"the search stopped ({status}: {reason.splitlines()[0][:300]}): params.yaml's values stand",
        }
    runs.write_json(runs.tuned_record(name), rec)
    print(
        f"[{name}] {'shares ' + repr(target) + ': ' if target != name else ''}"
        f"{rec.get('skipped') or rec['values']} ({len(rec['trials'])} trials, {rec.get('n_pruned', 0)} pruned)"
    )


class TrialLog:
    """Each trial as an MLflow child run of the `<name>.tune` run. A training trial's run is opened before it trains
    (``opened``): MLflow's system metrics sampled while it runs, its training and validation loss logged at each step
    (``bakeoff.train.variant.live_curves``), its values as params, its score and state when it ends. A prompt's trial
    (no training) is logged when it ends (``log(number, values, result)``)."""

    def __init__(self, name: str):
        self.name = name

    def _tags(self, state: str) -> dict:
        return {"bakeoff.name": f"{self.name}.tune", "kind": "trial", "state": state}

    @staticmethod
    def _end(values: dict, result: dict, curves: bool) -> None:
        import mlflow

        from bakeoff.core import tracking

        t = Trial.from_json(result)
        mlflow.set_tag("state", t.state)
        tracking.log_metrics({k: result[k] for k in ("value", "tokens_seen", "wall_s") if k in result})
        if not curves:
            for point in map(LossPoint.from_dict, t.val_curve or []):
                tracking.log_metrics({"val_loss_during_training": point.loss}, step=point.step)

    def log(self, number: int, values: dict, result: dict) -> None:
        import mlflow

        t = Trial.from_json(result)
        with mlflow.start_run(run_name=f"{self.name} trial {number}", nested=True, tags=self._tags(t.state)):
            mlflow.log_params({k: str(v) for k, v in values.items()})
            self._end(values, result, curves=False)
        print(f"[{self.name}] trial {number}: {values} → {t.state} {'' if t.value is None else t.value}", flush=True)

    __call__ = log

    @contextmanager
    def opened(self, number: int, values: dict):
        """The trial's run, open while it trains; yields {"callbacks": [...], "result": {...}} for the trial to fill."""
        import mlflow

        from bakeoff.train.variant import live_curves

        held, stopped = {"callbacks": [], "result": {"state": "failed"}}, None
        with mlflow.start_run(
            run_name=f"{self.name} trial {number}", nested=True, tags=self._tags("running"), log_system_metrics=True
        ):
            mlflow.log_params({k: str(v) for k, v in values.items()})
            held["callbacks"] = live_curves()
            try:
                yield held
            except BaseException as e:  # pruned or failed: its state says so, and its run ends FINISHED all the same
                stopped = e
            self._end(values, held["result"], curves=bool(held["callbacks"]))
        result = held["result"]
        if stopped is not None:
            print(f"[{self.name}] trial {number}: {values} → {result['state']} {result.get('value', '')}", flush=True)
            raise stopped
        print(f"[{self.name}] trial {number}: {values} → {result['state']} {result.get('value', '')}", flush=True)


def trial_logger(name: str) -> TrialLog:
    return TrialLog(name)


def _summarise(rec: dict) -> None:
    from bakeoff.core import tracking

    tracking.set_tags({"chosen": rec.get("values"), "skipped": rec.get("skipped", "")})
    tracking.log_metrics({k: rec[k] for k in ("best_value", "tune_tokens", "tune_wall_s") if k in rec})


def tune_one(params: Params, name: str, target: str) -> dict:
    from bakeoff.core import runs, tracking
    from bakeoff.search import trials
    from bakeoff.search.space import SearchDirs, objective_of

    v = params.variant(target)
    logged = {
        "tune": {
            "trials": params.tune.trials,
            "trial_steps": params.tune.trial_steps,
            "objective": objective_of(params.tune, v),
            "pruner": params.tune.pruner,
            "space": params.tune.spaces.get(v.technique),
        },
        "shares": target,
    }
    with tracking.run(params, tracking.RunTags(f"{name}.tune", "tune", v.technique), logged):
        dirs = SearchDirs(runs.BASE, runs.PREPARED, runs.work_dir(f"{target}.tune"))
        rec = trials.search_variant(params, target, dirs, score_fn=val_metric(params), log_trial=trial_logger(name))
        _summarise(rec)
    return {**rec, "variant": name, **({"shared_from": target} if target != name else {})}


def tune_prompt(params: Params, name: str) -> dict:
    from bakeoff.core import runs, tracking
    from bakeoff.search import prompt
    from bakeoff.search.space import SearchDirs

    logged = {"tune": {"trials": params.tune.trials, "space": params.baseline(name).search}}
    with tracking.run(params, tracking.RunTags(f"{name}.tune", "tune", "prompting"), logged):
        rec = prompt.search_prompt(
            params,
            name,
            SearchDirs(runs.BASE, runs.PREPARED, runs.work_dir(f"{name}.tune")),
            log_trial=trial_logger(name),
        )
        _summarise(rec)
    return rec


def val_metric(params: Params):
    """``objective: metric``: the trial's model, served as the pipeline serves it, scored on the validation split."""

    def score_fn(variant, out_dir) -> float:
        from bakeoff.core import runs
        from bakeoff.core.models import load_tokenizer, resolve_precision
        from bakeoff.core.scoring import score
        from bakeoff.evaluate.generation import generate
        from bakeoff.evaluate.local import EvalInputs
        from bakeoff.train.techniques import get_technique

        inputs = EvalInputs.load(runs.PREPARED, params).as_asked(variant, params.retrieval.embedder)
        model = get_technique(variant.technique).load_for_eval(
            runs.BASE, out_dir, variant, resolve_precision(params.eval.dtype)
        )
        tok = load_tokenizer(runs.BASE)
        preds, _ = generate(model, tok, [e.messages for e in inputs.val], inputs.plan.decoding, desc="trial val")
        return score(params.task.metric, preds, [e.completion for e in inputs.val], inputs.plan.labels)[0]

    return score_fn

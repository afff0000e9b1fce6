"""MLflow: one experiment per task, one run per baseline and variant, the same metric names for all.

The store is, in order: ``MLFLOW_TRACKING_URI``; ``tracking.uri`` in params; an sqlite file at the repository
root addressed by an absolute URI, so every stage and every ``dvc exp run`` writes to the same store.
Open it with ``mlflow ui --backend-store-uri sqlite:///$(pwd)/mlflow.db``.

A name (``lora``, ``zero_shot``) can be run many times; the newest run of each name carries the tag
``bakeoff.latest=true`` and older ones are re-tagged ``false``, never deleted.

Each ``dvc repro`` ends in one parent run (the ``compare`` stage's ``repro …`` run, holding the report; made by
``bakeoff.report.publish``, the compare stage's alone): the current run of every arm (trained now or cached from
before) is nested under it, and every earlier run is tagged ``bakeoff.superseded=true`` and nested under its own
repro's parent, which is nested with runs from before parents existed under one ``earlier runs (superseded)``
holder: the experiment's top level shows the current answer and the holder, collapsed. The recommended run is
registered as a version of the model named after the experiment, alias ``champion``
(``models:/<experiment>@champion``: its weights or adapter, its evaluation records, its params). A variant's run
spans its train stage only (its Duration); the evaluate stage logs into it (``eval_stage_wall_s``).
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core.errors import UserError
from bakeoff.core.runs import git_commit, repo_root
from bakeoff.core.schema import without_secret

if TYPE_CHECKING:
    from bakeoff.core.sections import Params

LATEST = "bakeoff.latest"


def tracking_uri(params: Params | None = None) -> str:
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if params is not None and params.tracking.uri:
        return params.tracking.uri
    return f"sqlite:///{repo_root() / 'mlflow.db'}"


def experiment_name(params: Params) -> str:
    return params.tracking.experiment or params.task.name


def flatten(d: dict, prefix: str = "") -> dict[str, str]:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) and v:
            out.update(flatten(v, key))
        else:
            out[key] = json.dumps(v) if isinstance(v, (list, dict)) else str(v)
    return out


def params_hash(d: dict) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


class TrackingUnreachable(UserError):
    """The MLflow server the runs should go to does not answer."""


def check_reachable(uri: str, timeout: float = 10.0) -> None:
    """For a server URI, fail now (before any training) when the server does not answer its health check."""
    if not uri.startswith(("http://", "https://")):
        return
    import requests

    try:
        r = requests.get(uri.rstrip("/") + "/health", timeout=timeout)
        r.raise_for_status()
    except requests.RequestException as e:
        source = "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") == uri else "tracking.uri"
        raise TrackingUnreachable(
            f"MLflow tracking server {without_secret(uri)} (from {source}) is unreachable: {type(e).__name__}. Start "
            f"it (mlflow server --host ... --port ...), or unset {source} to log into mlflow.db here"
        ) from None


# MLflow 3 opens an experiment without this tag in its GenAI view (traces); bakeoff's runs are model development
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


def _setup(params: Params):
    import mlflow

    uri = tracking_uri(params)
    check_reachable(uri)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.set_experiment(experiment_name(params))
    if exp.tags.get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
        mlflow.MlflowClient().set_experiment_tag(exp.experiment_id, *EXPERIMENT_KIND)
    return exp


@dataclass(frozen=True)
class RunTags:
    """What an MLflow run is filed under: its bakeoff name (``lora``, ``zero_shot``, ``lora.tune``), its kind
    (``variant``, ``baseline``, ``tune``, ``repro``) and its technique (``-`` for none)."""

    name: str
    kind: str
    technique: str


@contextmanager
def run(
    params: Params,
    tags: RunTags,
    logged_params: dict,
    data_hash: str = "",
    system_metrics: bool = False,
    run_name: str | None = None,
):
    """Start a fresh MLflow run for ``tags.name`` and mark it the latest of that name; with ``system_metrics``,
    MLflow samples CPU, memory and (with a GPU) GPU utilisation and memory every 2 s into the run."""
    import mlflow

    if system_metrics:
        mlflow.set_system_metrics_sampling_interval(2)
        mlflow.set_system_metrics_samples_before_logging(1)

    exp = _setup(params)
    client = mlflow.MlflowClient()
    for old in client.search_runs([exp.experiment_id], filter_string=f"tags.`bakeoff.name` = '{tags.name}'"):
        client.set_tag(old.info.run_id, LATEST, "false")
    filed = {
        "bakeoff.name": tags.name,
        "kind": tags.kind,
        "technique": tags.technique,
        "git_commit": git_commit(),
        "data_hash": data_hash,
        "params_hash": params_hash(logged_params),
        LATEST: "true",
    }
    with mlflow.start_run(run_name=run_name or tags.name, tags=filed, log_system_metrics=system_metrics) as r:
        mlflow.log_params(flatten(logged_params))
        yield r


@contextmanager
def resume(params: Params, run_id: str | None, tags: RunTags, logged_params: dict):
    """Continue the run that training opened (train and evaluate of a variant share one run)."""
    import mlflow

    _setup(params)
    if run_id:
        try:
            mlflow.MlflowClient().get_run(run_id)
        except Exception:  # the store was reset or moved: start a new run rather than lose the results
            run_id = None
    if run_id is None:
        with run(params, tags, logged_params) as r:
            yield r
        return
    import time

    client = mlflow.MlflowClient()
    ended = client.get_run(run_id).info.end_time  # the train stage's end: the run's duration stays its own work
    t0 = time.time()
    with mlflow.start_run(run_id=run_id) as r:
        mlflow.set_tag("bakeoff.eval_started_ms", str(int(t0 * 1000)))
        yield r
        mlflow.log_metric("eval_stage_wall_s", round(time.time() - t0, 1))
    if ended:
        client.set_terminated(run_id, client.get_run(run_id).info.status, end_time=ended)


def opened_since(params: Params, name: str, t0: float) -> str | None:
    """The newest run filed under ``name`` that started at or after ``t0`` (seconds): the one a process opened before
    it was stopped, when it died before it could say which (a rank killed between opening its run and recording it)."""
    import mlflow

    exp = _setup(params)
    since = f"tags.`bakeoff.name` = '{name}' and attributes.start_time >= {int(t0 * 1000)}"
    found = mlflow.MlflowClient().search_runs(
        [exp.experiment_id], filter_string=since, order_by=["attributes.start_time DESC"], max_results=1
    )
    return found[0].info.run_id if found else None


@contextmanager
def child_run(name: str, tags: dict):
    """A run nested under the active one (a variant's extra training seed), shown beneath it in the UI."""
    import mlflow

    with mlflow.start_run(run_name=name, nested=True, tags={k: str(v) for k, v in tags.items()}) as r:
        yield r


def child_of(params: Params, parent_id: str, name: str, tags: dict, metrics: dict, ok: bool = True) -> str:
    """A finished child run under the finished run ``parent_id`` (a data-value curve's point under its arm's run),
    its numeric ``metrics`` logged, the parent left as it was; returns the child's id."""
    import mlflow

    _setup(params)
    client = mlflow.MlflowClient()
    exp = client.get_run(parent_id).info.experiment_id
    child = client.create_run(
        exp,
        run_name=name,
        tags={"mlflow.parentRunId": parent_id, "git_commit": git_commit(), **{k: str(v) for k, v in tags.items()}},
    )
    for k, v in metrics.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            client.log_metric(child.info.run_id, k, float(v))
    client.set_terminated(child.info.run_id, "FINISHED" if ok else "FAILED")
    return child.info.run_id


def log_to_run(run_id: str, metrics: dict, params: Params | None = None) -> None:
    """Numeric ``metrics`` into a finished run by id (a seed's test quality, scored by the evaluate stage; the
    export stage's re-scores). ``params``: point MLflow at the store first (outside an open run's stage)."""
    import mlflow

    if params is not None:
        _setup(params)
    client = mlflow.MlflowClient()
    for k, v in metrics.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            client.log_metric(run_id, k, float(v))


def log_splits(contexts: dict[str, str], folder: str = "data/prepared") -> None:
    """Each prepared split named in ``contexts`` (``{"train": "training", "val": "validation"}``) as a dataset input
    of the active run: its name, its file, a digest (SHA-256's first 16 hex digits) and its rows."""
    import mlflow
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    for split, context in contexts.items():
        if os.path.exists(path := f"{folder}/{split}.jsonl"):
            blob = Path(path).read_bytes()
            with warnings.catch_warnings():  # MLflow registers its local-file source twice ("" and file:) and says so
                warnings.filterwarnings("ignore", "The specified dataset source can be interpreted in multiple ways")
                source = resolve_dataset_source(path)
            ds = MetaDataset(source, name=split, digest=hashlib.sha256(blob).hexdigest()[:16])
            mlflow.log_input(ds, context=context, tags={"rows": str(blob.count(b"\n"))})


def log_metrics(metrics: dict, step: int | None = None) -> None:
    import mlflow

    numeric = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    mlflow.log_metrics(numeric, step=step)


def set_tags(tags: dict) -> None:
    """Tag the active run (values as text)."""
    import mlflow

    mlflow.set_tags({k: str(v) for k, v in tags.items()})


def mark(record: dict) -> None:
    """Tag the active run with the record's status (and its error, when there is one)."""
    import mlflow

    mlflow.set_tag("status", record["status"])
    if record.get("error"):
        mlflow.set_tag("error", record["error"][:5000])


def ui_url(params: Params, server: str = "http://127.0.0.1:5000") -> str:
    """The MLflow UI page of the task's runs table. MLflow 3 opens an experiment in its GenAI view (traces) unless
    the page asks for the model-training workflow, which the experiment-kind tag alone does not do in 3.17."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri(params))
    exp = mlflow.MlflowClient().get_experiment_by_name(experiment_name(params))
    page = f"#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning" if exp else "#/experiments"
    return f"{server.rstrip('/')}/{page}"


def mark_resumed(checkpoint: str) -> None:
    """Tag the active run as continued from ``checkpoint`` (a killed run resumed by the next ``dvc repro``)."""
    import mlflow

    mlflow.set_tag("bakeoff.resumed_from", checkpoint)

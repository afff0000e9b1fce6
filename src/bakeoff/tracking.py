"""MLflow: one experiment per task, one run per baseline and variant, the same metric names for all.

The store is, in order: ``MLFLOW_TRACKING_URI``; ``tracking.uri`` in params; an sqlite file at the repository
root addressed by an absolute URI, so every stage and every ``dvc exp run`` writes to the same store.
Open it with ``mlflow ui --backend-store-uri sqlite:///$(pwd)/mlflow.db``.

A name (``lora``, ``zero_shot``) can be run many times; the newest run of each name carries the tag
``bakeoff.latest=true`` and older ones are re-tagged ``false``, never deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager

from bakeoff.errors import UserError
from bakeoff.runs import git_commit, repo_root

LATEST = "bakeoff.latest"


def tracking_uri(params=None) -> str:
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if params is not None and params.tracking.uri:
        return params.tracking.uri
    return f"sqlite:///{repo_root() / 'mlflow.db'}"


def experiment_name(params) -> str:
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
            f"MLflow tracking server {uri} (from {source}) is unreachable: {type(e).__name__}. Start it "
            f"(mlflow server --host ... --port ...), or unset {source} to log into mlflow.db here") from None


# MLflow 3 opens an experiment without this tag in its GenAI view (traces); bakeoff's runs are model development
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


def _setup(params):
    import mlflow

    uri = tracking_uri(params)
    check_reachable(uri)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.set_experiment(experiment_name(params))
    if exp.tags.get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
        mlflow.MlflowClient().set_experiment_tag(exp.experiment_id, *EXPERIMENT_KIND)
    return exp


@contextmanager
def run(params, name: str, kind: str, technique: str, logged_params: dict, data_hash: str = "",
        system_metrics: bool = False):
    """Start a fresh MLflow run for ``name`` and mark it the latest of that name; with ``system_metrics``, MLflow
    samples CPU, memory and (with a GPU) GPU utilisation and memory every 2 s into the run."""
    import mlflow

    if system_metrics:
        mlflow.set_system_metrics_sampling_interval(2)
        mlflow.set_system_metrics_samples_before_logging(1)

    exp = _setup(params)
    client = mlflow.MlflowClient()
    for old in client.search_runs([exp.experiment_id], filter_string=f"tags.`bakeoff.name` = '{name}'"):
        client.set_tag(old.info.run_id, LATEST, "false")
    tags = {"bakeoff.name": name, "kind": kind, "technique": technique, "git_commit": git_commit(),
            "data_hash": data_hash, "params_hash": params_hash(logged_params), LATEST: "true"}
    with mlflow.start_run(run_name=name, tags=tags, log_system_metrics=system_metrics) as r:
        mlflow.log_params(flatten(logged_params))
        yield r


@contextmanager
def resume(params, run_id: str | None, name: str, kind: str, technique: str, logged_params: dict):
    """Continue the run that training opened (train and evaluate of a variant share one run)."""
    import mlflow

    _setup(params)
    if run_id:
        try:
            mlflow.MlflowClient().get_run(run_id)
        except Exception:  # the store was reset or moved: start a new run rather than lose the results
            run_id = None
    if run_id is None:
        with run(params, name, kind, technique, logged_params) as r:
            yield r
        return
    with mlflow.start_run(run_id=run_id) as r:
        yield r


@contextmanager
def child_run(name: str, tags: dict):
    """A run nested under the active one (a variant's extra training seed), shown beneath it in the UI."""
    import mlflow

    with mlflow.start_run(run_name=name, nested=True, tags={k: str(v) for k, v in tags.items()}) as r:
        yield r


def log_to_run(run_id: str, metrics: dict) -> None:
    """Numeric ``metrics`` into a finished run by id (a seed's test quality, scored by the evaluate stage)."""
    import mlflow

    client = mlflow.MlflowClient()
    for k, v in metrics.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            client.log_metric(run_id, k, float(v))


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


def ui_url(params, server: str = "http://127.0.0.1:5000") -> str:
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


def summary_run(params, names: list[str], tags: dict, metrics: dict, files: list, folders: dict,
                tables: dict | None = None) -> None:
    """The ``comparison`` run: the report's files and folders as artifacts, the verdict as tags and metrics,
    ``tables`` (artifact name → DataFrame) as MLflow tables the UI shows (``mlflow.log_table``)."""
    import mlflow

    with run(params, "comparison", "summary", "-", {"runs": names}):
        mlflow.set_tags(tags)
        for name, table in (tables or {}).items():
            mlflow.log_table(table, artifact_file=name)
        log_metrics(metrics)
        for p in files:
            mlflow.log_artifact(str(p))
        for dest, folder in folders.items():
            mlflow.log_artifacts(str(folder), dest)

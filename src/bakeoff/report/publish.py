"""The report in MLflow: the repro's parent run holding every report file, each current arm nested under it, and the
recommended run registered as the champion."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core import runs, tracking
from bakeoff.core.records import metric
from bakeoff.decide.evidence_record import Evidence
from bakeoff.decide.verdict_record import Recommendation

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def champion_of(params: Params, rec: Recommendation, evaluations: dict) -> dict | None:
    """Register the recommended run (its model with MLflow's transformers flavour, its records, params.yaml) as the
    champion (``bakeoff.report.champion``); ``evaluations``: each run's evaluation record (``Decision.evaluations``)."""
    from bakeoff.report import champion

    name = rec.run
    ev = evaluations.get(name) if name else None
    if not ev or not ev.run_id:
        return None
    dtype = metric(ev, "serving_dtype")
    if dtype not in ("fp32", "bf16", "fp16"):  # an endpoint baseline: no weights here to register
        print(f"MLflow: no champion registered: `{name}` is served by an endpoint, not weights here")
        return None
    files = {
        p.name: p
        for p in (
            runs.eval_record(name),
            runs.train_record(name),
            runs.tuned_record(name),
            runs.predictions(name),
            Path("params.yaml"),
        )
        if p.exists()
    }
    try:  # a store without a model registry, or a failed upload, leaves the report and the runs as they are
        return champion.register(params, name, ev.run_id, dtype, files)
    except Exception as e:
        print(f"MLflow: the champion was not registered ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
        return None


def to_mlflow(params: Params, d, paths: dict[str, Path], out: Path) -> None:
    """The repro's parent run with the report's files, every current arm nested under it, the champion."""
    from bakeoff.report import said

    v, names = said(d), list(d.runs["name"])
    interval = {"gain": v.gain, "ci_low": v.ci_low, "ci_high": v.ci_high}
    parent = summary_run(
        params,
        names,
        Summary(
            tags={
                "verdict": v.decision,
                "best_variant": v.variant or "",
                "best_baseline": v.baseline or "",
                "winners_chosen_on": v.chosen_on or "",
                "rank_groups": v.rank_groups,
                "recommendation": (v.recommendation or Recommendation()).line or "",
                "quick_look": str(bool(params.verdict.quick_look)).lower(),
            },
            metrics={**{k: x for k, x in interval.items() if x is not None}, **where_metrics(d.evidence)},
            files=list(paths.values()),
            folders={"plots": out / "plots", "flips": out / "flips"},
            tables={"pairwise.json": d.pairwise},
        ),
    )
    nested = nest_repro(params, parent, names)
    print(
        f"MLflow: repro run {parent}: {nested['current']} current runs under it, {nested['superseded']} newly "
        "tagged superseded"
    )
    champion = champion_of(params, v.recommendation or Recommendation(), d.evaluations)
    if champion:
        print(f"MLflow: models:/{champion['name']}@champion → version {champion['version']} ({champion['source']})")


def where_metrics(e: Evidence | None) -> dict[str, float]:
    """Where the gain comes from, as MLflow metrics: each arm's accuracy per field (``field_acc.<field>.<arm>``) and
    the recommended run's gap over the best prompt per field (``field_gap.<field>``); nothing for other tasks (their
    view is in metrics.json, an artifact of the same run)."""
    import re

    w = e.where if e else None
    if not w or w.kind != "fields":
        return {}

    def safe(key: str) -> str:  # a user's field name may hold characters MLflow refuses in a metric name
        return re.sub(r"[^\w\-. /]", "_", key)

    out = {safe(f"field_acc.{f}.{n}"): x for n, row in w.table.items() for f, x in row.items()}
    return {**out, **{safe(f"field_gap.{f}"): g for f, g in w.gaps.items()}}


def say(paths: dict[str, Path], verbose: bool) -> None:
    """The verdict and the recommendation on the console, then where the rest is (everything with verbose)."""
    md = paths["md"].read_text()
    if verbose:
        print(md)
        return
    after = md.split("## Verdict", 1)[-1].split("\n## ", 1)[0]
    paragraphs = [p.strip() for p in after.split("\n\n") if p.strip()]
    for p in paragraphs[:2]:
        print(f"[compare] {p}")
    print(f"[compare] the report: {paths['md']} ({paths['html']}: one page, plots inline)")


@dataclass
class Summary:
    """What the repro's parent run holds: the verdict as ``tags`` and ``metrics``, the report's ``files`` and
    ``folders`` (artifact folder → local folder) as artifacts, ``tables`` (artifact name → DataFrame) as MLflow tables
    the UI shows (``mlflow.log_table``)."""

    tags: dict
    metrics: dict
    files: list
    folders: dict
    tables: dict = field(default_factory=dict)


def summary_run(params: Params, names: list[str], summary: Summary) -> str:
    """The repro's parent run (``bakeoff.name`` ``comparison``, kind ``repro``) over the runs ``names``, holding
    ``summary``. Returns its run id (``nest_repro`` puts the arms under it)."""
    import datetime

    import mlflow

    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    with tracking.run(
        params,
        tracking.RunTags("comparison", "repro", "-"),
        {"runs": names},
        run_name=f"repro {runs.git_commit()[:7]} {when}",
    ) as r:
        mlflow.set_tags(summary.tags)
        for name, table in summary.tables.items():
            mlflow.log_table(table, artifact_file=name)
        tracking.log_metrics(summary.metrics)
        for p in summary.files:
            mlflow.log_artifact(str(p))
        for dest, folder in summary.folders.items():
            mlflow.log_artifacts(str(folder), dest)
    return r.info.run_id


SUPERSEDED = "bakeoff.superseded"
PARENT_TAG = "mlflow.parentRunId"


def nest_repro(params: Params, parent_id: str, names: list[str]) -> dict:
    """Put the current run of every arm in ``names`` (the newest of each ``bakeoff.name``, its ``.tune`` run too)
    under ``parent_id``, the run of this repro; tag every other top-level run superseded and nest it out of the way
    (under its own repro's parent, or one ``earlier runs`` holder). Nothing is deleted. Returns the counts."""
    import mlflow

    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(tracking.experiment_name(params))
    found = client.search_runs([exp.experiment_id], max_results=50000)
    wanted = set(names) | {f"{n}.tune" for n in names}
    current = {
        r.info.run_id
        for r in found
        if r.data.tags.get("bakeoff.name") in wanted
        and r.data.tags.get(tracking.LATEST) == "true"
        and r.data.tags.get("kind") not in ("trial", "seed")
    }
    parents = {r.info.run_id for r in found if r.data.tags.get("kind") == "repro"}
    nested = superseded = 0
    holder = None

    def supersede(rid: str, tags: dict) -> None:
        nonlocal superseded
        if tags.get(SUPERSEDED) != "true":
            client.set_tag(rid, SUPERSEDED, "true")
            superseded += 1

    for r in found:
        rid, tags = r.info.run_id, r.data.tags
        under = tags.get(PARENT_TAG)
        if rid == parent_id or tags.get("kind") == "superseded-holder":
            continue
        if rid in current:  # this repro's answer, trained now or cached from an earlier one
            if under != parent_id:
                client.set_tag(rid, PARENT_TAG, parent_id)
                nested += 1
            if tags.get(SUPERSEDED) == "true":
                client.set_tag(rid, SUPERSEDED, "false")
        elif rid in parents:  # an earlier repro: its arms stay under it, and it under the holder, collapsed
            supersede(rid, tags)
            if under is None:
                holder = holder or _holder(client, exp.experiment_id)
                client.set_tag(rid, PARENT_TAG, holder)
        elif under in current:  # a trial of a current search, a seed of a current variant
            continue
        elif under:  # nested under an earlier run: it stays there
            supersede(rid, tags)
        else:  # a top-level run of before parents existed, or an arm this repro no longer has
            supersede(rid, tags)
            holder = holder or _holder(client, exp.experiment_id)
            client.set_tag(rid, PARENT_TAG, holder)
    return {"nested": nested, "superseded": superseded, "current": len(current)}


def _holder(client, experiment_id: str) -> str:
    """The one run that earlier, parentless runs are nested under (created once)."""
    found = client.search_runs([experiment_id], filter_string="tags.kind = 'superseded-holder'", max_results=1)
    if found:
        return found[0].info.run_id
    r = client.create_run(
        experiment_id,
        run_name="earlier runs (superseded)",
        tags={"kind": "superseded-holder", SUPERSEDED: "true", tracking.LATEST: "false"},
    )
    client.set_terminated(r.info.run_id)
    return r.info.run_id

"""The report in MLflow: the repro's parent run holding every report file, each current arm nested under it, and the
recommended run registered as the champion."""

from __future__ import annotations

from pathlib import Path

from bakeoff.core import runs, tracking


def champion_of(params, rec: dict) -> dict | None:
    """Register the recommended run (its model with MLflow's transformers flavour, its records, params.yaml) as the
    champion (``bakeoff.report.champion``)."""
    from bakeoff.report import champion

    name = rec.get("run")
    ev = runs.read_json(runs.eval_record(name)) if name else None
    if not ev or not ev.get("run_id"):
        return None
    dtype = (ev.get("metrics") or {}).get("serving_dtype")
    if dtype not in ("fp32", "bf16", "fp16"):  # an endpoint baseline: no weights here to register
        print(f"MLflow: no champion registered: `{name}` is served by an endpoint, not weights here")
        return None
    files = {p.name: p for p in (runs.eval_record(name), runs.train_record(name), runs.tuned_record(name),
                                 runs.predictions(name), Path("params.yaml")) if p.exists()}
    try:  # a store without a model registry, or a failed upload, leaves the report and the runs as they are
        return champion.register(params, name, ev["run_id"], dtype, files)
    except Exception as e:
        print(f"MLflow: the champion was not registered ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
        return None


def to_mlflow(params, d, paths: dict[str, Path], out: Path) -> None:
    """The repro's parent run with the report's files, every current arm nested under it, the champion."""
    v, names = d.verdict, list(d.runs["name"])
    parent = tracking.summary_run(params, names,
                                  tags={"verdict": v["decision"], "best_variant": v.get("variant", ""),
                                        "best_baseline": v.get("baseline", ""),
                                        "winners_chosen_on": v.get("chosen_on", ""), "rank_groups": v["rank_groups"],
                                        "recommendation": (v["recommendation"] or {}).get("line", ""),
                                        "quick_look": str(bool(params.verdict.quick_look)).lower()},
                                  metrics={**{k: v[k] for k in ("gain", "ci_low", "ci_high") if k in v},
                                           **where_metrics(d.evidence)},
                                  files=list(paths.values()), folders={"plots": out / "plots", "flips": out / "flips"},
                                  tables={"pairwise.json": d.pairwise})
    nested = tracking.nest_repro(params, parent, names)
    print(f"MLflow: repro run {parent}: {nested['current']} current runs under it, {nested['superseded']} newly "
          "tagged superseded")
    champion = champion_of(params, v.get("recommendation") or {})
    if champion:
        print(f"MLflow: models:/{champion['name']}@champion → version {champion['version']} ({champion['source']})")


def where_metrics(e: dict | None) -> dict[str, float]:
    """Where the gain comes from, as MLflow metrics: each arm's accuracy per field (``field_acc.<field>.<arm>``) and
    the recommended run's gap over the best prompt per field (``field_gap.<field>``); nothing for other tasks (their
    view is in metrics.json, an artifact of the same run)."""
    import re

    w = (e or {}).get("where") or {}
    if w.get("kind") != "fields":
        return {}

    def safe(key: str) -> str:  # a user's field name may hold characters MLflow refuses in a metric name
        return re.sub(r"[^\w\-. /]", "_", key)

    out = {safe(f"field_acc.{f}.{n}"): x for n, row in w["table"].items() for f, x in row.items()}
    return {**out, **{safe(f"field_gap.{f}"): g for f, g in w["gaps"].items()}}


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

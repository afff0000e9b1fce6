"""The report: what the ``compare`` stage writes, from the decision (presentation only; may import ``core`` and
``decide``).

    reports/comparison.md, .csv   the table with intervals, the verdict, sizing, provenance   (tables.py)
    reports/metrics.json          DVC metrics: every run's figures, the verdict, provenance     (tables.py)
    reports/sizing.json           the memory model's calibration and every fit                  (here)
    reports/curve.json            the data-value curve: points, fits, back-tests, projections   (here; curve.py)
    reports/plots/*.png           quality against memory and time, loss curves, quality bars    (plots.py)
    where the gain comes from, answers side by side, the prompts sent                        (evidence.py)
    reports/comparison.html       the whole report on one self-contained page                   (html.py)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from bakeoff.core.records import BaseModel, DataStats, Generation, Provenance
from bakeoff.decide.run_record import rows_of
from bakeoff.decide.verdict_record import Recommendation, Scope
from bakeoff.report import curve as data_curve
from bakeoff.report.columns import worded_runs
from bakeoff.report.evidence import cost_plot_lines, prompt_lines, sample_lines, where_lines
from bakeoff.report.families import family_summary
from bakeoff.report.forgetting import forgetting
from bakeoff.report.glossary import glossary_lines
from bakeoff.report.html import html
from bakeoff.report.plots import pareto, plots
from bakeoff.report.searches import budget_lines
from bakeoff.report.sections import answer_lines, dpo_lines, pairwise_lines, verdict_lines
from bakeoff.report.shipped import endpoint_lines, shipped_lines
from bakeoff.report.sizing import sizing_lines, worded
from bakeoff.report.tables import Page, markdown, metrics_json, provenance_lines, write

if TYPE_CHECKING:
    from bakeoff.core.sections import Params
    from bakeoff.decide.curve_record import Curve
    from bakeoff.decide.shipped_record import Shipped
    from bakeoff.decide.sizing_record import AllIn, Money
    from bakeoff.decide.verdict_record import Verdict

__all__ = [
    "forgetting",
    "html",
    "markdown",
    "metrics_json",
    "pairwise_lines",
    "pareto",
    "plots",
    "provenance_lines",
    "sizing_lines",
    "verdict_lines",
    "write",
    "write_all",
]

VERDICT_KEYS = (
    "decision",
    "gain",
    "ci_low",
    "ci_high",
    "min_gain",
    "variant",
    "baseline",
    "rank_groups",
    "recommendation",
)


def warning_lines(stats: DataStats) -> list[str]:
    """What the data stage found that makes figures mislead: a generation budget that cuts reference answers."""
    warning = (stats.generation or Generation()).warning
    return [f"> **Warning:** {warning}.", ""] if warning else []


def opening_lines(
    params: Params, df: pd.DataFrame, v: Verdict, c: Money, costs: dict[str, AllIn] | None, stats: dict | None
) -> list[str]:
    """The report's first lines: a quick look's banner before anything (its answer is only that), then the four-row
    answer, then what the data stage found that makes figures mislead."""
    return quick_look_lines(params, df, v) + answer_lines(v, c, costs) + warning_lines(stats or DataStats())


def quick_look_lines(params: Params, df: pd.DataFrame, v: Verdict) -> list[str]:
    """A quick look says so first: what it ran, the interval that shows why it is only that, and the full command."""
    if not params.verdict.quick_look:
        return []
    n = df["n_test"].max() if "n_test" in df.columns and len(df) else None
    items = f"{n:.0f} test items" if n is not None and n == n else "its test items"
    lo, hi = v.ci_low, v.ci_high
    width = (
        f" The gain's 95% interval here is [{lo * 100:+.1f}, {hi * 100:+.1f}] points, {(hi - lo) * 100:.0f} "
        "points wide: with few test items an interval is wide, and more items narrow it."
        if lo is not None and hi is not None
        else ""
    )
    arms = ", ".join(f"`{x}`" for x in [*params.baselines, *params.variants])
    changed = params.verdict.quick_look_changes
    budget = f" Changed from your params for speed: {'; '.join(changed)}." if changed else ""
    return [
        (
            f"> **Quick look, not the full bake-off** (`make quick`): measured on {items} with {arms} only, "
            f"{searched(params.tune.trials)}.{budget}{width} The full bake-off, every technique with its full "
            "search: `make repro`."
        ),
        "",
    ]


def searched(trials: int) -> str:
    """How far a quick look searched (configs/quick.yaml's tune.trials)."""
    return f"each search {trials} trial{'s' if trials != 1 else ''}" if trials else "no search: each arm as written"


def caveats(df: pd.DataFrame, v: Verdict, prov: Provenance, searches: dict) -> list[str]:
    """At most three things a buyer must know before acting on the first screen: first, any run that did not
    finish (an endpoint that did not answer, an arm that ran out of memory), since the verdict is then on the rest;
    ``searches``: each run's search record (``Decision.searches``)."""
    out = []
    stopped = df[df["status"] != "ok"] if "status" in df.columns else df.iloc[0:0]
    if len(stopped):
        out.append(
            "No result from "
            + ", ".join(f"`{r.name}` ({r.status})" for r in rows_of(stopped))
            + "; the verdict is on the other runs (why: Runs that did not finish, below)."
        )
    unsearched = [(n, rec.status) for n in df["name"] if (rec := searches.get(n)) is not None and rec.stopped]
    if unsearched:
        out.append(
            "The search did not run for "
            + ", ".join(f"`{n}` ({s})" for n, s in unsearched)
            + ": those arms trained on params.yaml's values, unsearched (why: Searches and their budget)."
        )
    still = (v.recommendation or Recommendation()).still_improving or []
    if still:
        out.append(
            f"Still improving at max_steps: {', '.join(f'`{n}`' for n in still)}: their rank may change with "
            "more steps (raise `train_defaults.max_steps`)."
        )
    note = ((prov.base_model or BaseModel()).note or "").rstrip(".")
    scope = v.scope or Scope()
    if scope.model and scope.target:
        out.append(
            f"Quality was measured on `{scope.model}` only"
            + (f" ({note})" if note else "")
            + f"; at `{scope.target}` prompting may do far better, and no gain there was measured."
        )
    if v.decision == "inconclusive" and v.examples_needed:
        out.append(f"The gain is not established: about {v.examples_needed} test items would settle it.")
    return out[:3]


def said(d) -> Verdict:
    """The decision's verdict as the report writes it: its facts with their words (``report.verdict``)."""
    from bakeoff.report.verdict import worded

    return worded(d.verdict, worded_runs(d.runs, d.verdict.unmoved), d.costs)


def write_all(
    out_dir: Path, params: Params, d, images: dict[str, Path], shipped: Shipped | None = None
) -> dict[str, Path]:
    """Every report file of a ``Decision`` (``bakeoff.decide.decision``), each written once; returns their paths (for
    the summary MLflow run)."""
    df, v, c, sized = worded_runs(d.runs, d.verdict.unmoved), said(d), d.money, worded(d.sizing)
    prov, stats, pw = d.provenance, d.data_stats, d.pairwise
    curve = data_curve.worded(d.curve)
    costs = {n: x.to_dict() for n, x in d.costs.items()}
    extra = {
        "budget": {n: x.to_dict() for n, x in d.budget.items()},
        "costs": costs,
        "serve_card": d.serving_card.__dict__ if d.serving_card else None,
        "shipped": shipped.to_dict() if shipped is not None else None,
    }
    parents = {n: x.parent for n, x in params.variants.items() if x.parent}
    target = next(iter(d.costs.values())).target if d.costs else params.sizing.target
    middle = (
        cost_plot_lines(images, v.scope, target)
        + where_lines(d.evidence, v.scope)
        + pairwise_lines(pw, v.recommendation, images)
        + data_curve.lines(curve, images)
        + dpo_lines(df, pw, parents, d)
        + budget_lines(df, d.budget or {}, params.tune, curve, d.searches)
        + endpoint_lines(df)
        + shipped_lines(shipped, v.scope)
        + sample_lines(d.evidence, v.scope)
        + prompt_lines(d.evidence)
    )
    tail = (
        sizing_lines(params, sized, d.costs, images)
        + forgetting(list(df["name"]), df, images, d.evaluations)
        + glossary_lines()
        + provenance_lines(prov)
    )
    facts, summary = v.to_dict(), data_curve.summary(curve)
    record = {
        "quick_look": bool(params.verdict.quick_look),
        "provenance": prov.to_dict(),
        "curve": summary.to_dict() if summary else None,
        "verdict": {k: facts[k] for k in VERDICT_KEYS if k in facts},
        "families": family_summary(v.families),
        "costs": costs,
        "where": d.evidence.where.to_dict() if d.evidence and d.evidence.where else None,
    }
    head = (
        opening_lines(params, df, v, c, d.costs, stats)
        + verdict_lines(v, c, caveats(df, v, prov, d.searches))
        + data_curve.headline(curve, v.decision)
    )
    paths = write(df, params.task.metric, out_dir, Page(head, middle, tail, images, v.scope), extra=record)
    _write_data(out_dir, paths, pw, {**sized.to_dict(), "verdict": facts, "cost": c.to_dict(), **extra}, curve)
    return _html(paths, images)


def _write_data(out_dir: Path, paths: dict, pw, sizing: dict, curve: Curve | None) -> dict[str, Path]:
    """The report's data files beside the page: the pairwise tests, sizing.json and curve.json."""
    if pw is not None:
        paths["pairwise"] = out_dir / "pairwise.csv"
        pw.to_csv(paths["pairwise"], index=False)
    paths["sizing"] = out_dir / "sizing.json"
    paths["sizing"].write_text(json.dumps(sizing, indent=2, default=str))
    paths["curve"] = out_dir / "curve.json"  # a DVC output: written when the curve is off too, saying so
    paths["curve"].write_text(
        json.dumps(
            curve.to_dict()
            if curve is not None
            else {"status": "off", "reason": "curve.fractions is empty: no data-value curve"},
            indent=2,
            default=str,
        )
    )
    return paths


def _html(paths: dict, images: dict[str, Path]) -> dict[str, Path]:
    """The page as HTML beside its Markdown, its pictures inlined."""
    paths["html"] = paths["md"].parent / "comparison.html"
    paths["html"].write_text(html(paths["md"].read_text(), images))
    return paths

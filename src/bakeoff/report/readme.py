"""The README's figures of the committed run, written from ``reports/metrics.json`` and ``reports/clock.json`` so that
a refresh of the run cannot leave a stale number behind:

    python -m bakeoff.report.readme            # rewrites the marked block in README.md
    python -m bakeoff.report.readme --check    # exits 1 when the block differs from the records

``tests/test_docs.py`` runs the check."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bakeoff.core.clock_record import ClockRecord, ClockRun
from bakeoff.core.records import BaseModel
from bakeoff.decide.curve_record import ArmSummary, CurveSummary
from bakeoff.decide.metrics_record import MetricsFile
from bakeoff.decide.statistics import round_sig
from bakeoff.decide.verdict_record import Recommendation

BEGIN = (
    "<!-- results: written by `python -m bakeoff.report.readme` from reports/metrics.json and reports/clock.json -->"
)
END = "<!-- /results -->"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def _usd(lo: float, hi: float) -> str:
    return f"${round_sig(lo):,g}–{round_sig(hi):,g}"


def duration(seconds: float) -> str:
    """1 h 47 min, 52 min, 40 s."""
    m = round(seconds / 60)
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{m // 60} h {m % 60} min" if m >= 60 else f"{m} min"


def full_run(clock: ClockRecord) -> ClockRun | None:
    """The newest completed run of every stage, each run or restored from DVC's cache with most of them run (a run
    of a few stages, say the compare stage alone, is not one)."""
    runs = [
        r
        for r in clock.runs or []
        if r.completed
        and (r.stages_ran or 0) + (r.stages_restored or 0) == r.stages_planned
        and (r.stages_ran or 0) > (r.stages_restored or 0)
    ]
    most = max((r.stages_planned for r in runs), default=0)
    whole = [r for r in runs if r.stages_planned == most]
    return whole[-1] if whole else None


def block(metrics: MetricsFile, clock: ClockRecord) -> str:
    """The block's lines: the verdict with its interval, every run's test quality, the recommendation with its
    projected price, and how long the run took on which machine."""
    v, runs, prov = metrics.verdict, metrics.runs or {}, metrics.provenance
    rec = v.recommendation or Recommendation()
    src = prov.base_model or BaseModel()
    base = src.alias or (src.source if src.has("source") else "the base")
    head = (
        f"**The committed run** (`reports/comparison.md`; the default task's test split, base `{base}`, "
        f"measured on {prov.device}):"
    )
    lines = [BEGIN, "", head, ""]
    lines.append(
        f"- Verdict **{v.decision}**: `{v.variant}` (best on validation) against `{v.baseline}` "
        f"(the best prompt), {_pts(v.gain)} points, 95% interval [{_pts(v.ci_low)}, "
        f"{_pts(v.ci_high)}], against a minimum gain of {100 * v.min_gain:.0f} points."
    )
    scored = [(n, r) for n, r in runs.items() if r.status == "ok"]
    others = [f"`{n}` {r.status}" for n, r in runs.items() if r.status != "ok"]
    lines.append(
        "- Test quality ("
        + metrics.metric
        + "): "
        + ", ".join(f"`{n}` {_pct(r.quality)}" for n, r in scored)
        + (f"; {', '.join(others)}" if others else "")
        + "."
    )
    run = rec.run
    cost = (metrics.costs or {}).get(run) if run else None
    if run and cost:
        why = (
            ""
            if run == v.variant
            else f", the lowest projected cost among the runs the test split cannot tell apart from `{v.variant}`"
        )
        lines.append(
            f"- Recommended: **{rec.action or 'fine-tune'} with `{run}`**{why}; projected to "
            f"`{cost.target}`, not measured: {_usd(*cost.alone)} all in on an {cost.card} (training "
            f"and its whole search)."
        )
    elif run:
        lines.append(f"- Recommended: **{rec.action}** with `{run}`.")
    lines += curve_lines(metrics.curve)
    return "\n".join([*lines, *clock_lines(clock), "", END])


def clock_lines(clock: ClockRecord) -> list[str]:
    """How long the committed `make repro` took, on which machine (``reports/clock.json``)."""
    whole = full_run(clock)
    if not whole:
        return []
    restored = whole.stages_restored or 0
    what = (
        f"({whole.stages_ran} stages run, {restored} restored from DVC's cache)"
        if restored
        else "of every stage and every search"
    )
    return [f"- `make repro` {what} took {duration(whole.actual_total_s)} on {whole.machine} (`reports/clock.json`)."]


def curve_lines(c: CurveSummary | None) -> list[str]:
    """The data-value curve in one line: the projection at twice the rows, or why none is given."""
    arms = [a for a in ((c.arms if c else None) or {}).values() if a.status == "ok"]
    if not arms:
        return []
    if not c.reliable:
        missed = ", ".join(
            f"`{a.run}` predicted {_pct(a.quality[-1] + a.backtest_error)}, measured {_pct(a.quality[-1])}"
            for a in arms
            if not a.backtest_inside and a.backtest_error is not None
        )
        return [f"- More data: the data-value curve's back-test missed ({missed}), so the report gives no projection."]

    def one(a: ArmSummary) -> str:
        measured = f"`{a.run}` measured {', '.join(_pct(q) for q in a.quality)} at {a.rows[0]:,}–{a.rows[-1]:,} rows"
        d = a.last_doubling
        if not d:  # a record without the last doubling's interval: its points only, nothing fitted
            return measured
        if d.cannot_tell:
            return (
                f"{measured}; the last doubling bought nothing measurable ({_pts(d.diff)} points "
                f"[{_pts(d.ci[0])}, {_pts(d.ci[1])}])"
            )
        spread = a.projected_2x_spread or []
        forms = f", {_pct(spread[0])}–{_pct(spread[1])} across forms" if len(spread) == 2 else ""
        return (
            f"{measured}; projected at twice the rows {_pct(a.projected_2x)} [{_pct(a.projected_2x_ci[0])}, "
            f"{_pct(a.projected_2x_ci[1])}]{forms} ({_pts(a.projected_2x - a.quality[-1])} points over "
            "the measured, assuming the extra rows are trained on at the same epochs)"
        )

    grew = [a for a in arms if a.last_doubling and not a.last_doubling.cannot_tell]
    later = c.verdict_at_2x.decision if c.verdict_at_2x else None
    return [
        "- More data (the data-value curve): "
        + "; ".join(one(a) for a in arms)
        + (f"; projected verdict with twice the training rows **{later}**" if later and len(grew) == len(arms) else "")
        + "."
    ]


def rewrite(readme: str, metrics: MetricsFile, clock: ClockRecord) -> str:
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md has no block between {BEGIN!r} and {END!r}")
    head, rest = readme.split(BEGIN, 1)
    return head + block(metrics, clock) + rest.split(END, 1)[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when README.md's block is stale")
    ap.add_argument("--root", type=Path, default=Path("."))
    a = ap.parse_args(argv)
    path = a.root / "README.md"
    metrics = MetricsFile.from_dict(json.loads((a.root / "reports/metrics.json").read_text()))
    clock = ClockRecord.from_dict(json.loads((a.root / "reports/clock.json").read_text()))
    old = path.read_text()
    new = rewrite(old, metrics, clock)
    if a.check:
        if new != old:
            print(
                "README.md: the committed run's figures are stale; run: python -m bakeoff.report.readme",
                file=sys.stderr,
            )
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The data-value curve in the report: one sentence under the verdict, a section with the points, the fit, its
back-test and the projections (its plot: ``bakeoff.report.plots``; presentation only)."""

from __future__ import annotations

from bakeoff.decide.curve_record import Arm, ArmSummary, Backtest, Curve, CurveSummary, Point
from bakeoff.report.tables import details, image

# how a curve arm's run was chosen (``bakeoff.decide.decision.curve_arm``); an older record holds the words already
CHOSEN_AS = {
    "best_prompt": "the best prompting baseline on validation",
    "named": "named in curve.arms",
    "recommended": "the recommended variant",
    "best_variant": "the best fine-tuned variant on validation, as the recommendation is not to fine-tune",
}
WHERE = {
    "smallest": "from the smallest size",
    "measured": "in the measured range",
    "projected": "beyond the measured range (a projection)",
}  # where the fine-tuned arm passes the prompt


def _worded_point(p: Point) -> Point:
    if p.status != "stale":
        return p
    return p.with_(status=f"stale (drawn for `{p.drawn_for}`)").without("drawn_for")


def _worded_arm(key: str, a: Arm) -> Arm:
    if a.chosen_as in CHOSEN_AS:
        a = a.with_(chosen_as=CHOSEN_AS[a.chosen_as])
    elif str(a.chosen_as or "").startswith("no_recommendation"):
        a = a.with_(chosen_as="no recommendation to draw" + a.chosen_as.removeprefix("no_recommendation"))
    if a.has("missing"):
        why = f"no finished run for `{key}`" if a.missing == "no_run" else f"`{a.run}` did not finish"
        a = a.renamed("missing", "reason", why)
    if a.status == "too few points" and not a.has("reason"):
        a = a.with_(reason="no smaller share finished: nothing to fit")
    a = a.with_(points=[_worded_point(p) for p in a.points or []])
    b = a.backtest
    if b and b.has("sizes"):
        a = a.with_(backtest=b.renamed("sizes", "reason", f"{b.sizes} sizes: a back-test needs 3 or more"))
    if a.projection:
        a = a.with_(
            projection=[
                p.with_(gain_from="the largest measured point") if p.gain_from == "largest_point" else p
                for p in a.projection
            ]
        )
    return a


def worded(curve: Curve | None) -> Curve | None:
    """The data-value curve (``bakeoff.decide.data_value``) as the report writes it (its page, reports/curve.json):
    each code with its words."""
    if not curve or not curve.arms:
        return curve
    out = curve.with_(arms={k: _worded_arm(k, a) for k, a in curve.arms.items()})
    if out.crossover and out.crossover.where in WHERE:
        out = out.with_(crossover=out.crossover.with_(where=WHERE[out.crossover.where]))
    return out


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def _ci(ci, points: bool = False) -> str:
    if not ci:
        return ""
    return f" [{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]" if points else f" [{ci[0] * 100:.1f}, {ci[1] * 100:.1f}]"


def _miss_words(a: Arm) -> str:
    b = a.backtest
    if not b.has("error"):
        return f"`{a.run}`: {b.reason or 'no back-test'}"
    return (
        f"fitted on its smaller shares, `{a.run}` was predicted at {b.predicted:.1%} for its "
        f"{a.rows[-1]:,} rows and measured {b.observed:.1%} (error {b.error * 100:+.1f} points, 95% "
        f"interval{_ci(b.error_ci, True)})"
    )


def accepts_words(b: Backtest) -> str:
    """What the back-test could tell: the band it would accept, and whether "no gain" lay in it too."""
    band = b.accepts
    if not band:
        return ""
    said = f" (it would accept {band[0]:.1%}–{band[1]:.1%}, the observed point's 95% interval"
    if b.flat_accepted:
        said += f"; no gain from the last size, {b.flat:.1%}, lies in it too: it cannot tell flat from growth"
    return said + ")"


def doubling_words(a: Arm) -> str:
    """The last doubling as measured: "bought nothing measurable" when its interval holds 0."""
    d = a.last_doubling
    if not d:
        return ""
    said = (
        f"`{a.run}`: the last doubling ({d.rows[0]:,} → {d.rows[1]:,} rows) "
        f"{'bought nothing measurable' if d.cannot_tell else 'measured'} ({d.diff * 100:+.1f} points, "
        f"95% interval{_ci(d.ci, True)})"
    )
    if d.cannot_tell and d.ci:
        said += f"; the data cannot tell flat from {d.ci[1] * 100:+.1f} points per doubling"
    return said


def projection_words(a: Arm) -> str:
    """One arm at 2×: the primary form's figure, the interval across every form, the forms' spread, the gain over
    the largest measured point."""
    p = a.projection[0]
    spread = p.spread
    forms = (
        f", {spread[0]:.1%}–{spread[1]:.1%} across {len(p.forms or {})} forms"
        if spread and spread[0] != spread[1]
        else ""
    )
    return (
        f"`{a.run}` is projected at {p.quality:.1%}{_ci(p.ci)}{forms} ({p.gain * 100:+.1f} points "
        f"over its measured {a.quality[-1]:.1%}{_ci(p.gain_ci, True)})"
    )


def headline(curve: Curve | None, decision: str | None) -> list[str]:
    """One sentence under the verdict: for each arm, what the last doubling bought as measured, and, only where it
    bought something measurable, what twice the data is projected to buy; or why no projection is given."""
    if not curve:
        return []
    ok = curve.fitted()
    if not ok:
        why = "; ".join(f"`{k}`: {a.reason or a.status}" for k, a in curve.arms.items())
        return [f"**More data** (the data-value curve): not drawn ({why}).", ""]
    n_items = next(iter(ok.values())).n_items
    if not curve.reliable:
        missed = [a for a in ok.values() if not a.backtest.inside]
        return [
            (
                "**More data**: the data-value curve is **unreliable on this task**, so no projection is given: "
                + "; ".join(_miss_words(a) for a in missed)
                + ", outside the observed point's 95% interval "
                "(details: What more data would buy)."
            ),
            "",
        ]
    flat = [a for a in ok.values() if a.last_doubling and a.last_doubling.cannot_tell]
    grew = [a for a in ok.values() if a not in flat]
    parts = [doubling_words(a) for a in flat] + [projection_words(a) for a in grew]
    rows = next(iter(ok.values())).projection[0].rows
    later = curve.verdict_at_2x
    verdict = ""
    if later and later.decision and not flat:
        same = later.decision == decision
        verdict = (
            f"; the verdict would {'not change' if same else 'change to **' + later.decision + '**'} "
            f"(gain {later.gain * 100:+.1f} points{_ci(later.gain_ci, True)})"
        )
    points = min(a.n_points for a in ok.values())
    lead = (
        "**More data** (measured"
        + (
            f"; projected to twice the training rows, {rows:,}, assuming they are trained on at the same epochs"
            if grew
            else ""
        )
        + "): "
    )
    return [
        (
            lead
            + "; ".join(parts)
            + verdict
            + f". Measured at {points} sizes per arm"
            + (f", intervals over the {n_items} test items" if n_items else "")
            + "; the back-test (the smaller sizes predicting the full one) held for every arm."
        ),
        "",
    ]


def _arm_summary(a: Arm) -> ArmSummary:
    if not a.ok:
        return ArmSummary.from_dict({"run": a.run, "status": a.status})
    p, b = a.projection[0], a.backtest
    return ArmSummary.from_dict(
        {
            "run": a.run,
            "status": "ok",
            "rows": a.rows,
            "quality": a.quality,
            "projected_2x": p.quality,
            "projected_2x_ci": p.ci,
            "projected_2x_spread": p.spread,
            "gain_2x_over_measured": p.gain,
            "last_doubling": a.last_doubling,
            "backtest_error": b.error,
            "backtest_inside": b.inside,
            "backtest_accepts": b.accepts,
        }
    )


def summary(curve: Curve | None) -> CurveSummary | None:
    """The curve in reports/metrics.json: each arm's projection at 2× and back-test, whether they hold."""
    if not curve:
        return None
    return CurveSummary.from_dict(
        {
            "reliable": curve.reliable,
            "backtest_mae": curve.backtest_mae,
            "arms": {key: _arm_summary(a) for key, a in curve.arms.items()},
            "crossover": curve.crossover,
            "verdict_at_2x": curve.verdict_at_2x,
        }
    )


def crossover_words(curve: Curve) -> str | None:
    c = curve.crossover
    if not c:
        return None
    share = f" (in {c.share_of_resamples:.0%} of the resamples)" if c.share_of_resamples is not None else ""
    ci = f" [{c.rows_ci[0]:,}, {c.rows_ci[1]:,}]" if c.rows_ci else ""
    if c.where == "never":
        return f"Fine-tuning does not pass the prompt up to {c.searched_up_to_rows:,} rows on the fitted curves."
    if c.where == "from the smallest size":
        return f"Fine-tuning leads the prompt from the smallest size measured, {c.rows:,} rows{share}."
    kind = "a projection" if "beyond" in c.where else "measured range"
    return f"Fine-tuning passes the prompt at about {c.rows:,} training rows{ci} ({kind}){share}."


def lines(curve: Curve | None, images: dict | None) -> list[str]:
    """The section: each arm's points with their intervals, the fit, the back-test, the projections."""
    if not curve or not curve.arms:
        return []
    out = [
        "## What more data would buy (the data-value curve)",
        "",
        (
            "Each arm again on nested, label-stratified shares of the training split (the same rows on every rerun), "
            "at its searched values (`curve.schedule`: the same epochs, or its own steps), scored on the same test "
            "split; the full size is the arm's own run, each point one training run. Intervals: 95%, bootstrap over "
            "test items. 2× and 4× are **projections** of three fitted forms, assuming the extra rows are trained on "
            "at the same epochs: the interval spans every form's, and the gain is over the largest measured point."
        ),
        "",
    ]
    for key, a in curve.arms.items():
        if not a.ok:
            out += [f"- `{key}` ({a.run or 'none'}): {a.reason or a.status}", ""]
            continue
        out += arm_lines(a, bool(curve.reliable))
    said = crossover_words(curve) if curve.reliable else None
    if said:
        out += [said, ""]
    out += image(images, "curve", "quality against training rows, measured and projected")
    out += details(
        "How the curve is fitted",
        [
            (
                "Three forms: q(n) = 1 − a·(n/N)^−b (a ceiling fixed at 100%; the primary form with fewer than 5 "
                "sizes), q(n) = c − a·(n/N)^−b (its own ceiling c ≤ 100%; primary with 5 or more) and q(n) = c + "
                "a·log2(n/N) (the same points for every doubling); a ≥ 0, so a curve cannot fall with more data. Each "
                "bootstrap resample draws the test items once for every size and arm and refits: the intervals hold "
                "the test split's noise, not a training run's seed-to-seed spread (each point is one run). A "
                "projection's interval spans every form's. The back-test fits the primary form without the largest "
                "size and predicts it; a prediction outside the observed point's 95% interval (Clopper–Pearson for a "
                "0/1 score) withholds the projections. Every point: reports/curve.json."
            )
        ],
    )
    return out


def cut_short_lines(a: Arm) -> list[str]:
    """The caveat for smaller shares still improving when a schedule shorter than the arm's own run stopped them."""
    own = next((p.train_steps for p in a.points or [] if p.own_run), None)
    still = [
        f"{p.share:g} ({p.train_steps} steps)"
        for p in a.points or []
        if p.convergence == "still improving" and not p.own_run and own and (p.train_steps or 0) < own
    ]  # cut shorter than the arm's own run
    return (
        [
            (
                f"Still improving at its last step: {', '.join(still)}: these shares trained fewer steps than "
                "the arm's own run, so the schedule, not only the data, held them down and the curve may overstate "
                "what more data buys (`curve.schedule: steps` trains every share the arm's own steps)."
            )
        ]
        if still
        else []
    )


def arm_lines(a: Arm, reliable: bool) -> list[str]:
    """One arm: its fit and back-test in a sentence, then its sizes (and, where the back-tests held, projections)."""
    rows = [f"| {n:,} | {q:.1%}{_ci(ci)} |" for n, q, ci in zip(a.rows, a.quality, a.quality_ci)]
    if reliable:
        rows += [
            f"| {p.rows:,} (×{p.multiple}, projected) | {a.form} {p.quality:.1%}; every form {_ci(p.ci).strip()} |"
            for p in a.projection
        ]
    if reliable:
        rows += [
            f"| {p.rows:,} (×{p.multiple}, projected) | {fm} {x.quality:.1%}{_ci(x.ci)} |"
            for p in a.projection
            for fm, x in (p.forms or {}).items()
            if fm != a.form
        ]
    b = a.backtest
    back = (
        (
            f"back-test: predicted {b.predicted:.1%} at {a.rows[-1]:,} rows from the smaller sizes, "
            f"measured {b.observed:.1%}, error {b.error * 100:+.1f} points: "
            f"**{'inside' if b.inside else 'outside'}**{accepts_words(b)}"
        )
        if b.has("error")
        else (b.reason if b.has("reason") else "")
    )
    ci = a.exponent_ci
    exp = f"exponent {a.exponent:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
    gain = (
        f", at 2× {a.gain_per_doubling * 100:+.1f} points over the measured {a.quality[-1]:.1%}"
        f"{_ci(a.gain_per_doubling_ci, True)} across forms"
        if reliable
        else ""
    )
    last = doubling_words(a)
    caveat = cut_short_lines(a)
    return [
        f"**`{a.run}`** ({a.chosen_as}; scored by {a.figure}): {a.form} fit, {exp}{gain}; {back}.",
        "",
        *([f"Measured: {last}.", ""] if last else []),
        *caveat,
        *([""] if caveat else []),
        "| training rows | quality |",
        "|---|---|",
        *rows,
        "",
    ]

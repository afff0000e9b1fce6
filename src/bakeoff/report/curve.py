"""The data-value curve in the report: one sentence under the verdict, a section with the points, the fit, its
back-test and the projections (its plot: ``bakeoff.report.plots``; presentation only)."""

from __future__ import annotations

from bakeoff.report.tables import details, image


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def _ci(ci, points: bool = False) -> str:
    if not ci:
        return ""
    return f" [{ci[0] * 100:+.1f}, {ci[1] * 100:+.1f}]" if points else f" [{ci[0] * 100:.1f}, {ci[1] * 100:.1f}]"


def _miss_words(a: dict) -> str:
    b = a["backtest"]
    if "error" not in b:
        return f"`{a['run']}`: {b.get('reason', 'no back-test')}"
    return (f"fitted on its smaller shares, `{a['run']}` was predicted at {b['predicted']:.1%} for its "
            f"{a['rows'][-1]:,} rows and measured {b['observed']:.1%} (error {b['error'] * 100:+.1f} points, 95% "
            f"interval{_ci(b['error_ci'], True)})")


def _resolution(b: dict) -> str:
    """Why a back-test whose bare interval leaves out 0 is still inside: within half a test item of it."""
    ci, r = b.get("error_ci"), b.get("resolution") or 0.0
    if b.get("inside") and ci and not ci[0] <= 0 <= ci[1]:
        return (f" (within half a test item, {r * 100:.2f} points, of 0: the smallest difference this test split "
                "can show)")
    return ""


def headline(curve: dict | None, decision: str | None) -> list[str]:
    """One sentence under the verdict: what twice the data is projected to buy each arm and whether the verdict would
    change, or why no projection is given."""
    if not curve:
        return []
    ok = {k: a for k, a in curve["arms"].items() if a.get("status") == "ok"}
    if not ok:
        why = "; ".join(f"`{k}`: {a.get('reason') or a.get('status')}" for k, a in curve["arms"].items())
        return [f"**More data** (the data-value curve): not drawn ({why}).", ""]
    n_items = next(iter(ok.values())).get("n_items")
    if not curve.get("reliable"):
        missed = [a for a in ok.values() if not a["backtest"].get("inside")]
        return [("**More data**: the data-value curve is **unreliable on this task**, so no projection is given: "
                 + "; ".join(_miss_words(a) for a in missed) + ", outside its interval (details: What more data would "
                 "buy)."), ""]
    parts = []
    for a in ok.values():
        p = a["projection"][0]
        parts.append(f"`{a['run']}` is projected at {p['quality']:.1%}{_ci(p['ci'])} ({p['gain'] * 100:+.1f} points"
                     f"{_ci(p['gain_ci'], True)})")
    rows = next(iter(ok.values()))["projection"][0]["rows"]
    later = curve.get("verdict_at_2x") or {}
    verdict = ""
    if later.get("decision"):
        same = later["decision"] == decision
        verdict = (f"; the verdict would {'not change' if same else 'change to **' + later['decision'] + '**'} "
                   f"(gain {later['gain'] * 100:+.1f} points{_ci(later['gain_ci'], True)})")
    points = min(a["n_points"] for a in ok.values())
    return [(f"**More data** (a projection, not measured): with twice the training rows ({rows:,}), "
             + "; ".join(parts) + verdict + f". Fitted on {points} measured sizes per arm"
             + (f", intervals over the {n_items} test items" if n_items else "")
             + "; the back-test (the smaller sizes predicting the full one) held for every arm."), ""]


def summary(curve: dict | None) -> dict | None:
    """The curve in reports/metrics.json: each arm's projection at 2× and back-test, whether they hold."""
    if not curve:
        return None
    arms = {}
    for key, a in curve["arms"].items():
        if a.get("status") != "ok":
            arms[key] = {"run": a.get("run"), "status": a.get("status")}
            continue
        p, b = a["projection"][0], a["backtest"]
        arms[key] = {"run": a["run"], "status": "ok", "rows": a["rows"], "quality": a["quality"],
                     "projected_2x": p["quality"], "projected_2x_ci": p["ci"], "gain_per_doubling": p["gain"],
                     "backtest_error": b.get("error"), "backtest_inside": b.get("inside")}
    return {"reliable": curve.get("reliable"), "backtest_mae": curve.get("backtest_mae"), "arms": arms,
            "crossover": curve.get("crossover"), "verdict_at_2x": curve.get("verdict_at_2x")}


def crossover_words(curve: dict) -> str | None:
    c = curve.get("crossover")
    if not c:
        return None
    share = f" (in {c['share_of_resamples']:.0%} of the resamples)" if c.get("share_of_resamples") is not None else ""
    ci = f" [{c['rows_ci'][0]:,}, {c['rows_ci'][1]:,}]" if c.get("rows_ci") else ""
    if c["where"] == "never":
        return f"Fine-tuning does not pass the prompt up to {c['searched_up_to_rows']:,} rows on the fitted curves."
    if c["where"] == "from the smallest size":
        return f"Fine-tuning leads the prompt from the smallest size measured, {c['rows']:,} rows{share}."
    kind = "a projection" if "beyond" in c["where"] else "measured range"
    return f"Fine-tuning passes the prompt at about {c['rows']:,} training rows{ci} ({kind}){share}."


def lines(curve: dict | None, images: dict | None) -> list[str]:
    """The section: each arm's points with their intervals, the fit, the back-test, the projections."""
    if not curve or not curve.get("arms"):
        return []
    out = ["## What more data would buy (the data-value curve)", "",
           ("Each arm again on nested, label-stratified shares of the training split (the same rows on every rerun), "
            "at its searched values (`curve.schedule`: its own steps, or the same epochs), scored on the same test "
            "split; the full size is the arm's own run. Intervals: 95%, bootstrap over test items. 2× and 4× are "
            "**projections** of the fitted curve."),
           ""]
    for key, a in curve["arms"].items():
        if a.get("status") != "ok":
            out += [f"- `{key}` ({a.get('run') or 'none'}): {a.get('reason') or a.get('status')}", ""]
            continue
        out += arm_lines(a, bool(curve.get("reliable")))
    said = crossover_words(curve) if curve.get("reliable") else None
    if said:
        out += [said, ""]
    out += image(images, "curve", "quality against training rows, measured and projected")
    out += details("How the curve is fitted", [(
        "q(n) = 1 − a·(n/N)^−b (the error falls as a power of the rows) with fewer than 5 sizes, q(n) = c − a·(n/N)^−b "
        "with 5 or more; a ≥ 0, so a curve cannot fall with more data. Each bootstrap resample draws the test items "
        "once for every size and arm and refits: the intervals hold the test split's noise, not a training run's "
        "seed-to-seed spread. The back-test fits the same rule without the largest size and predicts it; a miss (0 "
        "outside the interval of predicted − observed by more than half a test item) withholds the projections. "
        "Every point: reports/curve.json.")])
    return out


def arm_lines(a: dict, reliable: bool) -> list[str]:
    """One arm: its fit and back-test in a sentence, then its sizes (and, where the back-tests held, projections)."""
    rows = [f"| {n:,} | {q:.1%}{_ci(ci)} |" for n, q, ci in zip(a["rows"], a["quality"], a["quality_ci"])]
    if reliable:
        rows += [f"| {p['rows']:,} (×{p['multiple']}, projected) | {p['quality']:.1%}{_ci(p['ci'])} |"
                 for p in a["projection"]]
    b = a["backtest"]
    back = (f"back-test: predicted {b['predicted']:.1%} at {a['rows'][-1]:,} rows from the smaller sizes, "
            f"measured {b['observed']:.1%}, error {b['error'] * 100:+.1f} points{_ci(b['error_ci'], True)}: "
            f"**{'inside' if b['inside'] else 'outside'}**{_resolution(b)}") if "error" in b else b.get("reason", "")
    ci = a.get("exponent_ci")
    exp = f"exponent {a['exponent']:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")
    gain = (f", gain per doubling {a['gain_per_doubling'] * 100:+.1f} points{_ci(a['gain_per_doubling_ci'], True)}"
            if reliable else "")
    own = next((p.get("train_steps") for p in a.get("points") or [] if p.get("own_run")), None)
    still = [f"{p['share']:g} ({p['train_steps']} steps)" for p in a.get("points") or []
             if p.get("convergence") == "still improving" and not p.get("own_run") and own
             and (p.get("train_steps") or 0) < own]  # cut shorter than the arm's own run
    caveat = [(f"Still improving at its last step: {', '.join(still)}: these shares trained fewer steps than "
                "the arm's own run, so the schedule, not only the data, held them down and the curve may overstate "
                "what more data buys (`curve.schedule: steps` trains every share the arm's own steps).")
              ] if still else []
    return [f"**`{a['run']}`** ({a['chosen_as']}; scored by {a['figure']}): {a['form']} fit, {exp}{gain}; {back}.", "",
            *caveat, *([""] if caveat else []), "| training rows | quality |", "|---|---|", *rows, ""]

"""The compare stage's data-value curve (reports/curve.json): every curve arm's points, its smaller shares from the
curve stage (``bakeoff.search.curve_point``) and its own run as the full-size point, each fitted, projected and
back-tested (``bakeoff.decide.curve``) over one shared set of test-item resamples; the crossover of the fine-tuned
arm over the prompt, the verdict projected at 2×, and whether the projections hold (every back-test inside).

    got = report_data(params, decision.runs)      # None when `curve: null`
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bakeoff.core import runs
from bakeoff.core.runs import curve_point_dir as point_dir
from bakeoff.core.scoring import by_label_choice
from bakeoff.decide import figures
from bakeoff.decide.crossover import crossover, verdict_at
from bakeoff.decide.curve import Points, fit_arm, resample_indices
from bakeoff.decide.curve_record import Curve

if TYPE_CHECKING:
    from bakeoff.core.sections import Params

KEPT = (
    "rows",
    "train_steps",
    "tokens_seen",
    "train_wall_s",
    "eval_wall_s",
    "quality",
    "quality_label_choice",
    "convergence",
)


def with_curve(params: Params, d):
    """The compare stage's ``Decision`` (``bakeoff.decide.decision.decide``) with the data-value curve fitted from
    the curve stage's points and the evidence behind the gain (``bakeoff.decide.evidence``)."""
    from dataclasses import replace

    from bakeoff.decide import evidence

    return replace(
        d, curve=report_data(params, d.runs), evidence=evidence.guarded(params, d.runs, d.verdict, d.data_stats)
    )


def report_data(params: Params, df) -> Curve | None:
    """The curve from the curve stage's points and each arm's own run (None when `curve: null`)."""
    from bakeoff.core.scoring import METRICS

    c = params.curve
    if c is None:
        return None
    out = {"arms": {}, "fractions": sorted(c.fractions), "resamples": c.resamples, "min_gain": params.verdict.min_gain}
    fitted, draws = {}, None
    full_items = figures.primary_items(df)
    for arm in c.arms:
        entry = out["arms"][arm] = arm_points(params, df, arm, full_items)
        if entry.get("status") != "collected":
            continue
        if len(entry["_ns"]) < 2:
            entry.update(status="too few points")  # no smaller share finished: nothing to fit
            continue
        draws = resample_indices(len(entry["_items"][0]), c.resamples) if draws is None else draws
        pts = Points(entry.pop("_ns"), entry.pop("_items"), METRICS[params.task.metric].figure, entry.pop("_names"))
        entry.update(status="ok", **fit_arm(pts, draws=draws))
        own = df[df["name"] == entry["run"]].iloc[0]
        lo, hi = figures.as_number(own.get("quality_ci_low")), figures.as_number(own.get("quality_ci_high"))
        if entry["figure"] == "generation" and lo > float("-inf") and hi > float("-inf"):
            # the full size is the arm's own run: one interval for it, the quality table's (not a second bootstrap)
            entry["quality_ci"][-1] = [round(lo, 4), round(hi, 4)]
        fitted[arm] = (entry["kind"], pts)
    for entry in out["arms"].values():
        for k in ("_ns", "_items", "_names"):
            entry.pop(k, None)
    ft = next((p for k, p in fitted.values() if k == "variant"), None)
    pr = next((p for k, p in fitted.values() if k == "baseline"), None)
    if ft is not None and pr is not None:
        out["crossover"] = crossover(ft, pr, draws)
        out["verdict_at_2x"] = verdict_at(ft, pr, draws, 2, params.verdict.min_gain)
    ok = [a for a in out["arms"].values() if a.get("status") == "ok"]
    out["backtest_misses"] = [a["run"] for a in ok if not a["backtest"].get("inside")]
    out["reliable"] = bool(ok) and not out["backtest_misses"]
    errs = [abs(a["backtest"]["error"]) for a in ok if "error" in a["backtest"]]
    out["backtest_mae"] = round(sum(errs) / len(errs), 4) if errs else None
    out["budget"] = {a["run"]: spent(a["points"]) for a in out["arms"].values() if a.get("run")}
    return Curve.from_dict(out)


def spent(points: list[dict]) -> dict:
    """What an arm's curve points cost here (its own run aside: that is the arm's training, counted there)."""
    mine = [p for p in points if not p.get("own_run")]
    return {
        "points": sum(p["status"] == "ok" for p in mine),
        "tokens": sum(p.get("tokens_seen") or 0 for p in mine),
        "steps": sum(p.get("train_steps") or 0 for p in mine),
        "train_s": round(sum(p.get("train_wall_s") or 0 for p in mine), 1),
        "eval_s": round(sum(p.get("eval_wall_s") or 0 for p in mine), 1),
    }


def arm_points(params: Params, df, arm: str, full_items: dict) -> dict:
    """One arm's records and per-test-item scores (``_ns``, ``_items``, ``_names``, smallest share first, its own
    run last), scored by the figure its own run is judged by (a baseline's label choice where that won)."""
    recs = [(s, runs.read_json(point_dir(arm, s) / "point.json")) for s in sorted(params.curve.fractions)]
    name = next((r.get("run") for _, r in recs if r and r.get("run")), None)
    entry = {"run": name, "chosen_as": next((r.get("chosen_as") for _, r in recs if r), None), "points": []}
    full = full_items.get(name) if name else None
    if full is None:
        return {**entry, "status": "skipped", "missing": "no_run" if name is None else "unfinished"}
    row = df[df["name"] == name].iloc[0]
    choice = row["kind"] == "baseline" and by_label_choice(row, figures.choosing_split(df))
    ids = sorted(full)
    ns, items, names = [], [], []
    for share, r in recs:
        r = r or {}
        m = r.get("metrics") or {}
        stale = r.get("run", name) != name  # drawn for another run than the arm's now
        point = {
            "share": share,
            "status": "stale" if stale else r.get("status", "missing"),
            **({"drawn_for": r["run"]} if stale else {}),
            **{k: m[k] for k in KEPT if k in m},
            **({"error": r["error"]} if r.get("error") else {}),
        }
        entry["points"].append(point)
        got = (
            figures.read_items(point_dir(arm, share) / "predictions.jsonl", "choice_score" if choice else "score")
            if point["status"] == "ok"
            else None
        )
        if got and set(got) >= set(ids):
            ns.append(int(m["rows"]))
            items.append([got[i] for i in ids])
            names.append(f"{share:g}")
    rows_full = next(
        (int(r["metrics"]["rows_full"]) for _, r in recs if r and (r.get("metrics") or {}).get("rows_full")), None
    ) or ((runs.read_json(runs.PREPARED / "stats.json") or {}).get("splits") or {}).get("train")
    own_steps = ((runs.read_json(runs.train_record(name)) or {}).get("metrics") or {}).get("train_steps")
    entry["points"].append(
        {"share": 1.0, "status": "ok", "rows": int(rows_full), "own_run": True, "train_steps": own_steps}
    )
    return {
        **entry,
        "status": "collected",
        "kind": str(row["kind"]),
        "figure": "label choice" if choice else "generation",
        "_ns": ns + [int(rows_full)],
        "_items": items + [[full[i] for i in ids]],
        "_names": names + ["own run"],
    }

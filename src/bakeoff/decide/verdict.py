"""The answer: which prompting baseline and which variant are best, how sure we are of the gain, and what it costs.

    df = collect(baselines, variants)              # one row per run, from runs/<name>/*.json
    add_confidence(df, "exact_match", 2000, flips) # intervals, gains over the best baseline, flip files
    v = verdict(df, min_gain=0.05)                  # fine-tune | prompting is enough | inconclusive
    d = diagnose(df, params.baselines, labels)     # prompting that knows the answers but misses their form
    c = cost(df, v, usd_per_1k_prompt_tokens, fit) # tokens saved per request, training $ on the target, break-even

Pure decisions over run records and per-example items (``bakeoff.core.measure.bootstrap_ci``); no torch, no plotting.
"""

from __future__ import annotations

import math

import pandas as pd

from bakeoff.core import runs
from bakeoff.core.records import LossPoint, read_run
from bakeoff.decide.figures import (
    _items,
    as_number,
    choosing_split,
    prompting_quality,
)
from bakeoff.decide.rule import decision_of
from bakeoff.decide.run_record import by_name, rows_of
from bakeoff.decide.verdict_record import Verdict

LN2 = math.log(2)
MOVE_TOL = 0.01  # nats: a preference loss this close to ln 2 (where DPO starts) without a standard error of its own


def did_not_move(df: pd.DataFrame, parents: dict) -> dict[str, dict]:
    """Derived runs that did not move from their parent: identical answers on every test item, and a preference
    loss on its validation pairs within the noise of ln 2 (two standard errors where the curve has them, else
    ``MOVE_TOL``), the loss of a policy still equal to its reference. Their ``convergence`` is set to say so."""
    out = {}
    rows = by_name(df)
    for child, parent in parents.items():
        a, b = rows.get(child), rows.get(parent)
        if a is None or b is None or a.status != "ok" or b.status != "ok":
            continue
        mine, theirs = _items(child, "prediction"), _items(parent, "prediction")
        if not mine or mine != theirs:
            continue
        curve = read_run(runs.train_record(child)).val_curve or []
        last = curve[-1] if curve else LossPoint()
        loss, se = last.loss, last.se
        if loss is not None and abs(loss - LN2) > max(2 * (se or 0.0), MOVE_TOL):
            continue
        out[child] = {"parent": parent, "identical": len(mine), "pref_loss": loss}
        df.loc[df["name"] == child, "convergence"] = "unmoved"  # bakeoff.report.columns.worded_runs names the parent
    return out


def verdict(df: pd.DataFrame, min_gain: float) -> Verdict:
    """Fine-tune, prompting is enough, or inconclusive: the best variant's gain over the best prompting baseline
    on the primary metric, judged by its paired bootstrap interval against ``min_gain``. Both winners are chosen on
    the validation split (``choosing_split``); the gain and its interval are the test split's. The facts only:
    ``bakeoff.report.verdict`` words them."""
    best_b = df["best_baseline"].iloc[0] if "best_baseline" in df.columns and len(df) else None
    ok = df[(df["kind"] == "variant") & (df["status"] == "ok") & df.get("gain", pd.Series(dtype=float)).notna()]
    if best_b is None or ok.empty:
        missing = "baseline" if best_b is None else "variant"
        return Verdict.from_dict({"decision": "inconclusive", "missing": missing, "min_gain": min_gain})
    split = choosing_split(df)
    col = "val_quality" if split == "val" else "quality"
    top = rows_of(ok.sort_values(col, ascending=False, kind="stable"))[0]
    gain, lo, hi, n = float(top.gain), float(top.gain_ci_low), float(top.gain_ci_high), int(top.n_test)
    chosen_on = "validation" if split == "val" else "test"
    tied = [str(x) for x in ok.loc[ok[col] == top[col], "name"]]
    # a tie for the leader: the rule that broke it is said, not hidden in a sort (the first in params.yaml leads)
    tie = {"runs": tied, "at": float(top[col]), "split": chosen_on, "rule": "params_order"} if len(tied) > 1 else None
    against = df.loc[df["name"] == best_b, "verdict_figure"].iloc[0] if "verdict_figure" in df.columns else None
    decision = decision_of(lo, hi, min_gain)
    gap = abs(gain - min_gain)
    # the interval narrows as 1/√n: it clears min_gain once its half-width is below the gap
    # rounded before the ceiling: float noise in the gain (0.09999999999999998) must not add an example
    needed = math.ceil(round(n * ((hi - lo) / 2 / gap) ** 2, 6)) if gap > 1e-9 else None
    return Verdict.from_dict(
        {
            "variant": top.name,
            "baseline": best_b,
            "gain": gain,
            "ci_low": lo,
            "ci_high": hi,
            "min_gain": min_gain,
            "n_test": n,
            "chosen_on": chosen_on,
            **({"tie": tie} if tie else {}),
            **({"baseline_figure": against} if isinstance(against, str) else {}),
            "decision": decision,
            **({"examples_needed": needed} if decision == "inconclusive" else {}),
        }
    )


FORMAT_GAP = 0.2  # contains-reference this far above the primary metric: the answers are known, the format is not


FIXES = ("instruction", "nearest_shots")  # the cheap fixes a format failure is checked for: an instruction, 8+ similar


def _cheap_fixes(b, searched: bool) -> dict[str, bool]:
    """Which cheap fixes prompting arm ``b`` ran (``searched=False``: the prompt it ran with) or tried (``True``: that
    prompt or any value of its search space)."""

    def values(key):
        return [getattr(b, key), *(((b.search or {}).get(key) or []) if searched else [])]

    return {
        "instruction": any(values("instruction")),
        "nearest_shots": max(values("shots")) >= 8 and any(v != "fixed" for v in values("selection")),
    }


def diagnose(df: pd.DataFrame, baselines: dict, labels: list | None = None) -> list[dict]:
    """Knowledge or format, per prompting baseline: when far more of its answers *contain* the reference than
    match it (``contains_reference`` − quality ≥ ``FORMAT_GAP``), the base model knows the answers and fails on
    their form, and a cheap fix may close the gap before any training. Each finding holds the prompt it ran
    (``ran``: shots, selection, instruction; None where the arm is unknown), its label-choice score, and per fix
    (``FIXES``) whether it ``ran`` it, tried it in its ``searched`` space, another arm tried it (``elsewhere``, with
    ``tried_by``) or none did (``left``); ``labels_left``: the task has no closed answer set. The facts only:
    ``bakeoff.report.verdict.worded_finding`` words them."""
    out, by_arms = [], {}
    for n, b in baselines.items():
        for what in (what for what, yes in _cheap_fixes(b, True).items() if yes):
            by_arms.setdefault(what, []).append(n)
    for r in rows_of(df[(df["kind"] == "baseline") & (df["status"] == "ok")]):
        contains, quality = r.contains_reference, prompting_quality(r)
        if not isinstance(contains, (int, float)) or contains != contains or contains - quality < FORMAT_GAP:
            continue
        b = baselines.get(r.name)
        choice = r.quality_label_choice
        ran, searched = (_cheap_fixes(b, False), _cheap_fixes(b, True)) if b else ({}, {})
        fixes, tried_by = {}, {}
        for what in FIXES:
            others = [a for a in by_arms.get(what, []) if a != r.name]
            fixes[what] = (
                "ran" if ran.get(what) else "searched" if searched.get(what) else "elsewhere" if others else "left"
            )
            if fixes[what] == "elsewhere":
                tried_by[what] = others
        out.append(
            {
                "baseline": r.name,
                "contains_reference": float(contains),
                "quality": float(quality),
                "ran": {"shots": b.shots, "selection": b.selection, "instruction": b.instruction} if b else None,
                "label_choice": float(choice) if isinstance(choice, (int, float)) and choice == choice else None,
                "fixes": fixes,
                "tried_by": tried_by,
                "labels_left": not labels,
            }
        )
    return out


def cost(df: pd.DataFrame, v: Verdict, price_per_1k: float, costs: dict, serve_card: dict | None) -> dict:
    """The money side of the verdict: the verdict's variant all in on the sizing target (``costs``: name →
    ``all_in``), the prompt tokens each request saves, and the daily volume above which serving it on its own card
    costs less than pay-per-token prompting (``break_even``). The break-even follows the verdict: given for
    "fine-tune", given as what it would be if the gain held for "inconclusive", not given for "prompting is enough"
    (the card would serve a worse answer)."""
    out: dict = {}
    if not v.has("variant"):
        return out
    rows = by_name(df)
    var, base = rows[v.variant], rows[v.baseline]
    prompt = float(base.prompt_tokens_per_request or 0)
    saved = prompt - float(var.prompt_tokens_per_request or 0)
    out["variant"] = v.variant
    out["prompt_tokens_saved_per_request"] = round(saved, 1)
    out["usd_saved_per_request"] = saved / 1000 * price_per_1k
    out["train_wall_s_here"] = var.train_wall_s
    c = costs.get(v.variant)
    if c:
        out["all_in"] = c
    from bakeoff.decide.costs import break_even

    endpoint_usd = as_number(base.usd_per_request)  # an endpoint baseline: its measured tokens, its prices
    endpoint_usd = None if endpoint_usd == float("-inf") else endpoint_usd
    be = break_even(prompt, price_per_1k, serve_card, endpoint_usd)
    if be and endpoint_usd is not None:
        be["priced_by"] = "endpoint"
    if be:
        key = {"fine-tune": "break_even", "inconclusive": "break_even_if_gain_held"}.get(v.decision)
        out.update({k: x for k, x in be.items() if k != "break_even_requests_per_day"})
        if key:
            out[key + "_requests_per_day"] = be["break_even_requests_per_day"]
    return out

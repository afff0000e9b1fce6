"""The verdict in words, from the facts ``bakeoff.decide`` computes: the verdict's reason (``decide.verdict.verdict``),
each knowledge-or-format finding's line (``decide.verdict.diagnose``), and the recommendation's line, what was
measured here and what was projected to the sizing target, never mixed in one sentence (``decide.recommend``); and
the two number forms every projected price and size in the report takes (``sig``, ``usd_range``).

    v = worded(d.verdict, d.runs, d.costs)   # the verdict as the report writes it: the facts with their words
"""

from __future__ import annotations

from typing import NamedTuple

import pandas as pd

from bakeoff.decide.figures import as_number
from bakeoff.decide.run_record import Run, by_name
from bakeoff.decide.sizing_record import AllIn
from bakeoff.decide.verdict_record import Finding, Recommendation, Scope, Verdict


def sig(x: float) -> str:
    """``x`` to two significant figures, never in scientific notation: 64,994 → 65,000; 3.0; 0.36."""
    from bakeoff.decide.statistics import round_sig

    r = round_sig(float(x))
    return f"{r:,.0f}" if abs(r) >= 10 else f"{r:.1f}" if abs(r) >= 1 else f"{r:.2g}"


def usd_range(lo: float, hi: float) -> str:
    """``$3.7–7.4``: two significant figures (``bakeoff.core.measure.round_sig``), an estimate on assumed inputs."""
    a, b = sig(lo), sig(hi)
    return f"${a}" if a == b else f"${a}–{b}"


class Words(NamedTuple):
    """The recommendation's words: its line, what was measured here, what was projected to the target."""

    line: str
    measured: list[str]
    projected: list[str]


def recommendation_words(rec: Recommendation, df: pd.DataFrame, v: Verdict, costs: dict | None = None) -> Words:
    """``line``, ``measured`` and ``projected`` for the recommendation ``rec`` of verdict ``v`` over the runs ``df``
    (``costs``: variant → ``costs.all_in``); the verdict's ``scope`` says what was measured on."""
    scope, costs = v.scope or Scope(), costs or {}
    model, n, pick = scope.model or "the base model", "?" if scope.n is None else scope.n, rec.run
    if v.decision == "prompting is enough":
        return Words(
            f"**Recommendation: prompt** — use `{pick}`; measured on `{model}`: the gain of fine-tuning "
            f"is below min_gain ({v.reason or ''}).",
            [],
            [],
        )
    rows = by_name(df)
    r, best, settle = rows[pick], rec.best, rec.examples_needed
    max_loss = 0.02 if rec.max_loss is None else rec.max_loss
    if rec.action == "inconclusive":
        line = (
            f"**Recommendation: none yet** — the gain of fine-tuning over prompting is inconclusive on {n} test "
            f"items; `{pick}` leads" + (f"; about {settle} test items would settle it" if settle else "") + "."
        )
    elif rec.action == "prompt":
        line = (
            f"**Recommendation: prompt** — use `{pick}`: shown within {max_loss * 100:g} points of `{best}` on the "
            "test split, and it trains nothing."
        )
    else:
        line = (
            f"**Recommendation: fine-tune with `{pick}`** ({r.technique})"
            + (
                f", shown within {max_loss * 100:g} points of `{best}` (best on validation) at a lower cost"
                if pick != best
                else f", the best on validation; no cheaper run is shown within {max_loss * 100:g} points of it"
            )
            + "."
        )
    measured = [
        f"On `{model}`, test split ({n} items): `{pick}` scores {as_number(r.quality):.1%}"
        + (
            f", {r.gain_vs_prompting} against the best prompting (`{v.baseline}`)"
            if isinstance(r.gain_vs_prompting, str)
            else ""
        )
        + "."
    ]
    variants = rec.compared or []
    machine = scope.machine or "this machine"
    measured += [x for x in (memory_words(rows, variants, pick),) if x] + [serving_words(rows, variants, machine)]
    projected = projected_words(pick, variants, costs) if r.kind == "variant" else []
    return Words(line, measured, projected)


MISSING = {"baseline": "prompting baseline", "variant": "fine-tuned variant"}  # the verdict's "missing"
TIE_RULES = {"params_order": "the first listed in params.yaml leads"}  # what broke a tie for the lead
FIX_NAMES = {"instruction": "an instruction", "nearest_shots": "8 or more nearest shots"}


def reason(v: Verdict) -> str:
    """Why the verdict is what it is: the gain over the best prompt with its interval against min_gain, the leader's
    tie and the rule that broke it, how many test items would settle an inconclusive one."""
    if v.has("missing"):
        return f"no {MISSING[v.missing]} finished"
    best_b, against, top, t = v.baseline, v.baseline_figure, v.variant, v.tie
    said = f"`{best_b}` ({against})" if against else f"`{best_b}`"
    lead = (
        f"`{top}` (it ties `{'`, `'.join(x for x in t.runs if x != top)}` at {t.at:.1%} on "
        f"{t.split}; {TIE_RULES.get(t.rule, t.rule)})"
        if t
        else f"`{top}`"
    )
    gain, lo, hi, min_gain = v.gain, v.ci_low, v.ci_high, v.min_gain
    if v.decision == "fine-tune":
        return (
            f"{lead} beats {said} by {gain * 100:+.1f} points, 95% interval [{lo * 100:+.1f}, {hi * 100:+.1f}], "
            f"all above min_gain {min_gain * 100:.1f}"
        )
    if v.decision == "prompting is enough":
        return (
            f"the best variant {lead} gains {gain * 100:+.1f} points over {said}, 95% interval "
            f"[{lo * 100:+.1f}, {hi * 100:+.1f}], all below min_gain {min_gain * 100:.1f}"
        )
    need = v.examples_needed
    settle = f"about {need} would settle it" if need else "no test set size would settle it: the gain sits at min_gain"
    return (
        f"{lead} gains {gain * 100:+.1f} points over {said}; {v.n_test} test examples give an interval of "
        f"±{(hi - lo) / 2 * 100:.1f} points ([{lo * 100:+.1f}, {hi * 100:+.1f}]), which contains min_gain "
        f"{min_gain * 100:.1f}; {settle}"
    )


def format_line(d: Finding) -> str:
    """One knowledge-or-format finding (``decide.verdict.diagnose``), worded, in a sentence."""
    return (
        f"`{d.baseline}` fails on format, not knowledge: {d.contains_reference:.0%} of its answers contain "
        f"the reference, {d.quality:.0%} score on the primary metric. Tried: {', '.join(d.tried)}."
        + (f" Tried by other prompting arms: {'; '.join(d.tried_elsewhere)}." if d.tried_elsewhere else "")
        + (f" Not tried: {'; '.join(d.left)}." if d.left else "")
    )


def worded_finding(d: Finding) -> Finding:
    """A knowledge-or-format finding (``decide.verdict.diagnose``) as the report writes it: what its prompt tried,
    what other prompting arms tried, what none tried, and its ``line``."""
    ran = d.ran
    if ran:
        tried = [
            f"{ran.shots} shot{'s' if ran.shots != 1 else ''}" + (f" ({ran.selection})" if ran.shots else ""),
            f"instruction {ran.instruction!r}" if ran.instruction else "no instruction",
        ]
    else:
        tried = ["?", "no instruction"]
    if d.label_choice is not None:
        tried.append(f"label choice ({d.label_choice:.0%})")
    untried = {
        "instruction": f"an instruction that fixes the form (baselines.{d.baseline}.instruction)",
        "nearest_shots": "more or nearer shots",
    }
    elsewhere, left = [], []
    for fix, how in d.fixes.items():
        if how == "searched":  # its own search tried it and chose otherwise on validation
            tried.append(f"{FIX_NAMES[fix]} (in its search, not chosen)")
        elif how == "elsewhere":
            elsewhere.append(f"{FIX_NAMES[fix]} ({', '.join(d.tried_by[fix])})")
        elif how == "left":
            left.append(untried[fix])
    if d.labels_left:
        left.append("a closed answer set (task.labels: the answer is then chosen by likelihood)")
    words = Finding(
        baseline=d.baseline,
        contains_reference=d.contains_reference,
        quality=d.quality,
        tried=tried,
        tried_elsewhere=elsewhere,
        left=left,
    )
    return words.with_(line=format_line(words))


def worded(v: Verdict, df: pd.DataFrame, costs: dict | None = None) -> Verdict:
    """The verdict as the report writes it (the report's pages, sizing.json, metrics.json, the MLflow tags): its
    facts with their words, in the record's order (the reason after the decision and what settles it)."""
    out = v.without("missing").inserted_after(
        "examples_needed" if v.has("examples_needed") else "decision", "reason", reason(v)
    )
    if out.tie:
        out = out.with_(tie=out.tie.with_(rule=TIE_RULES.get(out.tie.rule, out.tie.rule)))
    if out.has("diagnosis"):
        out = out.with_(diagnosis=[worded_finding(d) for d in out.diagnosis or []])
    if out.has("recommendation"):
        out = out.with_(recommendation=worded_recommendation(v.recommendation, df, out, costs))
    return out


def worded_recommendation(
    rec: Recommendation | None, df: pd.DataFrame, v: Verdict, costs: dict | None = None
) -> Recommendation:
    """The recommendation as the report writes it: its facts with its words, in the record's order; ``compared``
    stays behind (the words name it)."""
    if not rec:
        return Recommendation()
    said = recommendation_words(rec, df, v, costs)
    if v.decision == "prompting is enough":
        return Recommendation.from_dict(
            {
                "action": rec.action,
                "run": rec.run,
                "measured": said.measured,
                "projected": said.projected,
                "max_loss": rec.max_loss,
                "line": said.line,
            }
        )
    facts = {k: x for k, x in rec.to_dict().items() if k != "compared"}
    first = {k: facts.pop(k) for k in ("action", "run", "kind", "best") if k in facts}
    return Recommendation.from_dict({**first, **said._asdict(), **facts})


def memory_words(rows: dict[str, Run], variants: list[str], pick: str) -> str | None:
    """The group's least training memory as measured here (peak reserved on CUDA, resident on CPU)."""
    peaks = {n: rows[n].train_peak_reserved_mb or rows[n].train_peak_rss_mb for n in variants}
    peaks = {k: x for k, x in peaks.items() if isinstance(x, (int, float)) and x == x}
    if len(peaks) < 2:
        return None
    low = min(peaks, key=peaks.get)
    kind = "reserved CUDA" if rows[low].train_peak_reserved_mb else "resident"
    return (
        f"Least training memory measured here (peak {kind} memory): `{low}` at {peaks[low]:,.0f} MB"
        + (f" against `{pick}`'s {peaks[pick]:,.0f} MB" if low != pick and pick in peaks else "")
        + "."
    )


def projected_words(pick: str, variants: list[str], costs: dict[str, AllIn]) -> list[str]:
    """The pick's projection to the sizing target (memory, smallest and cheapest card, all-in range) and the group's
    least projected memory: every sentence says it is a projection."""
    c = costs.get(pick)
    if not c:
        return []
    parts = (
        ["training"]
        + ([f"`{c.lender or pick}`'s whole search"] if c.search_usd else [])
        + ([f"its parent `{c.parent}` bought alone"] if c.parent else [])
    )
    smallest = f"{c.smallest_gpus}× {c.smallest_card}" if (c.smallest_gpus or 1) > 1 else c.smallest_card
    shared = (
        f"; {usd_range(c.usd, c.usd_high)} when its search is split among the {c.search_users} arms that use it"
        if (1 if c.search_users is None else c.search_users) > 1 and c.search_usd
        else ""
    )
    out = [
        (
            f"Projected to `{c.target}`, not measured: `{pick}` needs ~{sig(c.need_gb)} GB; the smallest card "
            f"that holds it is {smallest}, the cheapest for the job {c.card}: "
            f"{usd_range(*c.alone)} all in, bought alone ({', '.join(parts)}){shared}."
        )
    ]
    least = min((n for n in variants if costs.get(n)), key=lambda n: costs[n].need_gb)
    if least != pick:
        out.append(
            f"Least memory projected among the finished variants: `{least}` "
            f"(~{sig(costs[least].need_gb)} GB on the target; "
            "a projection from the sizing model, not measured)."
        )
    return out


def serving_words(rows: dict[str, Run], names: list[str], machine: str) -> str:
    """Which run serves fastest, only where its latency's interquartile range separates from every other's
    (``bakeoff.core.measure.latency_separated``); otherwise a tie."""
    from bakeoff.core.runs import SEVERAL
    from bakeoff.decide.statistics import latency_separated

    if machine.startswith(SEVERAL):  # latencies of different machines say nothing of the runs
        return f"Serving latency at batch 1: timed on {machine}; compare latencies within one machine only."
    timed = [
        n
        for n in names
        if isinstance(rows[n].latency_p25_s, (int, float)) and rows[n].latency_p25_s == rows[n].latency_p25_s
    ]
    if len(timed) < 2:
        return f"Serving latency at batch 1 ({machine}): too few runs timed with their spread to compare."
    how = rows[timed[0]].latency_how or "each run timed in its own stage"
    fast = min(timed, key=lambda n: rows[n].latency_p50_s)
    if all(latency_separated(rows[fast], rows[o]) for o in timed if o != fast):
        return (
            f"Fastest to serve here ({machine}, batch 1, {how}): `{fast}`, p50 {rows[fast].latency_p50_s:.2f} "
            "s; its interquartile range lies below every other run's in the group."
        )
    pairs = [(a, b) for a in timed for b in timed if a != b and latency_separated(rows[a], rows[b])]
    p50s = [rows[n].latency_p50_s for n in timed]
    p50 = f"p50 {min(p50s):.2f}–{max(p50s):.2f} s"
    every = len(timed) * (len(timed) - 1) // 2
    if not pairs:
        return (
            f"Serving latency at batch 1 ({machine}, {how}): the group's runs tie ({p50}; every pair's "
            "interquartile ranges overlap)."
        )
    return (
        f"Serving latency at batch 1 ({machine}, {how}; {p50}): {len(pairs)} of {every} pairs separate, "
        + ", ".join(f"`{a}` below `{b}`" for a, b in pairs)
        + "; the other pairs' interquartile ranges overlap."
    )

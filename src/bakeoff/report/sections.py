"""The report's sections that carry its claims: the first screen (verdict, recommendation, measured apart from
projected, caveats), which differences are real and which cheaper runs are shown within max_loss of the best,
derived variants against their parents and the search budget (presentation only; the rule's words are
``bakeoff.report.choice``, GPU sizing ``bakeoff.report.sizing``)."""

from __future__ import annotations

import pandas as pd

from bakeoff.core.records import LossPoint, RunRecord, Search
from bakeoff.decide.rule import ALPHA
from bakeoff.decide.run_record import by_name, pairs_of
from bakeoff.decide.sizing_record import AllIn, Money
from bakeoff.decide.statistics import round_sig
from bakeoff.decide.verdict_record import Recommendation, Scope, Verdict
from bakeoff.report.choice import against_best_lines, technique_words
from bakeoff.report.families import family_row
from bakeoff.report.tables import _fmt, image


def pairwise_lines(pw: pd.DataFrame, rec: Recommendation | None = None, images: dict | None = None) -> list[str]:
    """The pairwise tests as a compact matrix: row minus column in points, with the Holm-adjusted p (every pair in
    ``reports/pairwise.csv``)."""
    if pw is None or pw.empty:
        return []
    names = list(dict.fromkeys(list(pw["a"]) + list(pw["b"])))
    cell = {}
    for r in pairs_of(pw):
        real = r.p_holm < ALPHA
        p = f" (p {r.p_holm:.2g})" if real else ""
        for a, b, d in ((r.a, r.b, r.diff), (r.b, r.a, -r.diff + 0.0)):
            cell[(a, b)] = f"**{d * 100:+.1f}**{p}" if real else f"{d * 100:+.1f}"
    test = ", ".join(sorted(set(pw["test"])))
    lines = [
        "## Which differences are real",
        "",
        (
            f"Row minus column on the test split ({int(pw['n'].iloc[0])} examples), in points, with the p-value of "
            f"the {test} test adjusted by Holm over all {len(pw)} pairs where it is below {ALPHA} (**bold**: "
            "different); a plain figure is a difference the test split cannot tell from chance. Every p-value, "
            "adjusted and raw, and the discordant counts: `reports/pairwise.csv`. This adjusted test decides "
            'every "different" and every rank group here; the bootstrap intervals elsewhere are each one '
            "pair's, unadjusted, so an interval can exclude 0 where the adjusted test does not reject."
        ),
        "",
        "| | " + " | ".join(f"`{n}`" for n in names) + " |",
        "|" + "---|" * (len(names) + 1),
    ]
    for a in names:
        lines.append(f"| `{a}` | " + " | ".join("·" if a == b else cell.get((a, b), "–") for b in names) + " |")
    return lines + [
        "",
        *image(images, "pairwise", "pairwise differences"),
        *against_best_lines(rec or Recommendation()),
    ]


def answer_lines(v: Verdict, c: Money, costs: dict[str, AllIn] | None) -> list[str]:
    """The report's first lines: four rows a buyer reads before anything else (fine-tune? which technique? which
    card? what it costs), one name and one price, each figure from the sections below."""
    from bakeoff.report.verdict import usd_range

    scope, rec = v.scope or Scope(), v.recommendation or Recommendation()
    on = f"on `{scope.model}`, {_n(scope)} test items" if scope.model else "on the test split"
    if v.gain is not None:
        gain = (
            f"`{v.variant}` gains {v.gain * 100:+.1f} points [{v.ci_low * 100:+.1f}, "
            f"{v.ci_high * 100:+.1f}] ([95% interval](#glossary)) over the best prompt (`{v.baseline}`)"
        )
    else:
        gain = "no gain was measured"
    rows = [("Fine-tune?", f"**{v.decision}**: {gain}, {on}")]
    family = family_row(v)  # prompt / RAG / fine-tune / fine-tune + RAG, where a run retrieves
    rows += [family] if family else []
    run = rec.run
    if rec.action in ("fine-tune", "inconclusive") and run and (rec.kind or "variant") == "variant":
        rows.append(("Technique", technique_words(rec, v) if rec.choice else f"`{run}`"))
        a = (costs or {}).get(run)
        if a:
            from bakeoff.report.verdict import sig

            n = a.smallest_gpus or 1
            smallest = f"{n}× {a.smallest_card}" if n > 1 else a.smallest_card
            card = (
                f"{smallest}, the [smallest](#glossary) that holds `{run}` for `{a.target}` "
                f"(~{sig(a.need_gb)} GB); {a.card} the cheapest for the whole job ([projected](#glossary))"
            )
            rows.append(("Card", card))
            price = usd_range(*a.alone)
            cost = f"{price} all in to buy `{run}` (its training and its whole search; projected)"
            if c.break_even_requests_per_day:
                per_day = round_sig(c.break_even_requests_per_day)
                cost += (
                    f"; serving it on its own {c.serve_card} costs less than prompting above "
                    f"~{per_day:,.0f} requests a day ([break-even](#glossary))"
                )
            rows.append(("Cost", cost))
    elif run:
        said = f"prompting: `{run}`, no fine-tuning"
        if rec.choice and rec.choice.replaced:
            said += f" ({technique_words(rec, v)})"
        rows += [
            ("Technique", said),
            ("Card", "none to train"),
            ("Cost", "the prompt tokens of every request (below: the serving break-even)"),
        ]
    return ["## Answer", "", "| question | answer |", "|---|---|", *[f"| {q} | {a} |" for q, a in rows], ""]


def _n(scope: Scope):
    """The test items the verdict was measured on, or "?"."""
    return "?" if scope.n is None else scope.n


def verdict_lines(v: Verdict, c: Money, caveats: list[str] | None = None) -> list[str]:
    """The first screen: the verdict with what it was measured on, the recommendation, what was measured here apart
    from what was projected to the target, and at most three caveats."""
    scope = v.scope or Scope()
    where = (
        f" Measured on `{scope.model}`, test split ({_n(scope)} items)"
        + (", winners picked on the validation split" if v.chosen_on == "validation" else "")
        + ":"
        if scope.model
        else ""
    )
    lines = ["## Verdict", "", f"**{v.decision}** —{where} {v.reason}.", ""]
    if v.chosen_on and v.chosen_on != "validation":
        lines += [
            (
                "> The winners were chosen on the test split (these records have no validation scores: rerun "
                "`dvc repro`), which flatters the gain near min_gain."
            ),
            "",
        ]
    rec = v.recommendation or Recommendation()
    if rec.line:
        lines += [rec.line, ""]
    measured = list(rec.measured or [])
    if c.train_wall_s_here and v.variant:
        measured.append(
            f"`{c.variant if c.has('variant') else v.variant}` trained in {c.train_wall_s_here:.0f} s here."
        )
    for d in v.diagnosis or []:  # knowledge or format (verdict.diagnose)
        measured.append(f"Knowledge or format: {d.line}")
    if measured:
        lines += [
            f"**Measured here**{' (' + scope.machine + ')' if scope.machine else ''}:",
            "",
            *[f"- {m}" for m in measured],
            "",
        ]
    lines += projected_lines(list(rec.projected or []) + cost_lines(v, c), scope.target)
    if caveats:
        lines += ["**Caveats:**", "", *[f"- {x}" for x in caveats[:3]], ""]
    if v.rank_groups:
        lines += [
            (
                f"Rank groups (runs the test split cannot tell apart from their group's leader, Holm-adjusted "
                f"p ≥ {ALPHA if v.alpha is None else v.alpha}; leaders picked on the {v.chosen_on or 'test'} split): "
                f"{v.rank_groups}"
            ),
            "",
        ]
    return lines


def projected_lines(projected: list[str], target: str | None) -> list[str]:
    """The first screen's projections to the sizing target, said to be projections, and how to measure instead."""
    if not projected:
        return []
    lines = [
        (
            f"**Projected**{' to `' + target + '`' if target else ''} (estimates from the sizing model, "
            "the FLOP utilisation in GPU sizing and example prices, not measured):"
        ),
        "",
        *[f"- {m}" for m in projected],
        "",
    ]
    if target:
        lines += [
            (
                "To measure instead of project: set `model.base` to that model (a hub id or a local folder) "
                "and run `dvc exp run -S model.base=<it>` on the card."
            ),
            "",
        ]
    return lines


def cost_lines(v: Verdict, c: Money) -> list[str]:
    """The verdict's money, all projected: the all-in cost on the target and the break-even against prompting."""
    from bakeoff.report.verdict import usd_range

    out = []
    if not c:
        return out
    if c.break_even_requests_per_day is not None or c.break_even_if_gain_held_requests_per_day is not None:
        per_day = c.break_even_requests_per_day or c.break_even_if_gain_held_requests_per_day
        priced = (
            "at its endpoint's prices for the tokens it measured"
            if c.priced_by == "endpoint"
            else "at your prompt-token price"
        )
        said = (
            f"Serving: pay-per-token prompting (`{v.baseline}`, ${c.prompt_usd_per_request * 1000:.2f} per "
            f"1,000 requests {priced}) against `{c.variant if c.has('variant') else v.variant}` on its own "
            f"{c.serve_card} (${c.serve_usd_per_hour:.2f}/h, 24 h a day, whatever the traffic): the card costs less "
            f"above ~{round_sig(per_day):,.0f} requests a day, prompting below it; that assumes the card can serve "
            f"about {round_sig(per_day / 86400):g} requests a second"
            + (f" of `{v.scope.target}`" if v.scope and v.scope.target else "")
            + ", a serving throughput assumed, not measured"
        )
        if c.all_in:
            said += f"; training's all-in {usd_range(*c.all_in.alone)} (bought alone) comes on top, once"
        if c.break_even_if_gain_held_requests_per_day is not None:
            said += " (only if the gain held: it is not established)"
        out.append(said + (". Output tokens, which both pay, are left out." if c.priced_by != "endpoint" else "."))
    elif v.decision == "prompting is enough":
        out.append(
            "No break-even: fine-tuning does not beat prompting here, so its own card would serve a worse answer."
        )
    elif c.prompt_tokens_saved_per_request is not None and not c.serve_card:
        out.append(
            f"Prompt tokens saved per request: {c.prompt_tokens_saved_per_request:+.0f}; set "
            "cost.usd_per_1k_prompt_tokens and a serving card (cost.serve_gpu) for a break-even."
        )
    return out


def dpo_lines(df: pd.DataFrame, pw: pd.DataFrame | None, parents: dict, d) -> list[str]:
    """A derived variant against its parent, on the task (the pairwise test) and on the held-out preference pairs
    (exact McNemar on each pair's win and a paired permutation test of the margin); its training and search records
    from ``d`` (the ``Decision``)."""
    from bakeoff.decide.statistics import mcnemar_exact, paired_permutation_p

    rows, pairs = by_name(df), pairs_of(pw)
    out = []
    for child, parent in parents.items():
        a, b = rows.get(child), rows.get(parent)
        if a is None or b is None or a.status != "ok" or b.status != "ok":
            continue
        said = [f"### `{child}` against its parent `{parent}`", ""]
        h = next((x for x in pairs if {x.a, x.b} == {child, parent}), None)
        if h is not None:
            diff = h.diff if h.a == child else -h.diff
            said.append(
                f"- Task (test split, {int(h.n)} items): {as_pct(a.quality)} against "
                f"{as_pct(b.quality)}, {diff * 100:+.1f} points; {h.test} p {h.p:.2g} "
                f"(Holm-adjusted {h.p_holm:.2g}): "
                + ("different." if h.p_holm < ALPHA else f"they cannot be told apart on {int(h.n)} items.")
            )
        ma, mb = a.pref_margins, b.pref_margins
        if isinstance(ma, list) and isinstance(mb, list) and len(ma) == len(mb) and ma:
            wa, wb = [m > 0 for m in ma], [m > 0 for m in mb]
            only_a, only_b = sum(x and not y for x, y in zip(wa, wb)), sum(y and not x for x, y in zip(wa, wb))
            p_win = mcnemar_exact(only_a, only_b)
            p_margin = paired_permutation_p(ma, mb, lambda xs: sum(xs) / len(xs))
            said.append(
                f"- Preference pairs (held out, {len(ma)}): chosen answer preferred {sum(wa) / len(wa):.1%} "
                f"against {sum(wb) / len(wb):.1%} (exact McNemar p {p_win:.2g}); mean margin "
                f"{sum(ma) / len(ma):+.2f} against {sum(mb) / len(mb):+.2f} nats (paired permutation p "
                f"{p_margin:.2g})."
            )
        if str(a.convergence or "").startswith("did not move"):
            loss = (d.records.get(child) or RunRecord()).val_curve or [LossPoint()]
            said.append(
                f"- It did not move from `{parent}`: the same answer on every test item"
                + (
                    f", and its preference loss on the validation pairs {loss[-1].loss:.3f} is ln 2 = 0.693 "
                    "within its noise (where a policy still equal to its reference starts)"
                    if loss[-1].loss is not None
                    else ""
                )
                + ". Its search kept a rate too small to "
                "train; the parent is the run to read."
            )
        objective = (d.searches.get(child) or Search()).objective
        if objective:
            said.append(f"- Its search judged trials by {objective_words(objective)} on the validation split.")
        out += said + [""]
    return ["## Derived variants against their parents", "", *out] if out else []


def as_pct(x) -> str:
    return _fmt(x, "{:.1%}")


def objective_words(objective: str) -> str:
    return {
        "val_loss": "its own validation loss (for DPO, the preference loss: it can fall while the task gets worse)",
        "metric": "the task metric",
    }.get(objective, str(objective))

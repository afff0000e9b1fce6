"""The recommendation's rule in words (``bakeoff.decide.rule``): what a cheaper run saves, its shortfall from the
best with the paired interval, whether it is shown within ``verdict.max_loss``, the Answer's Technique row, and the
table of every cheaper run against the best (presentation only)."""

from __future__ import annotations

from bakeoff.decide.verdict_record import ChoiceRecord, Considered, Recommendation, Verdict
from bakeoff.report.verdict import sig


def saving_words(s: Considered, unit: str) -> str:
    """What a cheaper run saves against the best: projected USD bought alone, or training memory measured here."""
    if unit == "usd":
        return f"${sig(s.saving)} less (projected, bought alone)"
    return f"{s.saving:,.0f} MB less training memory (measured here)"


def shortfall_words(s: Considered, unit: str) -> str:
    """One cheaper run against the best, in one line: its saving, its difference with the paired 90% interval, and
    whether it is shown within ``max_loss`` (if not: what would settle it, or that its shortfall is beyond it)."""
    m = f"{s.margin * 100:g} points"
    said = (
        f"`{s.run}`: {saving_words(s, unit)}, {s.diff * 100:+.1f} points [{s.low * 100:+.1f}, "
        f"{s.high * 100:+.1f}] against `{s.against}`"
    )
    if s.shown:
        return f"{said}; shown within {m}"
    if s.diff <= -s.margin:
        return f"{said}; not shown within {m}: the measured shortfall is itself beyond it"
    need = s.items_needed
    return f"{said}; not shown within {m}" + (f": about {sig(need)} test items would settle it" if need else "")


def _unit(rec: Recommendation) -> str:
    return rec.saving_unit if rec.has("saving_unit") else "usd"


def technique_words(rec: Recommendation, v: Verdict) -> str:
    """The Answer's Technique row: the recommended run, why, and the trade-off of the cheaper run nearest to being
    taken (the highest lower bound among those not shown within ``max_loss``)."""
    run, choice = rec.run, rec.choice or ChoiceRecord()
    unit, m = _unit(rec), f"{(0.02 if rec.max_loss is None else rec.max_loss) * 100:g} points"
    considered = choice.considered or []
    if rec.action == "inconclusive":
        need = rec.examples_needed
        return f"none yet: the gain is inconclusive; `{run}` leads" + (
            f", about {sig(need)} test items would settle it" if need else ""
        )
    if run != (choice.best if choice.has("best") else run):
        taken = next(s for s in considered if s.run == run)
        return f"{shortfall_words(taken, unit)} (`{taken.against}` led on validation)"
    why = (
        f"`{run}`: the best on validation"
        + ("" if run == v.variant else " among the runs")
        + (f"; no cheaper run is shown within {m} of it" if considered else "; no cheaper run to consider")
    )
    declined = sorted((s for s in considered if not s.shown), key=lambda s: -s.low)  # the nearest first
    return why + (f" ({shortfall_words(declined[0], unit)})" if declined else "")


def against_best_lines(rec: Recommendation) -> list[str]:
    """Every cheaper run against the best (the recommendation's rule, ``bakeoff.decide.rule``), cheapest first."""
    choice = rec.choice or ChoiceRecord()
    considered = choice.considered or []
    if not considered:
        return []
    unit = _unit(rec)
    saved = "saves (projected, bought alone)" if unit == "usd" else "saves (training memory measured here)"
    from bakeoff.report.verdict import sig

    def saves(s: Considered) -> str:
        return f"${sig(s.saving)}" if unit == "usd" else f"{s.saving:,.0f} MB"

    rows = [
        f"| `{s.run}` | {saves(s)} | {s.diff * 100:+.1f} | [{s.low * 100:+.1f}, {s.high * 100:+.1f}] | "
        f"{s.p_holm:.2g} | {'shown' if s.shown else 'not shown'} |"
        for s in considered
    ]
    return [
        (
            f"**Cheaper runs against the best** (`{choice.best}`, picked on validation), on the test split: a "
            f"cheaper run replaces it only when its shortfall is shown within {choice.margin * 100:g} points "
            "(`verdict.max_loss`): the lower end of the paired 90% interval above the margin, one-sided test "
            f'Holm-adjusted over the {len(considered)} comparisons with the best. "not shown" means the test '
            "items cannot show it, not that the runs differ."
        ),
        "",
        f"| run | {saved} | Δ points | 90% interval | p (Holm) | within the margin |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]

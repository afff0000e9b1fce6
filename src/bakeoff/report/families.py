"""The family verdict in words (``bakeoff.decide.families``): the first screen's "Which family?" row, and
reports/metrics.json's ``families``.

    family_row(v)     # ("Which family?", "**RAG** (`rag`) ...") or None where no run retrieves
"""

from __future__ import annotations

from bakeoff.decide.families import RETRIEVING, Families, from_dict, summary

NAMES = {"prompt": "prompting", "rag": "RAG", "finetune": "fine-tuning", "finetune_rag": "fine-tuning + RAG"}


def _p(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.3f}"


def gap_words(f: Families) -> list[str]:
    """The winner against each other family's leader on test: the difference, its interval and its Holm p."""
    out = []
    for g in f.gaps:
        leader = f.leader(g.family)
        said = (
            f"{NAMES[g.family]} (`{g.run}`, {leader.quality:.1%}): {g.diff * 100:+.1f} points "
            f"[{g.low * 100:+.1f}, {g.high * 100:+.1f}], {_p(g.p_holm)}"
        )
        out.append(said if g.separated else said + ", not separated")
    return out


def why_words(f: Families) -> str:
    win = f.leader(f.winner)
    recall = f" (recall@k of `{win.run}`'s passages: {win.recall:.0%})" if win and win.recall is not None else ""
    if f.why == "knowledge":
        return (
            "knowledge: the answers are in the documents, not in the model; every family that reads the passages "
            f"beats every one that does not{recall}"
        )
    if f.why == "behaviour":
        return (
            "behaviour: training on the task's answers beats reading its documents, which hold facts, not the "
            "answer's form"
        )
    if not any(x.family in RETRIEVING for x in f.leaders):
        return "not read: no run with retrieval finished, so retrieval was not measured on this task"
    return "not read from these runs: the winner is not separated from every family on the other side"


def _not_run(family: str, run: str, status: str, why: str) -> str:
    return f"{NAMES[family]} (`{run}` {status}{': ' + why if why else ''})"


def family_row(v) -> tuple[str, str] | None:
    """The first screen's row: which family wins on the choosing split, its test figure, the gaps, the pick, why."""
    f = from_dict(v.families)
    if f is None:
        return None
    win = f.leader(f.winner)
    text = (
        f"**{NAMES[f.winner]}** (`{win.run}`, {win.quality:.1%} on test; the best family on {f.chosen_on}) against "
        + "; ".join(gap_words(f))
        + f". Why: {why_words(f)}."
    )
    if f.pick != f.winner:
        cheaper = f.leader(f.pick)
        text += (
            f" A cheaper family, {NAMES[f.pick]} (`{cheaper.run}`), is shown within {f.margin * 100:.0f} points of it: "
            "take that."
        )
    if f.not_run:
        text += " Not measured: " + "; ".join(_not_run(k, *why) for k, why in f.not_run.items()) + "."
    return "Which family?", text


def family_summary(d: dict | None) -> dict | None:
    """reports/metrics.json's ``families`` (None where no run retrieves)."""
    f = from_dict(d)
    return summary(f) if f else None

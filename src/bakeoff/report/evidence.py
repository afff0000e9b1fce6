"""The report's evidence sections (``bakeoff.decide.evidence`` gathers them): where the gain comes from, answers side
by side, and the exact prompts. Every answer and input is escaped for Markdown and HTML (the page keeps raw HTML), and
a long one is cut with its length said.

    lines = where_lines(e, scope) + sample_lines(e, scope) + prompt_lines(e)
"""

from __future__ import annotations

from bakeoff.decide.evidence_record import Evidence
from bakeoff.decide.verdict_record import Scope

LONG = 400  # characters of an answer or input shown in a table cell; the rest is counted, not shown
# every character HTML or Markdown would read as markup, as a numeric entity (one pass: no entity is escaped twice)
SAFE = {ord(c): f"&#{ord(c)};" for c in "&<>\"'\\|`*_[]#~!{}$"}


def cell(text, limit: int = LONG) -> str:
    """``text`` safe inside a Markdown table cell and the HTML page: HTML escaped, Markdown's own characters as
    entities, newlines as <br>, cut at ``limit`` characters with the rest counted."""
    s = "" if text is None else str(text)
    cut = f" … ({len(s) - limit:,} more characters)" if len(s) > limit else ""
    s = s[:limit].replace("\r\n", "\n").translate(SAFE).replace("\n", "<br>")
    return (s or "(empty)") + cut


def _pct(x) -> str:
    return f"{x * 100:.0f}%" if isinstance(x, (int, float)) and x == x else "–"


def _on(scope: Scope | None) -> str:
    scope = scope or Scope()
    n = scope.n
    return (
        f"measured on the test split ({n} items), `{(scope.model or 'the base model')}`"
        if n
        else "measured on the test split"
    )


def where_lines(e: Evidence | None, scope: Scope | None = None) -> list[str]:
    """## Where the gain comes from: per field, per label or the score's quartiles, by what the task is."""
    if e and e.error:
        return [
            "## Where the gain comes from",
            "",
            f"Not gathered ({cell(e.error, 300)}): the runs' records and test answers are in `runs/<name>/`.",
            "",
        ]
    w = e.where if e else None
    if not w:
        return []
    a, b = e.prompt, e.run
    lines = ["## Where the gain comes from", ""]
    if w.kind == "fields":
        top = w.largest
        if top:
            lines += [
                (
                    f"The largest gap between the best prompt `{a}` and `{b}` is in the field `{top.field}`: "
                    f"{_pct(top[a])} against {_pct(top[b])} right ({top.gap * 100:+.0f} points), {_on(scope)}. "
                    "A field one run gets wrong is where a sharper prompt (a rule for that field, examples of it) "
                    "may be tried before fine-tuning."
                ),
                "",
            ]
        lines += ["| run | " + " | ".join(f"`{f}`" for f in w.fields) + " |", "|---|" + "---:|" * len(w.fields)]
        lines += [f"| {n} | " + " | ".join(_pct(row.get(f)) for f in w.fields) + " |" for n, row in w.table.items()]
        return lines + ["", "Share of test items with that field's value right (the answer parsed as JSON).", ""]
    if w.kind == "labels":
        lines += [
            (
                f"The labels where the best prompt `{a}` and `{b}` differ most ({_on(scope)}; right answers out "
                "of the items with that true label):"
            ),
            "",
            f"| true label | items | `{a}` right | `{b}` right |",
            "|---|---:|---:|---:|",
        ]
        lines += [f"| {cell(x.label, 80)} | {x.n} | {x[a]} | {x[b]} |" for x in w.labels]
        for n, conf in w.confusions.items():
            said = "; ".join(f"{cell(c.true, 60)} → {cell(c.answered, 60)} ({c.count})" for c in conf)
            lines += ["", f"Commonest confusions of `{n}` (true → answered, count): {said or 'none'}."]
        return lines + [""]
    lines += [
        (
            f"The score per test item ({_on(scope)}): a mean hides whether a run is good on most items or "
            "perfect on some and lost on others."
        ),
        "",
        "| run | min | 25% | median | 75% | max | items |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {n} | {q.min:.2f} | {q.q1:.2f} | {q.median:.2f} | {q.q3:.2f} | {q.max:.2f} | {q.n} |"
        for n, q in w.quartiles().items()
    ]
    return lines + [""]


def cost_plot_lines(images: dict | None, scope: Scope | None, target: str | None) -> list[str]:
    """## Quality against cost: the plot a buyer decides on, with what is measured and what is projected."""
    if not images or "quality_vs_cost" not in images:
        return []
    return [
        "## Quality against cost",
        "",
        (
            f"Each fine-tuned run's test quality, {_on(scope)}, against its all-in training cost projected on "
            f"`{target}` (search share, parent and its own training on the cheapest card that holds it; the bar runs "
            "to the pessimistic end of the utilisation range: [GPU sizing](#gpu-sizing)). The dashed line is the "
            "frontier of these test figures, the star the recommendation, chosen on validation by the rule above "
            "(so it need not sit on this frontier); prompting trains nothing (dotted lines)."
        ),
        "",
        f"![quality against projected all-in cost on {target}](plots/quality_vs_cost.png)",
        "",
    ]


RULES = {
    "largest_gaps_then_worst": "the items where the recommended run and the best prompt differ most in score, "
    "its wins and its losses alike (two of each where there are), then the item both "
    "answer worst; ties by test order"
}
ERRORS = {"unrecorded": "not recorded: its evaluation ran before prompts were recorded"}


def why_words(why: str, e: Evidence) -> str:
    """Why a test item is shown (``bakeoff.decide.evidence.samples``)."""
    return {
        "worst": "both answer it worst",
        "run_better": f"`{e.run}` better",
        "prompt_better": f"`{e.prompt}` better",
    }.get(why, why)


def sample_lines(e: Evidence | None, scope: Scope | None = None) -> list[str]:
    """## Answers side by side: each chosen item's input, reference and every run's answer with its score."""
    items = (e.samples if e else None) or []
    if not items:
        return []
    rule = RULES.get(e.rule, e.rule)
    lines = [
        "## Answers side by side",
        "",
        (
            f"{len(items)} test items, {_on(scope)}, chosen by one rule: {rule}. Every run's answer as it "
            "was scored; long ones are cut."
        ),
        "",
    ]
    for s in items:
        lines += [
            f"**Test item {s.id}** ({cell(s.source, 120)}; {why_words(s.why, e)})",
            "",
            '<div class="answers">',
            "",  # the page wraps these cells (html.py); GitHub ignores the class
            "| | answer | score |",
            "|---|---|---:|",
            f"| input | {cell(s.input)} | |",
            f"| reference | {cell(s.reference)} | |",
        ]
        lines += [f"| `{n}` | {cell(x.answer)} | {x.score:.2f} |" for n, x in s.answers.items()]
        lines += ["", "</div>", ""]
    return lines


def _fence(text: str) -> str:
    longest = max((len(run) for run in text.split("\n") if set(run.strip()) == {"~"}), default=0)
    return "~" * max(4, longest + 1)


def prompt_lines(e: Evidence | None) -> list[str]:
    """## The prompts sent: each prompting baseline's turns for one test item, in a fence no answer can close."""
    shown = (e.prompts if e else None) or []
    if not shown:
        return []
    lines = [
        "## The prompts sent",
        "",
        (
            "Each prompting baseline's turns for the first test item, as its evaluation recorded sending them (its "
            "search's choice applied), before the model's own chat template wraps them."
        ),
        "",
    ]
    for p in shown:
        if p.error:
            lines += [f"- `{p.name}`: {cell(ERRORS.get(p.error, p.error), 200)}", ""]
            continue
        instr = f'; instruction: "{cell(p.instruction, 200)}"' if p.instruction else "; no instruction"
        lines += [f"**`{p.name}`**: {p.rule}{instr}.", ""]
        body = "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in p.messages)
        fence = _fence(body)
        lines += [f"{fence}text", body, fence, ""]
    return lines

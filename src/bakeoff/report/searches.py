"""The searches and their budget, as the report words them: every arm's search as spent (trials, tokens, steps,
seconds, a shared search's share), the data-value curve's points, what each search chose against its plain recipe, and
a tie among its best trials."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bakeoff.core.records import Recipe, Search
from bakeoff.decide.run_record import by_name

if TYPE_CHECKING:
    from bakeoff.decide.curve_record import Curve
    from bakeoff.decide.sizing_record import Spend


def _values(values: dict) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


def search_lines(df: pd.DataFrame, searches: dict) -> list[str]:
    """What each variant's search did, from its record (``searches``: runs/<name>/tuned.json, ``Decision.searches``):
    the plain recipe's validation score against the choice (measured on the validation split, each at the full
    max_steps), and any widened range."""
    out = []
    for name in df[df["kind"] == "variant"]["name"]:
        rec = searches.get(name) or Search()
        if rec.shared_from:  # its values come from another arm's trials, none of which is its own run
            lender = rec.shared_from
            out.append(
                f"- `{name}`: trains at `{lender}`'s choice (`tune.share`); it cannot adopt a trial, since "
                f"every trial of that search trained `{lender}`, not its own setup, so it trains again."
            )
            continue
        if not rec.trials:
            continue
        recipe, said = rec.recipe or Recipe(), []
        if recipe.value is not None and rec.best_value is not None:
            judged = {"metric": "(task metric)"}.get(rec.objective, rec.objective or "")
            said.append(
                f"the plain recipe ({_values(recipe.values)}) scored {recipe.value:.4g} {judged} on "
                f"validation at {rec.trial_steps} steps; "
                + (
                    f"the search chose {_values(rec.values)}, which scored {rec.best_value:.4g} there"
                    if rec.beat_recipe
                    else "no trial scored better there, so the recipe trains"
                )
            )
        tie = tied_search(rec)
        if tie:
            said.append(tie)
        adopted = by_name(df)[name].adopted_from_trial
        if adopted == adopted and adopted is not None:
            said.append(
                f"its training run is the search's trial {int(adopted)}, the same run, "
                "adopted rather than trained again (its speed and memory were measured in the tune stage's "
                "process)"
            )
        for w in rec.widened:
            n = w.trials_outside
            ran = (
                ""
                if n is None
                else f" ({n} trial{'s' if n != 1 else ''} ran beyond {w.from_:.3g})"
                if n
                else f" (no trial ran beyond {w.from_:.3g}: the wider range was not tried)"
            )
            said.append(
                f"a choice at the {w.side} edge widened {w.param}'s range from {w.from_:.3g} to {w.to:.3g}{ran}"
            )
        if said:
            out.append(f"- `{name}`: " + "; ".join(said) + ".")
    return ["", "**Searches** (on the validation split, the test split never read):", *out] if out else []


def tied_search(rec: Search) -> str | None:
    """A search whose finished trials all scored the same on validation did not discriminate: its choice is the
    recipe's by default, and what it cost was spent without informing the choice (said, not priced as a gain)."""
    done = [t for t in rec.trials if t.state == "complete" and t.value is not None]
    if len(done) < 2 or len({round(float(t.value), 6) for t in done}) > 1:
        return None
    spent = sum(t.wall_s or 0 for t in done)
    return (
        f"**its {len(done)} trials all scored {float(done[0].value):.4g} on validation: the search did not "
        f"discriminate**, so its choice is no better informed than the recipe, and its {spent:,.0f} s here "
        f"({sum(t.tokens_seen or 0 for t in done):,} tokens) were spent without informing it"
    )


def derived_budget_words(df: pd.DataFrame, searches: dict) -> str:
    """A derived arm's search capped at its parent's search's tokens (``bakeoff.search.space.token_budget``)."""
    out = []
    for name in df["name"]:
        rec = searches.get(name) or Search()
        if str(rec.token_budget_from or "").endswith("'s search"):
            out.append(
                f"`{name}`'s trials are judged on the task metric, which has no value at the pruning rungs, "
                f"so none is cut short: its search stopped at the first trial that took it past the "
                f"{rec.token_budget:,.0f} tokens {rec.token_budget_from} trained "
                f"({rec.tune_tokens:,.0f} in {len(rec.trials)} trials). "
            )
    return "".join(out)


def budget_lines(
    df: pd.DataFrame, spent: dict, tc=None, curve: Curve | None = None, searches: dict | None = None
) -> list[str]:
    """Every arm's search as spent: trials, tokens, steps and seconds; a shared search's users each carry a share;
    then the data-value curve's points, each arm's smaller shares trained (or prompted) and scored. ``searches``:
    each run's search record (``Decision.searches``)."""
    searches = searches or {}
    rows = [_budget_row(df, name, spent.get(name), searches.get(name) or Search()) for name in df["name"]]
    for name, b in ((curve.budget if curve else None) or {}).items():
        rows.append(
            f"| {name} | data-value curve: {b.points} smaller shares | – | {b.tokens:,.0f} | "
            f"{b.steps:,.0f} | {b.train_s + b.eval_s:,.0f} | – | – | – |"
        )
    if not rows:
        return []
    rule = ""
    if tc is not None:
        rule = (
            f"The budget: {tc.trials} trials a search (`tune.budget: trials`; `tune.budget: tokens` with "
            "`tune.budget_tokens` gives every arm the same training tokens instead). "
            if tc.budget == "trials"
            else f"The budget: {tc.budget_tokens:,.0f} training tokens a search, at most {tc.trials} trials "
            "(`tune.budget: tokens`). "
        )
    rule += derived_budget_words(df, searches)
    return [
        "## Searches and their budget",
        "",
        rule + "Every search on the validation split (the test split never read). Tokens, steps and seconds are "
        "the "
        "whole search less the trial a training run adopted (that one is the arm's own training, counted there); "
        "a search several arms use (`tune.share`) is split evenly among them, each carrying its share into its "
        "all-in cost.",
        "",
        "| arm | search | trials | tokens | steps | seconds | share | tokens carried | seconds carried |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        *search_lines(df, searches)[1:],
        "",
    ]


def _budget_row(df: pd.DataFrame, name: str, b: Spend | None, rec: Search) -> str:
    """One arm's row of the budget table: its search as spent, or why it has none."""
    if b and b.trials:
        of = "own" if b.own else f"`{b.lender}`'s"
        return (
            f"| {name} | {of} | {b.trials} | {b.tokens:,.0f} | {b.steps:,.0f} | {b.seconds:,.0f} | "
            f"{b.share:.0%} | {b.carried_tokens:,.0f} | {b.carried_seconds:,.0f} |"
        )
    if rec.stopped:  # a search that crashed or ran out of memory
        why = (rec.error or "").splitlines()[0][:200] if rec.error else ""
        return f"| {name} | **not run** ({rec.status}: {why}; params.yaml's values trained) | 0 |" + " – |" * 6
    if rec.shared_from or (rec.status == "ok" and rec.trials):  # the arm did not run
        lender = rec.shared_from or name
        return (
            f"| {name} | `{lender}`'s, unused (the arm did not run: {_status(df, name)}) | – | – | – | – | 0% | 0 | 0 |"
        )
    why = (rec.skipped or "no search").rstrip(".")  # no search for this arm (tune.trials 0, or a baseline without one)
    return f"| {name} | none ({why}) | 0 | – | – | – | – | – | – |"


def _status(df: pd.DataFrame, name: str) -> str:
    row = by_name(df).get(name)
    return str(row.status) if row is not None else "missing"

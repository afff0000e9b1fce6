"""What an arm costs on the sizing target, all in, and what serving it costs against prompting (projections).

    spent = budget(names)                               # every arm's search as spent, a shared search split
    c = all_in("dpo", fits, spent, seen, parents)       # training + its search (shared, and bought alone) + its parent
    be = break_even(prompt_tokens, usd_per_1k, card)    # requests a day above which its own card costs less
    card = serving_card(shape, gpus, margin, overhead)  # the card that would serve the fine-tuned target

Pure arithmetic over run records and sizing fits (``bakeoff.decide.sizing``); no torch. Every figure here is an estimate
on assumed inputs (MFU, prices): the report shows it as a range, to two significant figures.
"""

from __future__ import annotations

from bakeoff.core.records import Search, read_search
from bakeoff.decide.memory import GB, Shape
from bakeoff.decide.sizing import GPU
from bakeoff.decide.sizing_record import AllIn, SizedFit, Spend


def budget(names: list[str], idle: set[str] | frozenset = frozenset()) -> dict[str, Spend]:
    """What each arm's search spent, from its record (runs/<name>/tuned.json): trials, training tokens, optimizer
    steps and seconds, the adopted trial (the arm's own training run, counted there, not here) left out. A search
    used by several arms (``tune.share``) is split evenly among them: each carries its share (``share``,
    ``carried_*``); an arm without a search carries nothing, and an arm that never ran (``idle``: skipped) takes no
    share of the search it would have used."""
    recs = {n: read_search(n) for n in names}
    lender = {n: r.shared_from or n for n, r in recs.items() if r.trials and n not in idle}
    out = {}
    for n in names:
        if n not in lender:
            out[n] = Spend.from_dict(
                {
                    "own": True,
                    "lender": None,
                    "share": 1.0,
                    "trials": 0,
                    "tokens": 0,
                    "steps": 0,
                    "seconds": 0.0,
                    "carried_tokens": 0.0,
                    "carried_seconds": 0.0,
                }
            )
            continue
        src = recs[lender[n]] if recs.get(lender[n], Search()) != Search() else recs[n]  # the lender's, if written
        trials, adopted, spent = src.trials, src.adopt.get("trial"), src.spent()
        tokens = sum(t.tokens_seen or 0 for t in spent)
        steps = sum(t.steps for t in spent)
        seconds = round(sum(t.wall_s or 0 for t in spent), 1)
        users = sum(1 for m in lender if lender[m] == lender[n])
        share = 1.0 / users
        out[n] = Spend.from_dict(
            {
                "own": lender[n] == n,
                "lender": lender[n],
                "share": share,
                "trials": len(trials),
                "adopted_trial": adopted,
                "tokens": tokens,
                "steps": steps,
                "seconds": seconds,
                "carried_tokens": tokens * share,
                "carried_seconds": round(seconds * share, 1),
            }
        )
    return out


def all_in(name: str, fits: dict[str, SizedFit], spent: dict[str, Spend], seen: dict, parents: dict) -> AllIn | None:
    """What variant ``name`` costs on the sizing target, all in: its training on the cheapest card that holds it,
    its share of the search it used priced per token like its training (``spent``: ``budget``; ``seen``: tokens its
    training saw here), and, for a derived variant, its parent's all-in cost (``parents``: name → parent). Each as
    a range: at sizing.mfu (``usd``) and at sizing.mfu_low (``usd_high``). None when the target fits no card or the
    variant did not train here (nothing to price its search share against)."""
    f = fits.get(name) or SizedFit()
    if f.cheapest_usd is None or not seen.get(name):  # no card holds it, or it never trained here
        return None
    train, train_high = f.cheapest_usd, f.cheapest_usd_high or f.cheapest_usd
    s = spent.get(name) or Spend()
    tokens = seen.get(name) or 0.0
    ratio = (s.carried_tokens or 0.0) / tokens if tokens else 0.0
    parent = parents.get(name)
    up = all_in(parent, fits, spent, seen, parents) if parent else None
    search, search_high = train * ratio, train_high * ratio
    up_usd, up_high = (up.usd, up.usd_high) if up else (0.0, 0.0)
    whole = (s.tokens or 0.0) / tokens if tokens else 0.0  # bought alone: the whole search (and the parent's)
    return AllIn.from_dict(
        {
            "variant": name,
            "card": f.cheapest_gpu,
            "train_usd": train,
            "train_usd_high": train_high,
            "search_usd": search,
            "search_usd_high": search_high,
            "smallest_card": f.gpu,
            "smallest_gpus": f.gpus,
            "smallest_usd": f.usd,
            "smallest_usd_high": f.usd_high,
            "need_gb": f.need_gb,
            "target": f.target,
            "parent": parent,
            "parent_usd": up_usd,
            "parent_usd_high": up_high,
            "usd": train + search + up_usd,
            "usd_high": train_high + search_high + up_high,
            "lender": s.lender,
            "search_users": round(1 / s.share) if s.share else 1,
            "alone_usd": train * (1 + whole) + (up.alone_usd if up else 0.0),
            "alone_usd_high": train_high * (1 + whole) + (up.alone_usd_high if up else 0.0),
        }
    )


def break_even(prompt_tokens: float, usd_per_1k: float, card: dict | None, per_request: float | None = None) -> dict:
    """Pay-per-token prompting against the fine-tuned model on its own card: prompting pays ``prompt_tokens`` ×
    price per request (or ``per_request``: an endpoint's measured tokens at its own input and output prices);
    the card ($/hour, ``card``: {name, usd_per_hour}) costs 24 hours a day whatever the traffic. Returns the daily
    requests above which the card costs less (None: free prompt tokens or no card)."""
    if per_request is None and (not usd_per_1k or not prompt_tokens):
        return {}
    per_request = prompt_tokens / 1000 * usd_per_1k if per_request is None else per_request
    if not card or not per_request:
        return {}
    per_day = 24 * card["usd_per_hour"]
    return {
        "serve_card": card["name"],
        "serve_usd_per_hour": card["usd_per_hour"],
        "serve_usd_per_day": per_day,
        "prompt_usd_per_request": per_request,
        "break_even_requests_per_day": per_day / per_request,
    }


def serving_card(
    shape: Shape, gpus: list[GPU], margin: float, overhead_bytes: float, name: str | None = None
) -> GPU | None:
    """The card that serves the fine-tuned ``shape``: ``name`` from the catalog, else the cheapest per hour whose
    memory less ``margin`` holds its weights in bf16 and the CUDA overhead (the KV cache of one request besides is
    small at these lengths; a projection, not measured)."""
    if name:
        return next((g for g in gpus if g.name == name), None)
    need = shape.params * 2 + overhead_bytes
    held = [g for g in gpus if g.memory_gb * GB * (1 - margin) >= need]
    return min(held, key=lambda g: (g.usd_per_hour, g.memory_gb)) if held else None

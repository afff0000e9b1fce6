"""The card table before any training: one model you will really fine-tune, one technique, every card of the catalog
(``bakeoff size``).

    bakeoff size --model llama-3.1-8b --technique qlora --seq-len 2048 --micro-batch 1

Each row is a card of ``sizing.gpus``: the memory one training process needs (projected by ``bakeoff.decide.memory``
from the model's dimensions in ``sizing.targets``) against the card's less ``sizing.margin``, whether one card holds
it (else how many, sharded), and the hours and dollars to train the tokens priced there at the technique's
utilisation at that size (``bakeoff.decide.speed``: the GPU check's row where one was measured, else assumed) with
the range's pessimistic end. Every figure is a projection, none is measured here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from bakeoff.core.errors import UserError
from bakeoff.decide.memory import GB, Setup, Shape
from bakeoff.decide.sizing import (
    GPU,
    Fit,
    Headroom,
    Priced,
    _resolved,
    catalog,
    fit,
    table,
    targets,
    train_tokens,
)
from bakeoff.decide.sizing_record import MfuSource
from bakeoff.decide.speed import Speed, measured_speeds, speed_at
from bakeoff.report.sizing import speed_words

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


@dataclass
class Cards:
    """The table and what it was projected for."""

    target: Shape
    variant: str
    technique: str
    seq_len: int
    micro_batch: int
    tokens: float
    tokens_from: str
    speed: Speed
    fits: list[tuple[GPU, Fit]]


def pick(params: Params, model: str, technique: str):
    """The target shape named ``model`` and the variant that ``technique`` names (a variant's name, else the first
    variant of that technique): its settings (rank, precision, levers) are what the memory depends on."""
    shapes = {s.name.lower(): s for s in targets(params)}
    shape = shapes.get(model.lower())
    if shape is None:
        raise UserError(
            f"--model {model}: not in sizing.targets of params.yaml (there: {', '.join(shapes)}); add "
            "its dimensions there (layers, hidden, intermediate, heads, kv_heads, vocab): nothing is "
            "downloaded"
        )
    variants = params.variants
    if technique in variants:
        return shape, technique, variants[technique]
    named = [n for n, v in variants.items() if v.technique == technique]
    if not named:
        have = sorted({v.technique for v in variants.values()} | set(variants))
        raise UserError(
            f"--technique {technique}: no variant of params.yaml has it (a technique or a variant's "
            f"name: {', '.join(have)}); add one under variants:"
        )
    return shape, named[0], variants[named[0]]


@dataclass(frozen=True)
class Asked:
    """What ``bakeoff size`` is asked: ``model`` trained with ``technique`` (a variant's name or a technique), at
    ``seq_len`` × ``micro_batch`` (None: sizing's target, else the variant's own), pricing ``tokens`` (None:
    cost.train_tokens, else what the variant saw in this run's records, else none: memory only)."""

    model: str
    technique: str
    seq_len: int | None = None
    micro_batch: int | None = None
    tokens: float | None = None


def cards(
    params: Params,
    asked: Asked,
    records: dict | None = None,
    speeds: list[dict] | None = None,
    answer_tokens: int | None = None,
) -> Cards:
    """Every card of the catalog for what is ``asked`` (``bakeoff size``); ``records``: this run's training records;
    ``answer_tokens``: the task's longest answer, the logits a labelled loss holds (None: every token's)."""
    model, technique, seq_len, micro_batch, tokens = (
        asked.model,
        asked.technique,
        asked.seq_len,
        asked.micro_batch,
        asked.tokens,
    )
    s = params.sizing
    shape, name, v = pick(params, model, technique)
    seq = int(seq_len or s.target_seq_len or v.train.max_seq_len)
    mb = int(micro_batch or s.target_micro_batch or v.train.micro_batch)
    setup = Setup.from_variant(
        v, _resolved(v.train.precision), parent=params.variants.get(v.parent), answer_tokens=answer_tokens
    ).at(seq, mb)
    speed = speed_at(
        s, shape, setup.technique, setup.gradient_checkpointing, measured_speeds() if speeds is None else speeds
    )
    priced = train_tokens(params, records or {}, tokens)[name]  # the report's rule: the same tokens priced
    source = (
        "--tokens"
        if tokens
        else "cost.train_tokens"
        if params.cost.train_tokens
        else f"what `{name}` trained on in runs/"
        if priced
        else "none: pass --tokens to price the time"
    )
    room, at = Headroom(s.margin, s.cuda_overhead_gb * GB), Priced(priced, speed.mfu, speed.mfu_low)
    rows = [(g, fit(shape, setup, [g], room, at, name)) for g in catalog(params)]
    return Cards(shape, name, setup.technique, seq, mb, priced, source, speed, rows)


def lines(c: Cards, margin: float) -> list[str]:
    """The table in Markdown, with what it was projected for above it and how below it."""
    head = (
        f"Projected, not measured: `{c.target.name}` trained with `{c.variant}` ({c.technique}), "
        f"{c.micro_batch} × {c.seq_len} tokens per forward pass, one process per card, {margin:.0%} of each "
        f"card kept free; {c.tokens:,.0f} training tokens priced ({c.tokens_from})."
    )
    out = [
        head,
        "",
        "| card | card GB | need GB | holds it | est. hours | est. $ | est. $ at the low utilisation |",
        "|---|---|---|---|---|---|---|",
    ]
    for g, f in c.fits:
        holds = "no" if f.gpu is None else "yes" if f.gpus == 1 else f"{f.gpus} cards, sharded"
        hours = "–" if f.hours is None else f"{f.hours:,.2f}"
        usd = "–" if f.usd is None else f"{f.usd:,.2f}"
        high = "–" if f.usd_high is None else f"{f.usd_high:,.2f}"
        out.append(f"| {g.name} | {g.memory_gb:g} | {f.need_gb:.1f} | {holds} | {hours} | {usd} | {high} |")
    other = "; on every other card assumed the same" if c.speed.how == "measured" else ""
    out += [
        "",
        (
            f"Utilisation {c.speed.mfu:.1%}, {speed_words(MfuSource.from_dict(c.speed.__dict__))}{other}; the low end "
            f"{c.speed.mfu_low:.1%}. "
            "Prices: sizing.gpus in params.yaml. The memory model: bakeoff.decide.memory; the conventions: "
            "bakeoff.core.measure."
        ),
    ]
    return out


def every_variant(params: Params, asked: Asked, records: dict, answer_tokens: int | None = None) -> list[Fit]:
    """Every target of ``sizing.targets`` × every variant of params.yaml at ``asked``'s sequence length, micro-batch
    and tokens (its model and technique unset): the table ``bakeoff size`` prints without ``--model``."""
    from dataclasses import replace

    s = params.sizing
    params = replace(
        params,
        sizing=replace(
            s,
            target_seq_len=asked.seq_len or s.target_seq_len,
            target_micro_batch=asked.micro_batch or s.target_micro_batch,
        ),
    )
    return table(params, train_tokens(params, records, asked.tokens), answer_tokens=answer_tokens)


def table_lines(fits: list[Fit], margin: float) -> list[str]:
    """Every target × variant in Markdown, with how it was projected below it."""
    lines = [
        ("| target | variant | technique | need GB | smallest GPU | est. hours | est. $ | est. $ with parent | MFU |"),
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for f in fits:
        gpu = "none fits" if f.gpu is None else (f.gpu if f.gpus == 1 else f"{f.gpus}× {f.gpu} (sharded)")
        hours = "–" if f.hours is None else f"{f.hours:.2f}"
        usd = "–" if f.usd is None else f"{f.usd:,.2f}"
        cum = f"{f.cumulative_usd:,.2f} (+ {f.parent})" if f.parent and f.cumulative_usd is not None else "–"
        speed = f"{f.mfu:.1%} {(f.mfu_source or {}).get('how', '')}" if f.mfu else "–"
        lines.append(
            f"| {f.target} | {f.variant} | {f.technique} | {f.need_gb:.1f} | {gpu} | {hours} | {usd} "
            f"| {cum} | {speed} |"
        )
    return lines + [
        "",
        (
            f"Projected, not measured: one training process, {margin:.0%} of each card kept free; time "
            "at each technique's utilisation at the target (sizing.mfu_from; measured: the GPU check's "
            "nearest row, reports/bench/gpu.json; assumed: sizing.mfu). The memory model: "
            "bakeoff.decide.memory."
        ),
    ]

"""The report's GPU sizing section: the memory model against this run's peaks and the GPU check's, each technique's
FLOP utilisation at the target and where it comes from, the target × variant pivot and every variant all in
(projections, said so; presentation only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from bakeoff.decide.sizing_record import AllIn, Calibration, GpuCheck, MfuSource, Shape, SizedFit, Sizing

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def sizing_lines(
    params: Params, sized: Sizing, costs: dict[str, AllIn] | None = None, images: dict | None = None
) -> list[str]:
    """The memory model against this run's measured peaks, and its projection to the target shapes as a pivot
    (targets × variants → need, smallest card, cheapest card and its cost range); every fit in sizing.json."""
    from bakeoff.report.tables import details

    lines = calibration_lines(sized.calibration or Calibration())
    s = params.sizing
    tok = (
        f"{params.cost.train_tokens:,.0f} training tokens (cost.train_tokens)"
        if params.cost.train_tokens
        else "the tokens each variant saw here"
    )
    seq = s.target_seq_len or "each variant's max_seq_len"
    mb = s.target_micro_batch or "each variant's micro_batch"
    gpu = sized.gpu_check or GpuCheck()
    on = f"measured on an {gpu.device or 'GPU'} by benchmarks/gpu_check.py at {gpu.commit or '?'}"
    fits = sized.fits or []
    lines += [
        "",
        (
            f"**Projected, not measured**: each target at {seq} tokens per row, micro-batch {mb}, "
            f"{s.cuda_overhead_gb:g} GB of CUDA context per process (`sizing.cuda_overhead_gb`, "
            f"{on if gpu.overhead else 'assumed'}), "
            f"{s.margin:.0%} of each card kept free. The smallest card holds the job; the cheapest card costs "
            "least for the whole job (a faster card can cost less in all); its training cost is for "
            f"{tok}, at each technique's FLOP utilisation at the target, down to "
            f"{'half of it' if s.mfu_low is None else mfu_text(s, low=True)} (`sizing.mfu_low`), at the "
            "example prices of `sizing.gpus`; two significant figures. The verdict's all-in cost adds the "
            "search and the parent. Every fit, with its utilisation and where it comes from: "
            "`reports/sizing.json`." + memory_check_words(gpu)
        ),
        "",
        *speed_lines(fits, s.target),
        "",
    ]
    if images and "memory_at_target" in images:
        lines += [
            f"![projected GPU memory per variant on {s.target} against the cards](plots/memory_at_target.png)",
            "",
        ]
    table = pivot(fits)
    return (
        lines
        + details(f"Every target and variant: memory, smallest and cheapest card ({len(table) - 2} fits)", table)
        + all_in_lines(costs)
        + [""]
    )


def calibration_lines(calib: Calibration) -> list[str]:
    """The memory model against this run's measured peaks: each variant's predicted and measured memory, and the
    fitted overhead."""
    kind = calib.measured_on or "this machine's peaks"
    lines = [
        "## GPU sizing",
        "",
        (
            "Memory model (`src/bakeoff/decide/sizing.py`): weights by dtype, gradients, optimizer state, "
            "activations and "
            f"a fixed overhead. Measured here, against this run's peaks ({kind}):"
        ),
        "",
        "| variant | technique | tokens/row | model GB | + overhead = predicted GB | measured GB | error |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in calib.rows or []:
        lines.append(
            f"| {r.variant} | {r.technique} | {r.seq_len} | {r.model_gb:.2f} | "
            f"{r.predicted_gb:.2f} | {r.measured_gb:.2f} | {r.error:+.1%} |"
        )
    if calib.rows:
        what = (
            "the Python process and its libraries on this CPU: not a GPU figure, and not used below"
            if "CPU" in kind
            else "CUDA context and workspaces"
        )
        lines += [
            "",
            (f"Fitted overhead {calib.overhead_gb:.2f} GB ({what}); mean absolute error {calib.mean_abs_error:.1%}."),
        ]
    return lines


def pivot(fits: list[SizedFit]) -> list[str]:
    """Targets × variants: the memory each needs, the smallest card that holds it, the cheapest card for the whole
    job and its training cost range there (projections)."""
    from bakeoff.report.verdict import sig, usd_range

    variants = list(dict.fromkeys(f.variant for f in fits))
    targets = list(dict.fromkeys(f.target for f in fits))
    at = {(f.target, f.variant): f for f in fits}

    def row(t: str, v: str, f: SizedFit) -> str:
        small = "none fits" if not f.gpu else f.gpu if f.gpus == 1 else f"{f.gpus}× {f.gpu}"
        cheap = f.cheapest_gpu or "–"
        usd = "–" if f.cheapest_usd is None else usd_range(f.cheapest_usd, f.cheapest_usd_high)
        return f"| {t} | `{v}` | {sig(f.need_gb)} GB | {small} | {cheap} | {usd} |"

    table = [
        "| target | variant | needs | smallest card | cheapest card | training there |",
        "|---|---|---|---|---|---|",
    ]
    for t in targets:
        table += [row(t, v, at[(t, v)]) for v in variants if (t, v) in at]
    return table


def memory_check_words(gpu: GpuCheck) -> str:
    """How close the memory model came to the GPU check's CUDA peaks: in sample (the model revised on them) and out
    of sample (the model as it stood when they were measured)."""
    if not gpu.peaks:
        return ""
    said = (
        f" The memory model is within 10% of {gpu.within_10} of the {gpu.peaks} CUDA peaks "
        f"benchmarks/gpu_check.py measured on an {gpu.device or 'GPU'} (QLoRA, LoRA and full fine-tuning "
        "at Llama shapes of 1B and 8B parameters, `reports/bench/gpu.json`)"
    )
    out = gpu.out_of_sample
    if not out:
        return said + "."
    return (
        said + f", largest error {gpu.largest:.0%}: in sample, as it was revised on these peaks. Out of "
        f"sample ({out.how}): within 10% of {out.within_10} of {out.peaks}, largest error "
        f"{out.largest:.0%}."
    )


def speed_words(src: MfuSource) -> str:
    """Where a utilisation comes from (a fit's ``mfu_source``, ``bakeoff.decide.speed.Speed``), in words."""
    basis, technique = src.basis, src.technique or "this technique"
    if basis in ("row", "lora_row"):
        s = src.shape or Shape()
        gap = s.flop_params / s.target_flop_params if s.target_flop_params else 1.0
        scaled = (
            "" if 0.8 < gap < 1.25 else f", applied to {s.target_flop_params / 1e9:.1f}B unscaled (the nearest size)"
        )
        where = (
            f"gpu_check.py, {s.part} {s.row}: {(s.flop_params or 0) / 1e9:.1f}B parameters, "
            f"{s.micro_batch} × {s.seq_len} tokens{scaled}"
        )
        if basis == "row":
            return f"measured on an {src.device or 'GPU'} ({where})"
        return f"assumed: DPO was never measured; LoRA's figure at this size ({where})"
    why = {
        "params": "sizing.mfu_from is params",
        "no_record": "no GPU-check record (reports/bench/gpu.json)",
        "unmeasured": f"{technique} was never measured by the GPU check",
    }
    return f"assumed: sizing.mfu ({why.get(basis, basis)})" if basis else (src.why or "")


def card_words(src: MfuSource) -> str:
    """The card a measured utilisation is priced on, where it is not the card measured ('' where it is)."""
    return f"assumed the same on {src.other_card}" if src.other_card else (src.card or "")


MEASURED_ON = {"cuda_reserved": "CUDA peak reserved", "cpu_rss": "peak resident memory (RSS) on this machine's CPU"}
OUT_OF_SAMPLE = {"as_run": "the memory model as it stood when the check ran, before it was revised on these peaks"}


def _worded_fit(f: SizedFit) -> SizedFit:
    src = f.mfu_source
    if not src or not src.basis:
        return f
    src = src.with_(why=speed_words(src))
    return f.with_(mfu_source=src.with_(card=card_words(src)) if src.other_card else src)


def worded(sized: Sizing) -> Sizing:
    """``sized`` (``bakeoff.decide.sizing.report_data``) as the report shows it and sizing.json holds it: each fit's
    ``mfu_source`` with its ``why`` and ``card`` in words, what the calibration and the GPU check measured in words."""
    calib, gpu = sized.calibration, sized.gpu_check
    if calib and calib.measured_on in MEASURED_ON:
        sized = sized.with_(calibration=calib.with_(measured_on=MEASURED_ON[calib.measured_on]))
    out = gpu.out_of_sample if gpu else None
    if out and out.how in OUT_OF_SAMPLE:
        sized = sized.with_(gpu_check=gpu.with_(out_of_sample=out.with_(how=OUT_OF_SAMPLE[out.how])))
    return sized.with_(fits=[_worded_fit(f) for f in sized.fits or []])


def speed_lines(fits: list[SizedFit], target: str | None) -> list[str]:
    """Each technique's utilisation at the sizing target, and where it comes from (measured row or assumed)."""
    seen, rows = set(), []
    for f in fits:
        src = f.mfu_source
        if not src or f.target != target or f.technique in seen:
            continue
        seen.add(f.technique)
        card = f"; {card_words(src)}" if card_words(src) else ""
        rows.append(f"| {f.technique} | {f.mfu:.1%} to {src.mfu_low:.1%} | {speed_words(src)}{card} |")
    if not rows:
        return []
    return [
        f"FLOP utilisation at `{target}` (HFU: recompute counted), per technique:",
        "",
        "| technique | utilisation | from |",
        "|---|---|---|",
        *rows,
    ]


def all_in_lines(costs: dict[str, AllIn] | None) -> list[str]:
    """Each variant's all-in cost on the sizing target, with its search shared and bought alone (projections)."""
    from bakeoff.report.verdict import usd_range

    if not costs:
        return []
    lines = [
        "",
        (
            "All in on the sizing target (training on the cheapest card + its share of the search it used + its "
            "parent, each over its utilisation range above); bought alone, an arm pays its whole search, and its "
            "parent's:"
        ),
        "",
        "| variant | card | training | search share | parent | all in | bought alone |",
        "|---|---|---|---|---|---|---|",
    ]
    for n, c in costs.items():
        parent = f"{usd_range(c.parent_usd, c.parent_usd_high)} ({c.parent})" if c.parent else "–"
        lines.append(
            f"| {n} | {c.card} | {usd_range(c.train_usd, c.train_usd_high)} | "
            f"{usd_range(c.search_usd, c.search_usd_high) if c.search_usd else '–'} | {parent} | "
            f"{usd_range(c.usd, c.usd_high)} | {usd_range(*c.alone)} |"
        )
    return lines


def mfu_text(s, low: bool = False) -> str:
    """``sizing.mfu`` (``low``: ``sizing.mfu_low``) in words: "30%", or "full 32%, lora 17%, qlora 11%" (DPO at
    LoRA's unless named); the low end unset is "half of it" or "half of each"."""
    from bakeoff.core.techniques import FACTS

    m = s.mfu_low if low else s.mfu
    if low and m is None:
        return "half of " + ("each" if isinstance(s.mfu, dict) else "it")
    if not isinstance(m, dict):
        return f"{m:.0%}"
    of = s.mfu_low_for if low else s.mfu_for
    return ", ".join(f"{t} {of(t):.0%}" for t, f in FACTS.items() if not f.like or t in m)

"""GPU sizing: an analytic memory model per technique, calibrated on this run, projected to real model shapes.

    bakeoff size                                         # every target × every variant, before any training
    bakeoff size --model llama-3.1-8b --technique qlora  # every card for one of them (bakeoff.run.cards)

The memory model itself is ``bakeoff.decide.memory``; here it meets the GPU catalog: the smallest card that holds
each target, the cheapest for the whole job, and the time and cost to train there (projections).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bakeoff.core.flops import hardware_flops_per_token
from bakeoff.core.records import DataStats, Generation, Longest, RunRecord
from bakeoff.core.techniques import facts
from bakeoff.decide.memory import GB, Setup, Shape, calibrate, estimate
from bakeoff.decide.speed import GPU_CHECK, measured_speeds, on_card, speed_at

if TYPE_CHECKING:
    from bakeoff.core.sections import Params

# ---------------------------------------------------------------- calibration


# ---------------------------------------------------------------- fitting


@dataclass(frozen=True)
class GPU:
    name: str
    memory_gb: float
    usd_per_hour: float
    bf16_tflops: float


@dataclass
class Fit:
    target: str
    variant: str
    technique: str
    need_gb: float
    gpu: str | None
    gpus: int = 1
    hours: float | None = None
    usd: float | None = None
    parts: dict = field(default_factory=dict)
    parent: str | None = None  # a derived variant's parent, whose training comes first
    cumulative_usd: float | None = None  # usd plus the parent's usd (a derived variant's whole cost)
    cheapest_gpu: str | None = None  # the lowest price for the job among the cards that hold it (one process)
    cheapest_hours: float | None = None
    cheapest_usd: float | None = None
    hours_high: float | None = None  # the same job at sizing.mfu_low (the pessimistic end); usd is at sizing.mfu
    usd_high: float | None = None
    cheapest_usd_high: float | None = None
    mfu: float | None = None  # the utilisation the time divides by (``speed``)
    mfu_source: dict = field(default_factory=dict)  # bakeoff.decide.speed.Speed: measured (which row, card) or assumed


def smallest_fit(need_bytes: float, gpus: list[GPU], margin: float) -> GPU | None:
    """The cheapest-to-hold (least memory, then lowest price) GPU whose memory less ``margin`` holds the need."""
    fits = [g for g in gpus if g.memory_gb * GB * (1 - margin) >= need_bytes]
    return min(fits, key=lambda g: (g.memory_gb, g.usd_per_hour)) if fits else None


def train_hours(
    shape: Shape, technique: str, tokens: float, gpu: GPU, mfu: float, checkpointing: bool = False
) -> float:
    """Estimated hours to train ``tokens``: hardware FLOPs (recompute included) at ``mfu`` of the card's peak bf16
    FLOP/s, ``mfu`` being the utilisation of a run without checkpointing (an assumption, not a measurement: set
    sizing.mfu from benchmarks/gpu_check.py on your card; conventions in ``bakeoff.core.measure``)."""
    flops = hardware_flops_per_token(shape.flop_params, technique, checkpointing)
    return tokens * flops / (gpu.bf16_tflops * 1e12 * mfu) / 3600


# ---------------------------------------------------------------- from params and this run


def targets(params: Params) -> list[Shape]:
    return [
        Shape(
            t["name"],
            int(t["layers"]),
            int(t["hidden"]),
            int(t["intermediate"]),
            int(t["heads"]),
            int(t["kv_heads"]),
            int(t["vocab"]),
            bool(t.get("tied", False)),
        )
        for t in params.sizing.targets
    ]


def catalog(params: Params) -> list[GPU]:
    return [
        GPU(g["name"], float(g["memory_gb"]), float(g["usd_per_hour"]), float(g["bf16_tflops"]))
        for g in params.sizing.gpus
    ]


def _resolved(precision: str) -> str:
    return "bf16" if precision == "auto" else precision


@dataclass(frozen=True)
class Headroom:
    """What each card keeps free: ``margin`` of its memory, and ``overhead_bytes`` (the CUDA context, the allocator)."""

    margin: float
    overhead_bytes: float


@dataclass(frozen=True)
class Priced:
    """What a fit prices: ``tokens`` trained at ``mfu``, and again at ``mfu_low`` (the pessimistic end of the range;
    None: half of ``mfu``)."""

    tokens: float
    mfu: float
    mfu_low: float | None = None


def fit(shape: Shape, setup: Setup, gpus: list[GPU], room: Headroom, priced: Priced, variant: str = "") -> Fit:
    """The smallest card that holds one training process; failing that, the fewest of the largest card with
    weights, gradients and optimizer state sharded across them (FSDP / ZeRO-3). Beside it, the cheapest card for
    the job among those that hold it (a faster card may cost less in all though it costs more per hour), and both
    costs again at the pessimistic utilisation."""
    margin, tokens, mfu, mfu_low = room.margin, priced.tokens, priced.mfu, priced.mfu_low
    e = estimate(shape, setup, room.overhead_bytes)
    gpu, n = smallest_fit(e.total, gpus, margin), 1
    if gpu is None and gpus:
        big = max(gpus, key=lambda g: g.memory_gb)
        for n in (2, 4, 8, 16, 32, 64):
            sharded = (e.weights + e.gradients + e.optimizer) / n + e.activations + e.overhead
            if big.memory_gb * GB * (1 - margin) >= sharded:
                gpu = big
                break
    f = Fit(
        shape.name,
        variant,
        setup.technique,
        round(e.total / GB, 2),
        gpu.name if gpu else None,
        n if gpu else 0,
        parts=e.parts_gb(),
    )
    if gpu is not None and tokens:
        # n cards in parallel: n× the FLOP/s (communication not counted), n× the price per hour
        f.hours = round(train_hours(shape, setup.technique, tokens, gpu, mfu, setup.gradient_checkpointing) / n, 3)
        f.usd = round(f.hours * n * gpu.usd_per_hour, 2)
        low = mfu_low or mfu / 2
        f.hours_high, f.usd_high = round(f.hours * mfu / low, 3), round(f.usd * mfu / low, 2)
        held = [g for g in gpus if g.memory_gb * GB * (1 - margin) >= e.total] if n == 1 else [gpu]  # sharded: one
        hours = {
            g.name: train_hours(shape, setup.technique, tokens, g, mfu, setup.gradient_checkpointing) / n for g in held
        }
        best = min(held, key=lambda g: (hours[g.name] * g.usd_per_hour, g.memory_gb))
        usd = hours[best.name] * n * best.usd_per_hour
        f.cheapest_gpu, f.cheapest_hours, f.cheapest_usd = best.name, round(hours[best.name], 3), round(usd, 2)
        f.cheapest_usd_high = round(usd * mfu / low, 2)
    return f


def run_width(train_metrics: dict, effective_batch: int, sequences_per_row: int = 1) -> float:
    """Padded tokens per sequence in this run's micro-batches: mean non-padding tokens per sequence / (1 − padding
    share). A DPO row is two sequences (prompt + chosen, prompt + rejected), each counted in ``tokens_seen``."""
    steps = train_metrics.get("train_steps") or 0
    if not steps or not train_metrics.get("tokens_seen"):
        return 0.0
    per_row = train_metrics["tokens_seen"] / (steps * effective_batch * sequences_per_row)
    return per_row / max(1e-6, 1 - train_metrics.get("padding_share", 0.0))


def longest_answer(stats: DataStats) -> int | None:
    """The training split's longest answer in tokens, its end-of-turn token included (the data stage's record,
    data/prepared/stats.json): the logits a labelled loss holds per row."""
    longest = (stats.generation or Generation()).longest_answer or {}
    return (longest.get("train") or Longest()).tokens or None


def calibration(
    params: Params, base_config: dict, records: dict[str, RunRecord], answer_tokens: int | None = None
) -> dict:
    """Predicted against measured peak for every variant that trained here, and the fitted overhead.

    ``records``: variant name → its train.json. On CPU the measured peak is peak RSS; on CUDA, peak reserved.
    ``answer_tokens``: the longest training answer (``longest_answer``), the logits of a run whose loss computed
    them at labelled tokens alone (its record's ``kernel_choice``).
    """
    from bakeoff.core.models import resolve_precision

    shape = Shape.from_config("base", base_config)
    pairs, rows = [], []
    for name, rec in records.items():
        m = rec.metrics or {}
        if rec.status != "ok" or name not in params.variants:
            continue
        measured_mb = m.get("train_peak_reserved_mb") or m.get("train_peak_rss_mb")
        v = params.variants[name]
        # estimate() counts a DPO row as two sequences: the width it takes is per sequence
        width = run_width(m, v.train.effective_batch, 2 if facts(v.technique).pairs else 1)
        if not measured_mb or not width:
            continue
        precision = m.get("precision") or resolve_precision(v.train.precision)
        chosen = (rec.kernel_choice or {}).get("loss_logits")  # what the run's loss did, where recorded
        setup = Setup.from_variant(
            v,
            precision,
            parent=params.variants.get(v.parent),
            answer_tokens=answer_tokens,
            cuda=bool(m.get("train_peak_reserved_mb")),
            labelled=None if chosen is None else chosen == "labelled",
        ).at(round(width))
        predicted = estimate(shape, setup).total
        pairs.append((predicted, measured_mb * 1024**2))
        rows.append(
            {
                "variant": name,
                "technique": setup.technique,
                "measured_gb": round(measured_mb * 1024**2 / GB, 3),
                "model_gb": round(predicted / GB, 3),
                "seq_len": round(width),
            }
        )
    overhead, errors = calibrate(pairs)
    for r, err in zip(rows, errors):
        r["predicted_gb"] = round(r["model_gb"] + overhead / GB, 3)
        r["error"] = round(err, 4)
    cuda = any((r.metrics or {}).get("train_peak_reserved_mb") for r in records.values())
    return {
        "overhead_gb": round(overhead / GB, 3),
        "rows": rows,
        "measured_on": "cuda_reserved" if cuda else "cpu_rss",  # CUDA's peak reserved, or this CPU's peak RSS
        "mean_abs_error": round(sum(abs(e) for e in errors) / len(errors), 4) if errors else None,
    }


def table(
    params: Params,
    tokens: dict[str, float],
    overhead_bytes: float | None = None,
    answer_tokens: int | None = None,
    speeds: list[dict] | None = None,
) -> list[Fit]:
    """Every target shape × every variant: memory need, smallest card, hours and dollars for its tokens, each at
    its technique's utilisation at that target (``speed_at``; ``speeds``: the GPU check's rows, read when None).
    ``answer_tokens``: this task's longest answer, the logits a labelled loss holds (None: every token's)."""
    s = params.sizing
    overhead = s.cuda_overhead_gb * GB if overhead_bytes is None else overhead_bytes
    speeds = measured_speeds() if speeds is None else speeds
    out = []
    for shape in targets(params):
        here = {}
        for name, v in params.variants.items():
            setup = Setup.from_variant(
                v, _resolved(v.train.precision), parent=params.variants.get(v.parent), answer_tokens=answer_tokens
            ).at(s.target_seq_len, s.target_micro_batch)
            speed = speed_at(s, shape, setup.technique, setup.gradient_checkpointing, speeds)
            f = here[name] = fit(
                shape,
                setup,
                catalog(params),
                Headroom(s.margin, overhead),
                Priced(tokens.get(name, 0.0), speed.mfu, speed.mfu_low),
                name,
            )
            f.mfu, f.mfu_source = round(speed.mfu, 4), on_card(speed, f.cheapest_gpu)
        for name, f in here.items():
            parent = params.variants[name].parent
            f.parent = parent
            own, first = f.usd, here[parent].usd if parent else 0.0
            f.cumulative_usd = None if own is None or first is None else round(own + first, 2)
        out += here.values()
    return out


def train_tokens(params: Params, records: dict[str, RunRecord], override: float | None = None) -> dict[str, float]:
    """Tokens to price per variant: ``override``, else cost.train_tokens, else what the variant saw in this run."""
    return {
        n: override
        or params.cost.train_tokens
        or ((records.get(n) or RunRecord()).metrics or {}).get("tokens_seen")
        or 0.0
        for n in params.variants
    }


def report_data(
    params: Params, base_config: dict, records: dict[str, RunRecord], answer_tokens: int | None = None
) -> dict:
    """What the report shows of sizing: the calibration on this run's peaks, every target × variant fit, and which
    of the GPU figures it assumes a GPU check measured (``gpu_check``)."""
    calib = calibration(params, base_config, records, answer_tokens)
    fits = table(params, train_tokens(params, records), answer_tokens=answer_tokens)
    return {"calibration": calib, "fits": [f.__dict__ for f in fits], "gpu_check": measured_on(params)}


def measured_on(params: Params, path: str = GPU_CHECK) -> dict:
    """What the GPU check's record says of sizing: {"device", "commit", "overhead": bool (params.yaml holds its
    ``cuda_overhead_gb``; changed by hand, it is "assumed" again), "peaks", "within_10", "largest" (the memory model
    against its CUDA peaks, in sample), "out_of_sample"}; {} where there is no record. The utilisation is read per
    fit (``measured_speeds``)."""
    import json
    from pathlib import Path

    try:
        res = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    got, s = res.get("sizing") or {}, params.sizing
    overhead = got.get("cuda_overhead_gb")
    rows = [
        r
        for part in ("8b", "mfu", "unsloth")
        for r in ((res.get(part) or {}).get("rows") or {}).values()
        if isinstance(r.get("error_vs_model"), (int, float))
    ]
    errors = [abs(r["error_vs_model"]) for r in rows]
    # the model as it stood when the peaks were measured (``as_run``, kept by a rescore): out of sample, as the
    # rescored figures are the model revised on these very peaks
    before = [
        abs(r["as_run"]["error_vs_model"])
        for r in rows
        if isinstance((r.get("as_run") or {}).get("error_vs_model"), (int, float))
    ]
    return {
        "device": (res.get("env") or {}).get("device"),
        "commit": res.get("commit"),
        "peaks": len(errors),
        "within_10": sum(e <= 0.10 for e in errors),
        "largest": max(errors, default=None),
        "out_of_sample": {
            "peaks": len(before),
            "within_10": sum(e <= 0.10 for e in before),
            "largest": max(before, default=None),
            "how": "as_run",
        }
        if before
        else None,  # the model before it was revised on these peaks
        "overhead": overhead is not None and abs(s.cuda_overhead_gb - float(overhead)) < 0.05,
    }

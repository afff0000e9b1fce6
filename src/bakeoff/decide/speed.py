"""The FLOP utilisation each time estimate divides by, taken at the target's shape: the GPU check's row of the
technique nearest the target in size (measured, on the check's card), or ``sizing.mfu`` (assumed), per fit.

    rows = measured_speeds()                                   # reports/bench/gpu.json's rows with their HFU
    speed = speed_at(params.sizing, shape, "lora", False, rows) # a Speed: mfu, its low end, measured or assumed, why
"""

from __future__ import annotations

from dataclasses import dataclass

from bakeoff.core.techniques import facts
from bakeoff.decide.memory import Shape

# benchmarks/gpu_check.py's record, committed. Not a DVC dep of compare: a copy of the project (a test's) has none,
# and a missing dep stops `dvc repro`. Sizing takes each technique's utilisation from it (sizing.mfu_from:
# gpu_check), so after a new check run `dvc repro -f compare`; where there is no record the figures are "assumed".
GPU_CHECK = "reports/bench/gpu.json"


@dataclass(frozen=True)
class Speed:
    """The FLOP utilisation one technique's time at one target divides by, and where it comes from (the report's
    ``bakeoff.report.sizing.speed_words`` says it)."""

    mfu: float
    mfu_low: float
    how: str  # "measured" (a GPU-check row) or "assumed" (sizing.mfu, or LoRA's row for DPO)
    basis: str  # one of BASES
    device: str | None = None  # the card the row was measured on
    row: str | None = None  # "<part> <row>" in reports/bench/gpu.json (the technique's own row only)
    shape: dict | None = None  # the row read: flop_params, micro_batch, seq_len, and the target's flop_params
    technique: str = ""


# where a Speed comes from: the technique's own GPU-check row; LoRA's row, for DPO (never measured); sizing.mfu,
# because sizing.mfu_from is params, because there is no GPU-check record, or because the check never ran it
BASES = ("row", "lora_row", "params", "no_record", "unmeasured")


@dataclass(frozen=True)
class Measured:
    """A GPU-check row that measured one technique as sizing prices it, with its HFU on the check's card."""

    part: str
    row: str
    technique: str
    checkpointing: bool
    flop_params: int
    micro_batch: int | None
    seq_len: int | None
    device: str | None
    hfu: float


def measured_speeds(path: str | None = None) -> list[Measured]:
    """Every row of the GPU check's record that measured one technique as sizing prices it (``full``, ``lora``,
    ``qlora`` and ``<technique> + checkpointing``), with its HFU on the check's card (``bakeoff.core.flops.hfu``: the
    utilisation ``train_hours`` divides hardware FLOPs by). [] without a record."""
    import json
    from pathlib import Path

    from bakeoff.core.flops import hfu

    try:
        res = json.loads(Path(path or GPU_CHECK).read_text())
    except (OSError, ValueError):
        return []
    peak = ((res.get("mfu") or {}).get("peak_tflops") or 0) * 1e12
    device = (res.get("env") or {}).get("device")
    out = []
    for part in ("8b", "mfu"):
        for name, r in ((res.get(part) or {}).get("rows") or {}).items():
            st = r.get("setup") or {}
            t, ckpt = st.get("technique"), bool(st.get("gradient_checkpointing"))
            if (
                r.get("status") != "ok"
                or not peak
                or not r.get("tokens_per_s")
                or not r.get("flop_params")
                or name != (f"{t} + checkpointing" if ckpt else t)
            ):
                continue
            out.append(
                Measured(
                    part,
                    name,
                    t,
                    ckpt,
                    int(r["flop_params"]),
                    st.get("micro_batch"),
                    st.get("seq_len"),
                    device,
                    hfu(r["tokens_per_s"], r["flop_params"], t, peak, ckpt),
                )
            )
    return out


def speed_at(s, shape: Shape, technique: str, checkpointing: bool, speeds: list[Measured]) -> Speed:
    """The utilisation for ``technique`` at ``shape`` (``s``: params.sizing): with ``mfu_from: gpu_check``, the
    measured row of that technique nearest the target in parameter count (then the same checkpointing), taken at
    that row's size and shape, not scaled; else, or where none was measured, ``sizing.mfu``, labelled assumed. The
    pessimistic end is ``sizing.mfu_low`` (unset: half), never above the figure itself."""
    import math

    from bakeoff.core.sections import per_technique

    def low(m: float) -> float:
        return m / 2 if s.mfu_low is None else min(m, per_technique(s.mfu_low, technique))

    def nearest(rows: list[Measured]) -> Measured:
        return min(
            rows,
            key=lambda r: (
                round(abs(math.log(r.flop_params / shape.flop_params)), 3),
                r.checkpointing != checkpointing,
            ),
        )

    def shape_of(r: Measured) -> dict:
        return {
            "part": r.part,
            "row": r.row,
            "flop_params": r.flop_params,
            "micro_batch": r.micro_batch,
            "seq_len": r.seq_len,
            "target_flop_params": shape.flop_params,
        }

    measured = speeds if s.mfu_from == "gpu_check" else []
    rows = [r for r in measured if r.technique == technique]
    if rows:
        r = nearest(rows)
        return Speed(r.hfu, low(r.hfu), "measured", "row", r.device, f"{r.part} {r.row}", shape_of(r), technique)
    like = facts(technique).like
    borrowed = [r for r in measured if r.technique == like] if like else []
    if borrowed:  # DPO, a LoRA adapter trained on pairs, never measured: LoRA's figure at this size, assumed
        r = nearest(borrowed)
        return Speed(r.hfu, low(r.hfu), "assumed", "lora_row", r.device, None, shape_of(r), technique)
    m = s.mfu_for(technique)
    basis = "params" if s.mfu_from != "gpu_check" else "no_record" if not speeds else "unmeasured"
    return Speed(m, low(m), "assumed", basis, technique=technique)


def on_card(speed: Speed, card: str | None) -> dict:
    """A fit's ``mfu_source``: the speed's fields, and ``other_card``, the card it is priced on where that is not
    the one measured (its utilisation assumed the same there)."""
    out = {**speed.__dict__}
    if speed.how == "measured" and card and card not in (speed.device or ""):
        out["other_card"] = card
    return out

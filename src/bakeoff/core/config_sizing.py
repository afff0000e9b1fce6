"""params.yaml's sizing and export sections checked: the target shapes and cards, the FLOP utilisation, the serving
card, and what the export ships; each error names the file, the line and the key."""

from __future__ import annotations

from bakeoff.core.schema import Source, check, suggest
from bakeoff.core.techniques import FACTS

SHAPE_KEYS = ("name", "layers", "hidden", "intermediate", "heads", "kv_heads", "vocab")


GPU_KEYS = ("name", "memory_gb", "usd_per_hour", "bf16_tflops")
MFU_TECHNIQUES = tuple(FACTS)  # every technique has a utilisation: its own, or its ``like``'s


def check_export(export, variants: list[str], src: Source) -> None:
    """What the export ships: a GGUF type or none (then no server), variants that exist."""
    check(
        export.gguf in ("f16", "q8_0", "bf16", None),
        src,
        "export.gguf",
        f"must be f16, q8_0, bf16 or null; got {export.gguf!r}",
    )
    check(export.gguf or not export.serve, src, "export.serve", "serving needs a GGUF: set export.gguf or serve: false")
    for n in export.variants or []:
        check(n in variants, src, "export.variants", f"{n!r} is not a variant" + suggest(str(n), variants))


def check_sizing(s, src: Source, serve_gpu: str | None = None) -> None:
    """params.yaml's ``sizing:`` section (a ``SizingConfig``) and ``cost.serve_gpu``, which names one of its cards."""
    check(
        s.mfu_from in ("gpu_check", "params"),
        src,
        "sizing.mfu_from",
        f"must be gpu_check or params; got {s.mfu_from!r}",
    )
    for section, items, need in (("targets", s.targets, SHAPE_KEYS), ("gpus", s.gpus, GPU_KEYS)):
        check(isinstance(items, list), src, f"sizing.{section}", "must be a list")
        for i, item in enumerate(items):
            key = f"sizing.{section}"
            check(isinstance(item, dict), src, key, f"item {i + 1} must be a mapping with {', '.join(need)}")
            missing = [k for k in need if k not in item]
            check(not missing, src, key, f"item {i + 1} ({item.get('name', '?')}) lacks {', '.join(missing)}")
            for k in need[1:]:
                check(
                    isinstance(item[k], (int, float)) and item[k] > 0,
                    src,
                    key,
                    f"item {i + 1} ({item['name']}): {k} must be a positive number, got {item[k]!r}",
                )
    names = [t["name"] for t in s.targets]
    check(
        s.target is None or s.target in names,
        src,
        "sizing.target",
        f"{s.target!r} is not one of sizing.targets" + (suggest(str(s.target), names) if names else ""),
    )
    check(0 <= s.margin < 1, src, "sizing.margin", f"must be in [0, 1), got {s.margin}")
    check_mfu(s.mfu, src, "sizing.mfu")
    if s.mfu_low is not None:
        check_mfu(s.mfu_low, src, "sizing.mfu_low")
        for t in MFU_TECHNIQUES:
            check(
                s.mfu_low_for(t) <= s.mfu_for(t),
                src,
                "sizing.mfu_low",
                f"{t}: {s.mfu_low_for(t)} is above sizing.mfu's {s.mfu_for(t)} (the low end is the pessimistic one)",
            )
    cards = [g["name"] for g in s.gpus]
    check(
        serve_gpu is None or serve_gpu in cards,
        src,
        "cost.serve_gpu",
        f"{serve_gpu!r} is not one of sizing.gpus" + (suggest(str(serve_gpu), cards) if cards else ""),
    )


def check_mfu(m, src: Source, key: str) -> None:
    """One utilisation in (0, 1], or one per technique (one ``like`` another, DPO, takes its figure unless given), or
    ``default`` for the ones not named."""

    def share(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1

    if not isinstance(m, dict):
        check(share(m), src, key, f"must be a number in (0, 1] or a mapping technique: number, got {m!r}")
        return
    allowed = (*MFU_TECHNIQUES, "default")
    for k, v in m.items():
        check(k in allowed, src, f"{key}.{k}", "unknown technique" + suggest(str(k), list(allowed)))
        check(share(v), src, f"{key}.{k}", f"must be a number in (0, 1], got {v!r}")
    lacking = [t for t in MFU_TECHNIQUES if t not in m and "default" not in m and FACTS[t].like not in m]
    check(not lacking, src, key, f"names no figure for {', '.join(lacking)} (add them, or a default)")

"""The forgetting check in the report: each run's score on the offline general-ability probe against the base
model's, its KL divergence from the base, a quantized base's untrained control, and the standard lm-eval tasks."""

from __future__ import annotations

import pandas as pd

from bakeoff.core.records import RunRecord
from bakeoff.decide.run_record import rows_of
from bakeoff.report.tables import _fmt, image


def base_probe(df: pd.DataFrame) -> float | None:
    """The base model's probe score: a baseline's (the untouched model, scored once without shots)."""
    if "probe_acc" not in df.columns:
        return None
    base = df[(df["kind"] == "baseline") & df["probe_acc"].notna()]
    return float(base["probe_acc"].iloc[0]) if len(base) else None


def forgetting(
    names: list[str], df: pd.DataFrame | None = None, images: dict | None = None, evaluations: dict | None = None
) -> list[str]:
    """The forgetting check: each run's score on the offline general-ability probe against the base model's, its
    KL divergence from the base on general instructions, a quantized base's untrained control (quantization apart
    from training), and the standard lm-eval tasks (or why they were skipped, once for all runs; ``evaluations``:
    each run's evaluation record, ``Decision.evaluations``)."""
    lines, evaluations = [], evaluations or {}
    base = base_probe(df) if df is not None else None
    if base is not None:
        lines += [
            (
                "Measured here: `probe` is the share of the 200 general multiple-choice questions of `data/probe` "
                "(CC0, lm-eval local task) a run gets right; Δ probe is against the base model "
                f"({base:.1%}); KL is the mean per-token KL divergence over fixed answers to 24 general "
                "instructions (nats; 0 = unchanged), from the base model, or for QLoRA from its own 4-bit base "
                "(its row `… 4-bit base, untrained` is that base against the base model: what quantization alone "
                "moved)."
            ),
            "",
            "| run | task quality | Δ vs best prompt | probe | Δ probe | KL | KL from |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in rows_of(df[df["probe_acc"].notna()]):
            against = r.general_kl_against
            frm = "its 4-bit base" if isinstance(against, str) and "adapter disabled" in against else "the base"
            control = r.control_probe_acc
            if isinstance(control, (int, float)) and control == control:
                lines.append(
                    f"| {r.name}: 4-bit base, untrained | {_fmt(r.control_quality, '{:.1%}')} | – | "
                    f"{control:.1%} | {(control - base) * 100:+.1f} pp | "
                    f"{_fmt(r.control_general_kl, '{:.4f}')} | the base |"
                )
                frm = "its 4-bit base"
            lines.append(
                f"| {r.name} | {_fmt(r.quality, '{:.1%}')} | {_fmt(r.gain_vs_prompting, '{}')} | "
                f"{r.probe_acc:.1%} | {(r.probe_acc - base) * 100:+.1f} pp | "
                f"{_fmt(r.general_kl, '{:.4f}')} | {frm if r.kind == 'variant' else '–'} |"
            )
        lines.append("")
        lines += image(images, "tradeoff", "task gain against probe loss")
    skipped: dict[tuple, list[str]] = {}
    for name in names:
        rec = evaluations.get(name) or RunRecord()
        for task, res in (rec.lm_eval_tasks or {}).items():
            if res.status == "ok":
                figs = ", ".join(f"{k} {v:.3f}" for k, v in res.to_dict().items() if k != "status")
                lines.append(f"- `{name}` · {task}: {figs}")
            else:
                why = (res.status if res.has("status") else "skipped", res.reason if res.has("reason") else "")
                skipped.setdefault((task, *why), []).append(name)
    for (task, status, reason), who in skipped.items():
        lines.append(f"- {task}: {not_run(status, reason)} for {', '.join(f'`{n}`' for n in who)}")
    return ["## Forgetting check", "", *lines, ""] if lines else []


def not_run(status: str, reason: str) -> str:
    """A standard lm-eval task that did not run, in a user's words: ``not run (offline)`` where its data could not be
    had here (the library's own message stays in the run's eval.json), else the status with the first line of why."""
    if status == "skipped" and any(
        w in reason
        for w in (
            "OfflineModeIsEnabled",
            "Couldn't reach",
            "ConnectionError",
            "ConnectTimeout",
            "LocalEntryNotFoundError",
        )
    ):
        return "not run (offline: its data is on the hub, which this machine cannot reach)"
    first = reason.splitlines()[0][:160] if reason else ""
    return f"{'not run' if status == 'skipped' else status}" + (f" ({first})" if first else "")

"""The runs' tables' columns: which each table of the report shows, their headings and formats, and the runs' values
put in words for them (the dtypes held in training, the values a search tuned, how latency was timed, a child run that
did not move from its parent)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from bakeoff.decide.run_record import HeldDtypes, Tuned

if TYPE_CHECKING:
    from bakeoff.decide.verdict_record import Unmoved

# column → (header, format) for the Markdown table; every figure is defined in core/measure.py or evaluate/scoring.py
COLUMNS = {
    "name": ("run", "{}"),
    "rank_group": ("group", "{}"),
    "kind": ("kind", "{}"),
    "technique": ("technique", "{}"),
    "status": ("status", "{}"),
    "quality": ("quality", "{:.1%}"),
    "quality_ci": ("95% CI", "{}"),
    "seed_spread": ("seeds", "{}"),
    "gain_vs_prompting": ("Δ vs best prompt", "{}"),
    "verdict_figure": ("compared as", "{}"),
    "flips": ("flips −/+", "{}"),
    "quality_label_choice": ("label choice", "{:.1%}"),
    "quality_label_choice_ci": ("label choice 95% CI", "{}"),
    "format_misses": ("format-only misses", "{:.0f}"),
    "lm_eval_exact_match": ("lm-eval EM", "{:.1%}"),
    "pref_accuracy": ("pref acc", "{:.1%}"),
    "pref_margin": ("pref margin", "{:+.2f}"),
    "val_loss": ("val loss", "{:.3f}"),
    "val_quality": ("val quality", "{:.1%}"),
    "val_quality_label_choice": ("val label choice", "{:.1%}"),
    "contains_reference": ("contains ref", "{:.1%}"),
    "convergence": ("converged?", "{}"),
    "stopped_at_step": ("steps run", "{:.0f}"),
    "best_step": ("best step", "{:.0f}"),
    "train_tokens_per_s": ("train tok/s", "{:.0f}"),
    "train_step_s_median": ("step s (median)", "{:.2f}"),
    "train_wall_s": ("train wall s", "{:.0f}"),
    "train_peak_rss_mb": ("train peak RSS MB", "{:.0f}"),
    "train_peak_allocated_mb": ("train peak alloc MB", "{:.0f}"),
    "train_peak_reserved_mb": ("train peak reserved MB", "{:.0f}"),
    "trainable_params": ("trainable params", "{:,.0f}"),
    "adapter_mb": ("saved MB", "{:.1f}"),
    "effective_batch": ("eff. batch", "{:.0f}"),
    "batch_split": ("micro × accum", "{}"),
    "tokens_seen": ("tokens seen", "{:,.0f}"),
    "precision": ("train precision", "{}"),
    "kernels": ("train kernels", "{}"),
    "held_dtypes": ("dtypes held in training", "{}"),
    "serving_dtype": ("serving dtype", "{}"),
    "gen_tokens_per_s": ("gen tok/s", "{:.1f}"),
    "prompt_tokens_per_request": ("prompt tok/req", "{:.0f}"),
    "latency_p25_s": ("p25 s", "{:.2f}"),
    "latency_p50_s": ("p50 s", "{:.2f}"),
    "latency_p75_s": ("p75 s", "{:.2f}"),
    "latency_p95_s": ("p95 s", "{:.2f}"),
    "latency_p50_s_unmerged": ("p50 s unmerged", "{:.2f}"),
    "latency_p95_s_unmerged": ("p95 s unmerged", "{:.2f}"),
    "eval_peak_rss_mb": ("eval peak RSS MB", "{:.0f}"),
    "tuned": ("tuned values", "{}"),
    "tune_tokens": ("tuning tokens", "{:,.0f}"),
    "tune_wall_s": ("tuning s", "{:.0f}"),
}


LATENCY_HOW = {"interleaved": "timed interleaved in one process, one request of each run in turn"}


def dtypes_words(d):
    """What a run held its weights and saved activations in (``held_dtypes``), in a cell."""
    if not isinstance(d, dict):
        return d
    h = HeldDtypes.from_dict(d)
    base = (h.base or "?") + (f" ({h.compute} compute)" if h.compute else "")
    return f"base {base} · head {h.head or '?'} · trained {h.trainable or '?'} · activations {h.activations or '?'}" + (
        " · checkpointed" if h.checkpointed else ""
    )


def tuned_words(t):
    """What the tune stage chose for a run (``tuned``), in a cell: its values, and whose search where it shared one."""
    if not isinstance(t, dict):
        return t
    t = Tuned.from_dict(t)
    said = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in t.values.items())
    return said + (f" (search of `{t.shared_from}`)" if t.shared_from else "")


def worded_runs(df: pd.DataFrame, unmoved: dict[str, Unmoved] | None = None) -> pd.DataFrame:
    """The runs' table (``Decision.runs``) as the report shows it: its coded cells in words, each column in place
    (``unmoved``: the verdict's derived runs that did not move from their parent)."""
    out = df.copy()
    for child, u in (unmoved or {}).items():
        out.loc[(out["name"] == child) & (out.get("convergence") == "unmoved"), "convergence"] = (
            f"did not move from `{u.parent}`"
        )
    if "tuned" in out.columns:
        out["tuned"] = out["tuned"].map(tuned_words)
    if "held_dtypes" in out.columns:
        out["held_dtypes"] = out["held_dtypes"].map(dtypes_words)
    if "latency_how" in out.columns:
        out["latency_how"] = out["latency_how"].map(lambda x: LATENCY_HOW.get(x, x) if isinstance(x, str) else x)
    return out


# each table at most ten columns; the rest of a run's figures sit under <details> and in comparison.csv
QUALITY = [
    "name",
    "rank_group",
    "status",
    "quality",
    "quality_ci",
    "verdict_figure",
    "gain_vs_prompting",
    "flips",
    "val_quality",
    "convergence",
]


QUALITY_MORE = [
    "name",
    "technique",
    "seed_spread",
    "quality_label_choice",
    "quality_label_choice_ci",
    "format_misses",
    "contains_reference",
    "lm_eval_exact_match",
    "val_quality_label_choice",
    "val_loss",
]


QUALITY_TRAINING = ["name", "pref_accuracy", "pref_margin", "stopped_at_step", "best_step"]


TRAINING = [
    "name",
    "train_tokens_per_s",
    "train_step_s_median",
    "train_wall_s",
    "train_peak_rss_mb",
    "train_peak_reserved_mb",
    "trainable_params",
    "adapter_mb",
    "tokens_seen",
    "precision",
]


TRAINING_MORE = ["name", "effective_batch", "batch_split", "train_peak_allocated_mb", "kernels", "held_dtypes"]


SERVING = [
    "name",
    "serving_dtype",
    "gen_tokens_per_s",
    "prompt_tokens_per_request",
    "latency_p25_s",
    "latency_p50_s",
    "latency_p75_s",
    "latency_p95_s",
    "eval_peak_rss_mb",
]


SERVING_MORE = ["name", "latency_p50_s_unmerged", "latency_p95_s_unmerged"]

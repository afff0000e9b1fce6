"""The comparison as text: the Markdown report, its CSV, and reports/metrics.json (DVC metrics), each written once.

Every figure shown is defined in ``bakeoff.core.measure`` (speed, memory, intervals) or ``bakeoff.core.scoring``
(quality).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from bakeoff.core.records import Recipe, Search

# column → (header, format) for the Markdown table; every figure is defined in core/measure.py or evaluate/scoring.py
COLUMNS = {
    "name": ("run", "{}"), "rank_group": ("group", "{}"), "kind": ("kind", "{}"), "technique": ("technique", "{}"),
    "status": ("status", "{}"),
    "quality": ("quality", "{:.1%}"), "quality_ci": ("95% CI", "{}"), "seed_spread": ("seeds", "{}"),
    "gain_vs_prompting": ("Δ vs best prompt", "{}"),
    "verdict_figure": ("compared as", "{}"),
    "flips": ("flips −/+", "{}"), "quality_label_choice": ("label choice", "{:.1%}"),
    "quality_label_choice_ci": ("label choice 95% CI", "{}"),
    "format_misses": ("format-only misses", "{:.0f}"), "lm_eval_exact_match": ("lm-eval EM", "{:.1%}"),
    "pref_accuracy": ("pref acc", "{:.1%}"), "pref_margin": ("pref margin", "{:+.2f}"),
    "val_loss": ("val loss", "{:.3f}"), "val_quality": ("val quality", "{:.1%}"),
    "val_quality_label_choice": ("val label choice", "{:.1%}"), "contains_reference": ("contains ref", "{:.1%}"),
    "convergence": ("converged?", "{}"), "stopped_at_step": ("steps run", "{:.0f}"),
    "best_step": ("best step", "{:.0f}"),
    "train_tokens_per_s": ("train tok/s", "{:.0f}"), "train_step_s_median": ("step s (median)", "{:.2f}"),
    "train_wall_s": ("train wall s", "{:.0f}"), "train_peak_rss_mb": ("train peak RSS MB", "{:.0f}"),
    "train_peak_allocated_mb": ("train peak alloc MB", "{:.0f}"),
    "train_peak_reserved_mb": ("train peak reserved MB", "{:.0f}"),
    "trainable_params": ("trainable params", "{:,.0f}"), "adapter_mb": ("saved MB", "{:.1f}"),
    "effective_batch": ("eff. batch", "{:.0f}"), "batch_split": ("micro × accum", "{}"),
    "tokens_seen": ("tokens seen", "{:,.0f}"),
    "precision": ("train precision", "{}"), "kernels": ("train kernels", "{}"),
    "held_dtypes": ("dtypes held in training", "{}"),
    "serving_dtype": ("serving dtype", "{}"),
    "gen_tokens_per_s": ("gen tok/s", "{:.1f}"), "prompt_tokens_per_request": ("prompt tok/req", "{:.0f}"),
    "latency_p25_s": ("p25 s", "{:.2f}"), "latency_p50_s": ("p50 s", "{:.2f}"), "latency_p75_s": ("p75 s", "{:.2f}"),
    "latency_p95_s": ("p95 s", "{:.2f}"),
    "latency_p50_s_unmerged": ("p50 s unmerged", "{:.2f}"), "latency_p95_s_unmerged": ("p95 s unmerged", "{:.2f}"),
    "eval_peak_rss_mb": ("eval peak RSS MB", "{:.0f}"),
    "tuned": ("tuned values", "{}"), "tune_tokens": ("tuning tokens", "{:,.0f}"), "tune_wall_s": ("tuning s", "{:.0f}"),
}


LATENCY_HOW = {"interleaved": "timed interleaved in one process, one request of each run in turn"}


def dtypes_words(d):
    """What a run held its weights and saved activations in (``held_dtypes``), in a cell."""
    if not isinstance(d, dict):
        return d
    base = d.get("base", "?") + (f" ({d['compute']} compute)" if d.get("compute") else "")
    return (f"base {base} · head {d.get('head', '?')} · trained {d.get('trainable', '?')} · activations "
            f"{d.get('activations', '?')}" + (" · checkpointed" if d.get("checkpointed") else ""))


def tuned_words(t):
    """What the tune stage chose for a run (``tuned``), in a cell: its values, and whose search where it shared one."""
    if not isinstance(t, dict):
        return t
    said = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in t["values"].items())
    return said + (f" (search of `{t['shared_from']}`)" if t.get("shared_from") else "")


def worded_runs(df: pd.DataFrame, unmoved: dict | None = None) -> pd.DataFrame:
    """The runs' table (``Decision.runs``) as the report shows it: its coded cells in words, each column in place
    (``unmoved``: the verdict's derived runs that did not move from their parent)."""
    out = df.copy()
    for child, u in (unmoved or {}).items():
        out.loc[(out["name"] == child) & (out.get("convergence") == "unmoved"), "convergence"] = (
            f"did not move from `{u['parent']}`")
    if "tuned" in out.columns:
        out["tuned"] = out["tuned"].map(tuned_words)
    if "held_dtypes" in out.columns:
        out["held_dtypes"] = out["held_dtypes"].map(dtypes_words)
    if "latency_how" in out.columns:
        out["latency_how"] = out["latency_how"].map(lambda x: LATENCY_HOW.get(x, x) if isinstance(x, str) else x)
    return out


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


# each table at most ten columns; the rest of a run's figures sit under <details> and in comparison.csv
QUALITY = ["name", "rank_group", "status", "quality", "quality_ci", "verdict_figure", "gain_vs_prompting", "flips",
           "val_quality", "convergence"]
QUALITY_MORE = ["name", "technique", "seed_spread", "quality_label_choice", "quality_label_choice_ci", "format_misses",
                "contains_reference", "lm_eval_exact_match", "val_quality_label_choice", "val_loss"]
QUALITY_TRAINING = ["name", "pref_accuracy", "pref_margin", "stopped_at_step", "best_step"]
TRAINING = ["name", "train_tokens_per_s", "train_step_s_median", "train_wall_s", "train_peak_rss_mb",
            "train_peak_reserved_mb", "trainable_params", "adapter_mb", "tokens_seen", "precision"]
TRAINING_MORE = ["name", "effective_batch", "batch_split", "train_peak_allocated_mb", "kernels", "held_dtypes"]
SERVING = ["name", "serving_dtype", "gen_tokens_per_s", "prompt_tokens_per_request", "latency_p25_s", "latency_p50_s",
           "latency_p75_s", "latency_p95_s", "eval_peak_rss_mb"]
SERVING_MORE = ["name", "latency_p50_s_unmerged", "latency_p95_s_unmerged"]


def convergence_lines(df: pd.DataFrame) -> list[str]:
    """A flag under the quality table for every run that was still improving when it hit max_steps."""
    if "convergence" not in df.columns:
        return []
    still = [r["name"] for _, r in df.iterrows() if r.get("convergence") == "still improving"]
    if not still:
        return []
    return ["", "**Still improving at max_steps:** " + ", ".join(f"`{n}`" for n in still) + " — the validation "
            "loss was still falling by more than its noise (train_defaults.early_stopping_noise standard errors) over "
            "the run's last stretch: their rank may change with more steps."]


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
            out.append(f"- `{name}`: trains at `{lender}`'s choice (`tune.share`); it cannot adopt a trial, since "
                       f"every trial of that search trained `{lender}`, not its own setup, so it trains again.")
            continue
        if not rec.trials:
            continue
        recipe, said = rec.recipe or Recipe(), []
        if recipe.value is not None and rec.best_value is not None:
            judged = {"metric": "(task metric)"}.get(rec.objective, rec.objective or "")
            said.append(f"the plain recipe ({_values(recipe.values)}) scored {recipe.value:.4g} {judged} on "
                        f"validation at {rec.trial_steps} steps; "
                        + (f"the search chose {_values(rec.values)}, which scored {rec.best_value:.4g} there"
                           if rec.beat_recipe else "no trial scored better there, so the recipe trains"))
        tie = tied_search(rec)
        if tie:
            said.append(tie)
        row = df[df["name"] == name].iloc[0]
        if row.get("adopted_from_trial") == row.get("adopted_from_trial") and row.get("adopted_from_trial") is not None:
            said.append(f"its training run is the search's trial {int(row['adopted_from_trial'])}, the same run, "
                        "adopted rather than trained again (its speed and memory were measured in the tune stage's "
                        "process)")
        for w in rec.widened:
            n = w.trials_outside
            ran = ("" if n is None else f" ({n} trial{'s' if n != 1 else ''} ran beyond {w.from_:.3g})" if n else
                   f" (no trial ran beyond {w.from_:.3g}: the wider range was not tried)")
            said.append(f"a choice at the {w.side} edge widened {w.param}'s range from {w.from_:.3g} to "
                        f"{w.to:.3g}{ran}")
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
    return (f"**its {len(done)} trials all scored {float(done[0].value):.4g} on validation: the search did not "
            f"discriminate**, so its choice is no better informed than the recipe, and its {spent:,.0f} s here "
            f"({sum(t.tokens_seen or 0 for t in done):,} tokens) were spent without informing it")


def _table(df: pd.DataFrame, cols: list[str]) -> list[str]:
    cols = [c for c in cols if c in df.columns and (c == "name" or df[c].notna().any())]
    if cols == ["name"]:
        return []
    shown = [c for c in cols if c != "name"]
    df = df[df[shown].notna().any(axis=1)] if shown else df  # a run none of these figures apply to is left out
    lines = ["| " + " | ".join(COLUMNS[c][0] for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r.get(c), COLUMNS[c][1]) for c in cols) + " |")
    return lines


def _lm_eval_how(df: pd.DataFrame) -> str:
    """Whether lm-eval generated the answers it scored or scored bakeoff's own (``eval.lm_eval``)."""
    if "lm_eval_generated" not in df.columns or df["lm_eval_generated"].isna().all():
        return ""
    gen = df["lm_eval_generated"].dropna()
    if (gen == 0).all():
        return (" (it scored bakeoff's own answers, `eval.lm_eval: reuse`: a check of the prompts and the metric, "
                "not of generation)")
    if (gen == 1).all():
        return " (lm-eval generated its answers itself, `eval.lm_eval: generate`)"
    return " (some runs' answers generated by lm-eval, others reused: see `lm_eval_generated` in metrics)"


def image(images: dict | None, key: str, caption: str) -> list[str]:
    """A plot beside its table: a Markdown image relative to reports/ (the HTML page inlines it)."""
    return [f"![{caption}](plots/{key}.png)", ""] if images and key in images else []


def details(summary: str, lines: list[str]) -> list[str]:
    """Lines folded under <details> (GitHub and the HTML page show the summary; a click opens it)."""
    return ["<details>", f"<summary>{summary}</summary>", "", *lines, "", "</details>", ""] if lines else []


@dataclass
class Page:
    """The report's sections around its tables: ``head`` above the quality table (the verdict), ``after_quality``
    below it, ``tail`` at the end (sizing, glossary, provenance); the plots' ``images``; the verdict's ``scope``
    (the model and machine each figure was measured on)."""

    head: list[str] = field(default_factory=list)
    after_quality: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)
    images: dict | None = None
    scope: dict | None = None


def markdown(df: pd.DataFrame, metric: str, page: Page | None = None) -> str:
    page = page or Page()
    head, tail, images, after_quality, scope = page.head, page.tail, page.images, page.after_quality, page.scope or {}
    n_test = _fmt(df.get("n_test", pd.Series([None])).max(), "{:.0f}")
    best = df["best_baseline"].iloc[0] if "best_baseline" in df.columns and len(df) else None
    on = f" of `{scope['model']}`" if scope.get("model") else ""
    machine = f" on {scope['machine']}" if scope.get("machine") else ""
    lines = ["# bakeoff comparison", "", *(head or []),
             "## Quality", "",
             (f"Measured on the test split ({n_test} examples){on}: `{metric}`, with its paired bootstrap 95% "
             f"interval; Δ is the gain over the best prompting baseline (`{best}`) in points; terms in the "
             "[glossary](#glossary)."), "",
             *_table(df, QUALITY), *convergence_lines(df), "",
             *image(images, "quality_bars", "quality of every run with its 95% interval"),
             *details("More quality figures (label choice, format, lm-eval cross-check, validation loss)",
                      _table(df, QUALITY_MORE) + [""] + _table(df, QUALITY_TRAINING)
                      + ["", f"lm-eval EM{_lm_eval_how(df)}."]),
             *(after_quality or []),
             "## Training cost", "",
             (f"Measured here{machine}, defined in `src/bakeoff/core/measure.py`: CPU memory is peak resident memory "
              f"(RSS), "
             "CUDA memory peak reserved; none of these is a GPU projection (that is [GPU sizing](#gpu-sizing))."), "",
             *_table(df, TRAINING), "",
             *image(images, "quality_vs_memory", "quality against training peak memory"),
             *image(images, "quality_vs_time", "quality against training time"),
             *image(images, "loss_curves", "training and validation loss"),
             *details("Batch split, kernels and the dtypes held in training", _table(df, TRAINING_MORE)),
             "## Serving", "",
             f"Measured here{machine}: every run in the serving dtype it names (`eval.dtype`), adapters merged (QLoRA "
             "on its 4-bit base). Latency is one request at batch 1 over `eval.latency_requests` test prompts"
             + (" (the variants timed interleaved in one process by the export stage, one request of each in turn, "
                "so the machine's drift falls on all alike)" if "latency_how" in df.columns
                and df["latency_how"].notna().any() else "")
             + ": a run is called faster only when its interquartile range (p25–p75) lies below the other's.", "",
             *_table(df, SERVING), "",
             *details("Adapters served unmerged", _table(df, SERVING_MORE))]
    failed = df[df["status"] != "ok"]
    if len(failed):
        lines += ["## Runs that did not finish", ""]
        lines += [f"- `{r['name']}`: {r['status']} — {r['error']}" for _, r in failed.iterrows()] + [""]
    sides = df[df["side_checks_failed"].notna()] if "side_checks_failed" in df.columns else df.iloc[0:0]
    if len(sides):  # the run's quality stands; only that side figure is missing
        lines += ["## Side checks that did not finish", "",
                  "Each run below kept its quality and test answers; only the side figure named is missing.", ""]
        lines += [f"- `{r['name']}`: {r['side_checks_failed']}" for _, r in sides.iterrows()] + [""]
    if tail:
        lines += [*tail]
    return "\n".join(lines) + "\n"


def metrics_json(df: pd.DataFrame, metric: str) -> dict:
    out = {}
    for _, r in df.iterrows():
        keep = {k: r.get(k) for k in ("quality", "quality_ci_low", "quality_ci_high", "gain", "gain_ci_low",
                                      "gain_ci_high", "lm_eval_exact_match", "pref_accuracy", "pref_margin",
                                      "val_loss", "train_tokens_per_s", "train_peak_rss_mb", "train_wall_s",
                                      "gen_tokens_per_s", "latency_p50_s", "latency_p95_s")}
        out[r["name"]] = {"status": r["status"], **{k: float(v) for k, v in keep.items()
                                                     if isinstance(v, (int, float)) and v == v}}
    return {"metric": metric, "runs": out}


def write(df: pd.DataFrame, metric: str, out_dir: Path, page: Page, extra: dict | None = None) -> dict[str, Path]:
    """comparison.md, comparison.csv and metrics.json (with ``extra`` sections such as the verdict) in one pass."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"md": out_dir / "comparison.md", "csv": out_dir / "comparison.csv", "json": out_dir / "metrics.json"}
    paths["md"].write_text(markdown(df, metric, page))
    df.drop(columns=[c for c in ("pref_margins",) if c in df.columns]).to_csv(paths["csv"], index=False)
    paths["json"].write_text(json.dumps({**metrics_json(df, metric), **(extra or {})}, indent=2, default=str))
    return paths


def provenance_lines(p: dict) -> list[str]:
    libs = ", ".join(f"{k} {v}" for k, v in p["versions"].items() if v)
    src = p.get("base_model") or {}
    base = src.get("alias") or src.get("source") or "?"
    model = [f"- Base model: `{base}` ({src.get('kind', '?')}{', ' + src['wheel'] if src.get('wheel') else ''})"
             + (f": {src['note']}." if src.get("note") else ".")] if src else []
    return ["## Provenance", "", *model, (f"- Data hash: `{p['data_hash']}` · git commit: `{p['git_commit']}` · "
            f"Python {p['python']} on {p['machine']}"), f"- Libraries: {libs}", ""]

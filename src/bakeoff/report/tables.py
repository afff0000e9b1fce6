"""The comparison as text: the Markdown report, its CSV, and reports/metrics.json (DVC metrics), each written once.

Every figure shown is defined in ``bakeoff.measure`` (speed, memory, intervals) or ``bakeoff.metrics`` (quality).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from bakeoff import runs

# column → (header, format) for the Markdown table; every figure is defined in measure.py or metrics.py
COLUMNS = {
    "name": ("run", "{}"), "rank_group": ("group", "{}"), "kind": ("kind", "{}"), "technique": ("technique", "{}"), "status": ("status", "{}"),
    "quality": ("quality", "{:.1%}"), "quality_ci": ("95% CI", "{}"), "seed_spread": ("seeds", "{}"), "gain_vs_prompting": ("Δ vs best prompt", "{}"),
    "flips": ("flips −/+", "{}"), "quality_label_choice": ("label choice", "{:.1%}"),
    "quality_label_choice_ci": ("label choice 95% CI", "{}"),
    "format_misses": ("format-only misses", "{:.0f}"), "lm_eval_exact_match": ("lm-eval EM", "{:.1%}"),
    "pref_accuracy": ("pref acc", "{:.1%}"), "pref_margin": ("pref margin", "{:+.2f}"),
    "val_loss": ("val loss", "{:.3f}"), "val_quality": ("val quality", "{:.1%}"),
    "val_quality_label_choice": ("val label choice", "{:.1%}"), "contains_reference": ("contains ref", "{:.1%}"),
    "convergence": ("converged?", "{}"), "stopped_at_step": ("steps run", "{:.0f}"), "best_step": ("best step", "{:.0f}"),
    "train_tokens_per_s": ("train tok/s", "{:.0f}"), "train_step_s_median": ("step s (median)", "{:.2f}"),
    "train_wall_s": ("train wall s", "{:.0f}"), "train_peak_rss_mb": ("train peak RSS MB", "{:.0f}"),
    "train_peak_allocated_mb": ("train peak alloc MB", "{:.0f}"),
    "train_peak_reserved_mb": ("train peak reserved MB", "{:.0f}"),
    "trainable_params": ("trainable params", "{:,.0f}"), "adapter_mb": ("saved MB", "{:.1f}"),
    "effective_batch": ("eff. batch", "{:.0f}"), "batch_split": ("micro × accum", "{}"),
    "tokens_seen": ("tokens seen", "{:,.0f}"),
    "precision": ("train precision", "{}"), "kernels": ("train kernels", "{}"), "held_dtypes": ("dtypes held in training", "{}"),
    "serving_dtype": ("serving dtype", "{}"),
    "gen_tokens_per_s": ("gen tok/s", "{:.1f}"), "prompt_tokens_per_request": ("prompt tok/req", "{:.0f}"),
    "latency_p50_s": ("p50 s", "{:.2f}"), "latency_p95_s": ("p95 s", "{:.2f}"),
    "latency_p50_s_unmerged": ("p50 s unmerged", "{:.2f}"), "latency_p95_s_unmerged": ("p95 s unmerged", "{:.2f}"),
    "eval_peak_rss_mb": ("eval peak RSS MB", "{:.0f}"),
    "tuned": ("tuned values", "{}"), "tune_tokens": ("tuning tokens", "{:,.0f}"), "tune_wall_s": ("tuning s", "{:.0f}"),
}


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


QUALITY = ["name", "rank_group", "kind", "technique", "status", "quality", "quality_ci", "seed_spread", "quality_label_choice",
           "quality_label_choice_ci", "gain_vs_prompting", "flips", "format_misses", "contains_reference",
           "lm_eval_exact_match", "pref_accuracy", "pref_margin", "val_quality", "val_quality_label_choice",
           "val_loss", "convergence", "stopped_at_step", "best_step"]


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


def search_lines(df: pd.DataFrame) -> list[str]:
    """What each variant's search did, from its record (runs/<name>/tuned.json): the plain recipe's validation score
    against the choice (measured on the validation split, each at the full max_steps), and any widened range."""
    out = []
    for name in df[df["kind"] == "variant"]["name"]:
        rec = runs.read_json(runs.tuned_record(name)) or {}
        if rec.get("shared_from") or not rec.get("trials"):
            continue
        recipe, said = rec.get("recipe") or {}, []
        if recipe.get("value") is not None and rec.get("best_value") is not None:
            said.append(f"the plain recipe ({_values(recipe['values'])}) scored {recipe['value']:.4g} {rec.get('objective', '')} on "
                        f"validation at {rec.get('trial_steps')} steps; "
                        + (f"the search chose {_values(rec['values'])}, which scored {rec['best_value']:.4g} there"
                           if rec.get("beat_recipe") else "no trial scored better there, so the recipe trains"))
        row = df[df["name"] == name].iloc[0]
        if row.get("adopted_from_trial") == row.get("adopted_from_trial") and row.get("adopted_from_trial") is not None:
            said.append(f"its training run is the search's trial {int(row['adopted_from_trial'])}, the same run, "
                        "adopted rather than trained again (its speed and memory were measured in the tune stage's "
                        "process)")
        for w in rec.get("widened") or []:
            said.append(f"a choice at the {w['side']} edge widened {w['param']}'s range from {w['from']:.3g} to "
                        f"{w['to']:.3g}")
        if said:
            out.append(f"- `{name}`: " + "; ".join(said) + ".")
    return ["", "**Searches** (on the validation split, the test split never read):", *out] if out else []


def _table(df: pd.DataFrame, cols: list[str]) -> list[str]:
    cols = [c for c in cols if c in df.columns and (c == "name" or df[c].notna().any())]
    lines = ["| " + " | ".join(COLUMNS[c][0] for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r.get(c), COLUMNS[c][1]) for c in cols) + " |")
    return lines


def base_probe(df: pd.DataFrame) -> float | None:
    """The base model's probe score: a baseline's (the untouched model, scored once without shots)."""
    if "probe_acc" not in df.columns:
        return None
    base = df[(df["kind"] == "baseline") & df["probe_acc"].notna()]
    return float(base["probe_acc"].iloc[0]) if len(base) else None


def forgetting(names: list[str], df: pd.DataFrame | None = None) -> list[str]:
    """The forgetting check: each run's score on the offline general-ability probe against the base model's, its
    KL divergence from the base on general instructions, and the standard lm-eval tasks (or why they were
    skipped)."""
    lines = []
    base = base_probe(df) if df is not None else None
    if base is not None:
        lines += ["General ability, offline: `probe` is the share of the 200 general multiple-choice questions of "
                  "`data/probe` (CC0, lm-eval local task) a run gets right; Δ probe is against the base model "
                  f"({base:.1%}); KL is the mean per-token KL divergence from the base model over fixed answers to "
                  "24 general instructions (nats; 0 = unchanged). `reports/plots/tradeoff.png` puts each variant's "
                  "task gain against its probe loss.", "",
                  "| run | task quality | Δ vs best prompt | probe | Δ probe | KL to base |", "|---|---|---|---|---|---|"]
        for _, r in df[df["probe_acc"].notna()].iterrows():
            kl = r.get("general_kl")
            lines.append(f"| {r['name']} | {_fmt(r.get('quality'), '{:.1%}')} | {_fmt(r.get('gain_vs_prompting'), '{}')} | "
                         f"{r['probe_acc']:.1%} | {(r['probe_acc'] - base) * 100:+.1f} pp | "
                         f"{_fmt(kl, '{:.4f}')} |")
        lines.append("")
    for name in names:
        rec = runs.read_json(runs.eval_record(name)) or {}
        for task, res in (rec.get("lm_eval_tasks") or {}).items():
            if res.get("status") == "ok":
                figs = ", ".join(f"{k} {v:.3f}" for k, v in res.items() if k != "status")
                lines.append(f"- `{name}` · {task}: {figs}")
            else:
                lines.append(f"- `{name}` · {task}: skipped — {res.get('reason', '')}")
    return ["## Forgetting check", "", *lines] if lines else []


def pairwise_lines(pw: pd.DataFrame) -> list[str]:
    """The pairwise tests as a compact matrix: row minus column in points, with the Holm-adjusted p (every pair in
    ``reports/pairwise.csv``)."""
    if pw is None or pw.empty:
        return []
    names = list(dict.fromkeys(list(pw["a"]) + list(pw["b"])))
    cell = {}
    for _, r in pw.iterrows():
        star = "**" if r["p_holm"] < 0.05 else ""
        cell[(r["a"], r["b"])] = f"{star}{r['diff'] * 100:+.1f}{star} (p {r['p_holm']:.2g})"
        cell[(r["b"], r["a"])] = f"{star}{-r['diff'] * 100 + 0.0:+.1f}{star} (p {r['p_holm']:.2g})"
    test = ", ".join(sorted(set(pw["test"])))
    lines = ["## Which differences are real", "",
             f"Row minus column on the test split ({int(pw['n'].iloc[0])} examples), in points, with the p-value of "
             f"the {test} test adjusted by Holm over all {len(pw)} pairs; **bold**: different at 0.05. Discordant "
             "counts and raw p-values: `reports/pairwise.csv`.", "",
             "| | " + " | ".join(f"`{n}`" for n in names) + " |", "|" + "---|" * (len(names) + 1)]
    for a in names:
        lines.append(f"| `{a}` | " + " | ".join("·" if a == b else cell.get((a, b), "–") for b in names) + " |")
    return lines + [""]


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


def markdown(df: pd.DataFrame, metric: str, head: list[str] | None = None, tail: list[str] | None = None) -> str:
    n_test = _fmt(df.get("n_test", pd.Series([None])).max(), "{:.0f}")
    best = df["best_baseline"].iloc[0] if "best_baseline" in df.columns and len(df) else None
    lines = ["# bakeoff comparison", "", *(head or []),
             "## Quality", "",
             f"Primary metric: `{metric}` on the test split ({n_test} examples), with its paired bootstrap 95% "
             f"interval. Δ is each variant's gain over the best prompting baseline (`{best}`), in percentage "
             "points with its interval; flips −/+ counts examples that went right → wrong / wrong → right against "
             "it (each listed in `reports/flips/<variant>.jsonl`). lm-eval EM is lm-evaluation-harness's exact "
             f"match on the same split{_lm_eval_how(df)}; pref acc is the share of held-out preference pairs whose chosen answer is "
             "more likely, pref margin its mean log-probability margin (nats), for the base as it is and each "
             "trained run (a prompt's shots do not change the model it ranks with). contains ref is the share of answers that "
             "hold the reference (format aside); converged? is each variant's state when training ended (validation "
             "loss every train_defaults.eval_steps; `stopped early` kept the best step's weights).", "",
             *_table(df, QUALITY), *convergence_lines(df), *search_lines(df), "",
             "## Cost: training and serving", "",
             "Figures are defined in `src/bakeoff/measure.py`; CPU memory is peak resident memory. Latency is "
             "one request at batch 1 (as served: adapters merged, QLoRA on its 4-bit base; unmerged beside it), every "
             "run in the serving dtype its column names (`eval.dtype`).",
             "", *_table(df, ["name"] + [c for c in COLUMNS if c not in QUALITY])]
    failed = df[df["status"] != "ok"]
    if len(failed):
        lines += ["", "## Runs that did not finish", ""]
        lines += [f"- `{r['name']}`: {r['status']} — {r['error']}" for _, r in failed.iterrows()]
    if tail:
        lines += ["", *tail]
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


def write(df: pd.DataFrame, metric: str, out_dir: Path, head: list[str] | None = None,
          tail: list[str] | None = None, extra: dict | None = None) -> dict[str, Path]:
    """comparison.md, comparison.csv and metrics.json (with ``extra`` sections such as the verdict) in one pass."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"md": out_dir / "comparison.md", "csv": out_dir / "comparison.csv", "json": out_dir / "metrics.json"}
    paths["md"].write_text(markdown(df, metric, head, tail))
    df.to_csv(paths["csv"], index=False)
    paths["json"].write_text(json.dumps({**metrics_json(df, metric), **(extra or {})}, indent=2))
    return paths


def verdict_lines(v: dict, c: dict) -> list[str]:
    lines = ["## Verdict", "", f"**{v['decision']}** — {v['reason']}.", ""]
    if v.get("chosen_on") == "validation":
        lines += ["The best baseline and the best variant were chosen on the validation split; the test split only "
                  "reports their quality and the gain.", ""]
    elif v.get("chosen_on"):
        lines += ["> The winners were chosen on the test split (these records have no validation scores: rerun "
                  "`dvc repro`), which flatters the gain near min_gain.", ""]
    if v.get("rank_groups"):
        lines += [f"**Rank groups** (runs the test split cannot tell apart from their group's leader, Holm-adjusted "
                  f"p ≥ {v.get('alpha', 0.05)}; leaders picked on the {v.get('chosen_on', 'test')} split): "
                  f"{v['rank_groups']}", ""]
    if (v.get("recommendation") or {}).get("line"):
        lines += [v["recommendation"]["line"], ""]
    for d in v.get("diagnosis") or []:  # knowledge or format (verdict.diagnose)
        lines.append(f"- Knowledge or format: {d['line']}")
    if v.get("diagnosis"):
        lines.append("")
    if not c:
        return lines
    tok = c["prompt_tokens_saved_per_request"]
    lines.append(f"- Prompt tokens saved per request: {tok:+.0f} (the fine-tuned model needs no shots), "
                 f"worth ${c['usd_saved_per_request']:.6f} at your price per 1k prompt tokens.")
    if c.get("train_gpu"):
        gpus = f"{c['train_gpus']}× {c['train_gpu']}" if c["train_gpus"] > 1 else c["train_gpu"]
        lines.append(f"- Training `{v['variant']}` on the sizing target `{c['train_target']}`: ~{c['train_need_gb']:.0f} GB, "
                     f"fits {gpus}; an estimated {c['train_hours']:.2f} GPU-hours per card, ${c['train_usd']:,.2f} "
                     "(estimate: sizing model and sizing.mfu; not measured).")
    if c.get("tune_usd") is not None:
        lines.append(f"- Its tuning search, priced per token like its training: ${c['tune_usd']:,.2f} (included below).")
    if c.get("parent") and c.get("cumulative_usd") is not None:
        lines.append(f"- `{v['variant']}` continues `{c['parent']}`, which costs ${c['parent_usd']:,.2f} to train first: "
                     f"${c['cumulative_usd']:,.2f} in all.")
    if c.get("break_even_requests") is not None:
        lines.append(f"- Fine-tuning pays for itself after about {c['break_even_requests']:,} requests.")
    elif c.get("break_even_if_gain_held") is not None:
        lines.append(f"- If the gain held, fine-tuning would pay for itself after about {c['break_even_if_gain_held']:,} "
                     "requests; the gain is not established (inconclusive), so this is not a break-even yet.")
    elif v["decision"] == "prompting is enough" and c.get("cumulative_usd") is not None:
        lines.append("- No break-even: fine-tuning does not beat prompting here, so the prompt tokens it saves would "
                     "buy a worse answer.")
    elif c.get("cumulative_usd") is not None:
        lines.append("- It never pays for itself on prompt tokens alone: the fine-tuned prompts are not shorter "
                     "or prompt tokens are free at your price.")
    if c.get("train_wall_s_here"):
        lines.append(f"- Here (measured): `{v['variant']}` trained in {c['train_wall_s_here']:.0f} s on this machine.")
    return lines + [""]


def sizing_lines(params, sized: dict) -> list[str]:
    """The memory model against this run's measured peaks, and its projection to the target shapes."""
    from bakeoff.sizing import Fit, markdown as fits_table

    calib = sized["calibration"]
    kind = calib.get("measured_on") or "this machine's peaks"
    lines = ["## GPU sizing", "",
             "Memory model (`src/bakeoff/sizing.py`): weights by dtype, gradients, optimizer state, activations and "
             f"a fixed overhead. Measured here, against this run's peaks ({kind}):", "",
             "| variant | technique | tokens/row | model GB | + overhead = predicted GB | measured GB | error |",
             "|---|---|---|---|---|---|---|"]
    for r in calib["rows"]:
        lines.append(f"| {r['variant']} | {r['technique']} | {r['seq_len']} | {r['model_gb']:.2f} | "
                     f"{r['predicted_gb']:.2f} | {r['measured_gb']:.2f} | {r['error']:+.1%} |")
    if calib["rows"]:
        what = ("the Python process and its libraries on this CPU: not a GPU figure, and not used below"
                if "CPU" in kind else "CUDA context and workspaces")
        lines += ["", f"Fitted overhead {calib['overhead_gb']:.2f} GB ({what}); "
                      f"mean absolute error {calib['mean_abs_error']:.1%}."]
    s = params.sizing
    tok = f"{params.cost.train_tokens:,.0f} training tokens (cost.train_tokens)" if params.cost.train_tokens \
        else "the tokens each variant saw here"
    seq = s.target_seq_len or "each variant's max_seq_len"
    mb = s.target_micro_batch or "each variant's micro_batch"
    return lines + ["", f"Projected (a projection, not measured) to the target shapes at {seq} tokens per row, "
                        f"micro-batch {mb}, with {s.cuda_overhead_gb:g} GB of CUDA context per process "
                        f"(`sizing.cuda_overhead_gb`, assumed), {s.margin:.0%} of each card kept free; hours and "
                        f"dollars for {tok} at an assumed {s.mfu:.0%} MFU (estimates, not measurements):", "",
                    *fits_table([Fit(**f) for f in sized["fits"]]), ""]


def provenance_lines(p: dict) -> list[str]:
    libs = ", ".join(f"{k} {v}" for k, v in p["versions"].items() if v)
    src = p.get("base_model") or {}
    base = src.get("alias") or src.get("source") or "?"
    model = [f"- Base model: `{base}` ({src.get('kind', '?')}{', ' + src['wheel'] if src.get('wheel') else ''})"
             + (f": {src['note']}." if src.get("note") else ".")] if src else []
    return ["## Provenance", "", *model, f"- Data hash: `{p['data_hash']}` · git commit: `{p['git_commit']}` · "
            f"Python {p['python']} on {p['machine']}", f"- Libraries: {libs}", ""]

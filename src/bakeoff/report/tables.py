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
    "latency_p25_s": ("p25 s", "{:.2f}"), "latency_p50_s": ("p50 s", "{:.2f}"), "latency_p75_s": ("p75 s", "{:.2f}"),
    "latency_p95_s": ("p95 s", "{:.2f}"),
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


# each table at most ten columns; the rest of a run's figures sit under <details> and in comparison.csv
QUALITY = ["name", "rank_group", "status", "quality", "quality_ci", "gain_vs_prompting", "flips", "val_quality",
           "convergence"]
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
    if cols == ["name"]:
        return []
    shown = [c for c in cols if c != "name"]
    df = df[df[shown].notna().any(axis=1)] if shown else df  # a run none of these figures apply to is left out
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


def forgetting(names: list[str], df: pd.DataFrame | None = None, images: dict | None = None) -> list[str]:
    """The forgetting check: each run's score on the offline general-ability probe against the base model's, its
    KL divergence from the base on general instructions, a quantized base's untrained control (quantization apart
    from training), and the standard lm-eval tasks (or why they were skipped, once for all runs)."""
    lines = []
    base = base_probe(df) if df is not None else None
    if base is not None:
        lines += ["Measured here: `probe` is the share of the 200 general multiple-choice questions of `data/probe` "
                  "(CC0, lm-eval local task) a run gets right; Δ probe is against the base model "
                  f"({base:.1%}); KL is the mean per-token KL divergence over fixed answers to 24 general "
                  "instructions (nats; 0 = unchanged), from the base model, or for QLoRA from its own 4-bit base "
                  "(its row `… 4-bit base, untrained` is that base against the base model: what quantization alone "
                  "moved).", "",
                  "| run | task quality | Δ vs best prompt | probe | Δ probe | KL | KL from |", "|---|---|---|---|---|---|---|"]
        for _, r in df[df["probe_acc"].notna()].iterrows():
            kl = r.get("general_kl")
            against = r.get("general_kl_against")
            frm = "its 4-bit base" if isinstance(against, str) and "adapter disabled" in against else "the base"
            if isinstance(r.get("control_probe_acc"), (int, float)) and r["control_probe_acc"] == r["control_probe_acc"]:
                lines.append(f"| {r['name']}: 4-bit base, untrained | {_fmt(r.get('control_quality'), '{:.1%}')} | – | "
                             f"{r['control_probe_acc']:.1%} | {(r['control_probe_acc'] - base) * 100:+.1f} pp | "
                             f"{_fmt(r.get('control_general_kl'), '{:.4f}')} | the base |")
                frm = "its 4-bit base"
            lines.append(f"| {r['name']} | {_fmt(r.get('quality'), '{:.1%}')} | {_fmt(r.get('gain_vs_prompting'), '{}')} | "
                         f"{r['probe_acc']:.1%} | {(r['probe_acc'] - base) * 100:+.1f} pp | "
                         f"{_fmt(kl, '{:.4f}')} | {frm if r['kind'] == 'variant' else '–'} |")
        lines.append("")
        lines += image(images, "tradeoff", "task gain against probe loss")
    skipped: dict[tuple, list[str]] = {}
    for name in names:
        rec = runs.read_json(runs.eval_record(name)) or {}
        for task, res in (rec.get("lm_eval_tasks") or {}).items():
            if res.get("status") == "ok":
                figs = ", ".join(f"{k} {v:.3f}" for k, v in res.items() if k != "status")
                lines.append(f"- `{name}` · {task}: {figs}")
            else:
                skipped.setdefault((task, res.get("reason", "")), []).append(name)
    for (task, reason), who in skipped.items():
        lines.append(f"- {task}: skipped for {', '.join(f'`{n}`' for n in who)} — {reason}")
    return ["## Forgetting check", "", *lines, ""] if lines else []


def pairwise_lines(pw: pd.DataFrame, eq: dict | None = None, margin: float = 0.05,
                   images: dict | None = None) -> list[str]:
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
             "counts and raw p-values: `reports/pairwise.csv`. This adjusted test decides every \"different\" "
             "and every rank group here; the bootstrap intervals elsewhere are each one pair's, unadjusted, so an "
             "interval can exclude 0 where the adjusted test does not reject.", "",
             "| | " + " | ".join(f"`{n}`" for n in names) + " |", "|" + "---|" * (len(names) + 1)]
    for a in names:
        lines.append(f"| `{a}` | " + " | ".join("·" if a == b else cell.get((a, b), "–") for b in names) + " |")
    return lines + ["", *image(images, "pairwise", "pairwise differences"), *equivalence_lines(eq or {}, margin)]


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


def markdown(df: pd.DataFrame, metric: str, head: list[str] | None = None, tail: list[str] | None = None,
             images: dict | None = None, after_quality: list[str] | None = None,
             scope: dict | None = None) -> str:
    scope = scope or {}
    n_test = _fmt(df.get("n_test", pd.Series([None])).max(), "{:.0f}")
    best = df["best_baseline"].iloc[0] if "best_baseline" in df.columns and len(df) else None
    on = f" of `{scope['model']}`" if scope.get("model") else ""
    machine = f" on {scope['machine']}" if scope.get("machine") else ""
    lines = ["# bakeoff comparison", "", *(head or []),
             "## Quality", "",
             f"Measured on the test split ({n_test} examples){on}: `{metric}`, with its paired bootstrap 95% "
             f"interval; Δ is the gain over the best prompting baseline (`{best}`) in points; terms in the "
             "[glossary](#glossary).", "",
             *_table(df, QUALITY), *convergence_lines(df), "",
             *image(images, "quality_bars", "quality of every run with its 95% interval"),
             *details("More quality figures (label choice, format, lm-eval cross-check, validation loss)",
                      _table(df, QUALITY_MORE) + [""] + _table(df, QUALITY_TRAINING)
                      + [f"", f"lm-eval EM{_lm_eval_how(df)}."]),
             *(after_quality or []),
             "## Training cost", "",
             f"Measured here{machine}, defined in `src/bakeoff/measure.py`: CPU memory is peak resident memory (RSS), "
             "CUDA memory peak reserved; none of these is a GPU projection (that is [GPU sizing](#gpu-sizing)).", "",
             *_table(df, TRAINING), "",
             *image(images, "quality_vs_memory", "quality against training peak memory"),
             *image(images, "quality_vs_time", "quality against training time"),
             *image(images, "loss_curves", "training and validation loss"),
             *details("Batch split, kernels and the dtypes held in training", _table(df, TRAINING_MORE)),
             "## Serving", "",
             f"Measured here{machine}: every run in the serving dtype it names (`eval.dtype`), adapters merged (QLoRA "
             "on its 4-bit base). Latency is one request at batch 1 over `eval.latency_requests` test prompts: a run "
             "is called faster only when its interquartile range (p25–p75) lies below the other's.", "",
             *_table(df, SERVING), "",
             *details("Adapters served unmerged", _table(df, SERVING_MORE))]
    failed = df[df["status"] != "ok"]
    if len(failed):
        lines += ["## Runs that did not finish", ""]
        lines += [f"- `{r['name']}`: {r['status']} — {r['error']}" for _, r in failed.iterrows()] + [""]
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


def write(df: pd.DataFrame, metric: str, out_dir: Path, head: list[str] | None = None,
          tail: list[str] | None = None, extra: dict | None = None, images: dict | None = None,
          after_quality: list[str] | None = None, scope: dict | None = None) -> dict[str, Path]:
    """comparison.md, comparison.csv and metrics.json (with ``extra`` sections such as the verdict) in one pass."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"md": out_dir / "comparison.md", "csv": out_dir / "comparison.csv", "json": out_dir / "metrics.json"}
    paths["md"].write_text(markdown(df, metric, head, tail, images, after_quality, scope))
    df.drop(columns=[c for c in ("pref_margins",) if c in df.columns]).to_csv(paths["csv"], index=False)
    paths["json"].write_text(json.dumps({**metrics_json(df, metric), **(extra or {})}, indent=2, default=str))
    return paths


def verdict_lines(v: dict, c: dict, caveats: list[str] | None = None) -> list[str]:
    """The first screen: the verdict with what it was measured on, the recommendation, what was measured here apart
    from what was projected to the target, and at most three caveats."""
    scope = v.get("scope") or {}
    where = (f" Measured on `{scope['model']}`, test split ({scope.get('n', '?')} items)"
             + (", winners picked on the validation split" if v.get("chosen_on") == "validation" else "") + ":"
             if scope.get("model") else "")
    lines = ["## Verdict", "", f"**{v['decision']}** —{where} {v['reason']}.", ""]
    if v.get("chosen_on") and v.get("chosen_on") != "validation":
        lines += ["> The winners were chosen on the test split (these records have no validation scores: rerun "
                  "`dvc repro`), which flatters the gain near min_gain.", ""]
    rec = v.get("recommendation") or {}
    if rec.get("line"):
        lines += [rec["line"], ""]
    measured = list(rec.get("measured") or [])
    if c.get("train_wall_s_here") and v.get("variant"):
        measured.append(f"`{c.get('variant', v['variant'])}` trained in {c['train_wall_s_here']:.0f} s here.")
    for d in v.get("diagnosis") or []:  # knowledge or format (verdict.diagnose)
        measured.append(f"Knowledge or format: {d['line']}")
    if measured:
        lines += [f"**Measured here**{' (' + scope['machine'] + ')' if scope.get('machine') else ''}:", "",
                  *[f"- {m}" for m in measured], ""]
    projected = list(rec.get("projected") or [])
    projected += cost_lines(v, c)
    if projected:
        target = scope.get("target")
        lines += [f"**Projected**{' to `' + target + '`' if target else ''} (estimates from the sizing model and "
                  "assumed MFU and prices, not measured):", "", *[f"- {m}" for m in projected], ""]
        if target:
            lines += [f"To measure instead of project: set `model.base` to that model (a hub id or a local folder) "
                      f"and run `dvc exp run -S model.base=<it>` on the card.", ""]
    if caveats:
        lines += ["**Caveats:**", "", *[f"- {x}" for x in caveats[:3]], ""]
    if v.get("rank_groups"):
        lines += [f"Rank groups (runs the test split cannot tell apart from their group's leader, Holm-adjusted "
                  f"p ≥ {v.get('alpha', 0.05)}; leaders picked on the {v.get('chosen_on', 'test')} split): "
                  f"{v['rank_groups']}", ""]
    return lines


def cost_lines(v: dict, c: dict) -> list[str]:
    """The verdict's money, all projected: the all-in cost on the target and the break-even against prompting."""
    from bakeoff.ranking import usd_range
    from bakeoff.measure import round_sig

    out = []
    if not c:
        return out
    if c.get("break_even_requests_per_day") is not None or c.get("break_even_if_gain_held_requests_per_day") is not None:
        per_day = c.get("break_even_requests_per_day") or c.get("break_even_if_gain_held_requests_per_day")
        said = (f"Serving: pay-per-token prompting (`{v['baseline']}`, ${c['prompt_usd_per_request'] * 1000:.2f} per "
                f"1,000 requests at your prompt-token price) against `{c.get('variant', v['variant'])}` on its own {c['serve_card']} "
                f"(${c['serve_usd_per_hour']:.2f}/h, 24 h a day, whatever the traffic): the card costs less above "
                f"~{round_sig(per_day):,.0f} requests a day, prompting below it")
        if c.get("all_in"):
            said += f"; training's all-in {usd_range(c['all_in']['usd'], c['all_in']['usd_high'])} comes on top, once"
        if c.get("break_even_if_gain_held_requests_per_day") is not None:
            said += " (only if the gain held: it is not established)"
        out.append(said + ". Output tokens, which both pay, are left out.")
    elif v.get("decision") == "prompting is enough":
        out.append("No break-even: fine-tuning does not beat prompting here, so its own card would serve a worse "
                   "answer.")
    elif c.get("prompt_tokens_saved_per_request") is not None and not c.get("serve_card"):
        out.append(f"Prompt tokens saved per request: {c['prompt_tokens_saved_per_request']:+.0f}; set "
                   "cost.usd_per_1k_prompt_tokens and a serving card (cost.serve_gpu) for a break-even.")
    return out


def budget_lines(df: pd.DataFrame, spent: dict, tc=None) -> list[str]:
    """Every arm's search as spent: trials, tokens, steps and seconds; a shared search's users each carry a share."""
    rows = []
    for name in df["name"]:
        b = spent.get(name)
        if not b or not b["trials"]:
            continue
        of = "own" if b["own"] else f"`{b['lender']}`'s"
        rows.append(f"| {name} | {of} | {b['trials']} | {b['tokens']:,.0f} | {b['steps']:,.0f} | {b['seconds']:,.0f} | "
                    f"{b['share']:.0%} | {b['carried_tokens']:,.0f} | {b['carried_seconds']:,.0f} |")
    if not rows:
        return []
    rule = ""
    if tc is not None:
        rule = (f"The budget: {tc.trials} trials a search (`tune.budget: trials`; `tune.budget: tokens` with "
                "`tune.budget_tokens` gives every arm the same training tokens instead). " if tc.budget == "trials" else
                f"The budget: {tc.budget_tokens:,.0f} training tokens a search, at most {tc.trials} trials "
                "(`tune.budget: tokens`). ")
    return ["## Searches and their budget", "",
            rule + "Every search on the validation split (the test split never read). Tokens, steps and seconds are the "
            "whole search less the trial a training run adopted (that one is the arm's own training, counted there); "
            "a search several arms use (`tune.share`) is split evenly among them, each carrying its share into its "
            "all-in cost.", "",
            "| arm | search | trials | tokens | steps | seconds | share | tokens carried | seconds carried |",
            "|---|---|---|---|---|---|---|---|---|", *rows, "", *search_lines(df)[1:], ""]


def dpo_lines(df: pd.DataFrame, pw: pd.DataFrame | None, parents: dict) -> list[str]:
    """A derived variant against its parent, on the task (the pairwise test) and on the held-out preference pairs
    (exact McNemar on each pair's win and a paired permutation test of the margin)."""
    from bakeoff.measure import mcnemar_exact, paired_permutation_p

    rows = {r["name"]: r for _, r in df.iterrows()}
    out = []
    for child, parent in parents.items():
        a, b = rows.get(child), rows.get(parent)
        if a is None or b is None or a["status"] != "ok" or b["status"] != "ok":
            continue
        said = [f"### `{child}` against its parent `{parent}`", ""]
        hit = pw[((pw["a"] == child) & (pw["b"] == parent)) | ((pw["a"] == parent) & (pw["b"] == child))] \
            if pw is not None and len(pw) else pw
        if hit is not None and len(hit):
            h = hit.iloc[0]
            diff = h["diff"] if h["a"] == child else -h["diff"]
            said.append(f"- Task (test split, {int(h['n'])} items): {as_pct(a.get('quality'))} against "
                        f"{as_pct(b.get('quality'))}, {diff * 100:+.1f} points; {h['test']} p {h['p']:.2g} "
                        f"(Holm-adjusted {h['p_holm']:.2g}): "
                        + ("different." if h["p_holm"] < 0.05 else f"they cannot be told apart on {int(h['n'])} items."))
        ma, mb = a.get("pref_margins"), b.get("pref_margins")
        if isinstance(ma, list) and isinstance(mb, list) and len(ma) == len(mb) and ma:
            wa, wb = [m > 0 for m in ma], [m > 0 for m in mb]
            only_a, only_b = sum(x and not y for x, y in zip(wa, wb)), sum(y and not x for x, y in zip(wa, wb))
            p_win = mcnemar_exact(only_a, only_b)
            p_margin = paired_permutation_p(ma, mb, lambda xs: sum(xs) / len(xs))
            said.append(f"- Preference pairs (held out, {len(ma)}): chosen answer preferred {sum(wa) / len(wa):.1%} "
                        f"against {sum(wb) / len(wb):.1%} (exact McNemar p {p_win:.2g}); mean margin "
                        f"{sum(ma) / len(ma):+.2f} against {sum(mb) / len(mb):+.2f} nats (paired permutation p "
                        f"{p_margin:.2g}).")
        rec = runs.read_json(runs.tuned_record(child)) or {}
        if rec.get("objective"):
            said.append(f"- Its search judged trials by {objective_words(rec)} on the validation split.")
        out += said + [""]
    return ["## Derived variants against their parents", "", *out] if out else []


def as_pct(x) -> str:
    return _fmt(x, "{:.1%}")


def objective_words(rec: dict) -> str:
    return {"val_loss": "its own validation loss (for DPO, the preference loss: it can fall while the task gets worse)",
            "metric": "the task metric"}.get(rec.get("objective"), str(rec.get("objective")))


def equivalence_lines(eq: dict, margin: float) -> list[str]:
    if not eq:
        return []
    rows = [f"| `{n}` | `{e['against']}` | {e['diff'] * 100:+.1f} | [{e['ci90_low'] * 100:+.1f}, {e['ci90_high'] * 100:+.1f}] | "
            f"{e['p']:.2g} | {'equivalent' if e['equivalent'] else 'not shown'} |" for n, e in eq.items()]
    return [f"**Equivalence within {margin * 100:.0f} points** (`verdict.min_gain`) of each group-A member to its "
            "leader, paired TOST on the test split: \"equivalent\" only where both one-sided tests reject; \"not "
            "shown\" means the items cannot tell, not that the runs are the same.", "",
            "| run | leader | Δ points | 90% interval | TOST p | within the margin |", "|---|---|---|---|---|---|",
            *rows, ""]


def sizing_lines(params, sized: dict, costs: dict | None = None) -> list[str]:
    """The memory model against this run's measured peaks, and its projection to the target shapes as a pivot
    (targets × variants → need, smallest card, cheapest card and its cost range); every fit in sizing.json."""
    from bakeoff.ranking import sig, usd_range

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
    low = s.mfu_low or s.mfu / 2
    fits = sized["fits"]
    variants = list(dict.fromkeys(f["variant"] for f in fits))
    targets = list(dict.fromkeys(f["target"] for f in fits))
    at = {(f["target"], f["variant"]): f for f in fits}

    def cell(f: dict) -> str:
        if not f.get("gpu"):
            return f"{sig(f['need_gb'])} GB · none fits"
        small = f["gpu"] if f["gpus"] == 1 else f"{f['gpus']}× {f['gpu']}"
        if f.get("cheapest_usd") is None:
            return f"{sig(f['need_gb'])} GB · {small}"
        cheap = "" if f["cheapest_gpu"] == f["gpu"] or f["gpus"] > 1 else f" / {f['cheapest_gpu']}"
        return f"{sig(f['need_gb'])} GB · {small}{cheap} {usd_range(f['cheapest_usd'], f['cheapest_usd_high'])}"

    lines += ["", f"**Projected, not measured**: each target at {seq} tokens per row, micro-batch {mb}, "
                  f"{s.cuda_overhead_gb:g} GB of CUDA context per process (`sizing.cuda_overhead_gb`, assumed), "
                  f"{s.margin:.0%} of each card kept free. A cell: memory needed · the smallest card that holds it / "
                  "the cheapest card for the whole job where that is another · the training cost on the cheapest card for "
                  f"{tok}, from {s.mfu:.0%} MFU (`sizing.mfu`, assumed) to {low:.0%} (`sizing.mfu_low`), at the "
                  "example prices of `sizing.gpus`; two significant figures. The verdict's all-in cost adds the "
                  "search and the parent. Every fit: `reports/sizing.json`.", "",
              "| target | " + " | ".join(f"`{v}`" for v in variants) + " |", "|" + "---|" * (len(variants) + 1)]
    for t in targets:
        lines.append(f"| {t} | " + " | ".join(cell(at[(t, v)]) if (t, v) in at else "–" for v in variants) + " |")
    if costs:
        lines += ["", "All in on the sizing target (training on the cheapest card + its share of the search it used + "
                      "its parent, each from the assumed MFU range):", "",
                  "| variant | card | training | search share | parent | all in |", "|---|---|---|---|---|---|"]
        for n, c in costs.items():
            lines.append(f"| {n} | {c['card']} | {usd_range(c['train_usd'], c['train_usd_high'])} | "
                         f"{usd_range(c['search_usd'], c['search_usd_high']) if c['search_usd'] else '–'} | "
                         f"{(usd_range(c['parent_usd'], c['parent_usd_high']) + ' (' + c['parent'] + ')') if c.get('parent') else '–'} | "
                         f"{usd_range(c['usd'], c['usd_high'])} |")
    return lines + [""]


GLOSSARY = [
    ("quality", "the primary metric (`task.metric`) on the test split"),
    ("95% CI / interval", "paired percentile bootstrap over test items (and training seeds), `src/bakeoff/measure.py`"),
    ("Δ vs best prompt", "a variant's gain over the prompting baseline best on validation, in points, with its interval"),
    ("flips −/+", "test items that went right → wrong / wrong → right against that baseline (`reports/flips/`)"),
    ("group (rank group)", "runs the test split cannot tell apart from the group's leader: exact McNemar test, "
                           "Holm-adjusted over every pair, p ≥ 0.05"),
    ("Holm", "a step-down adjustment of p-values over all pairs, so every \"different\" holds at 0.05 together"),
    ("cannot be told apart on N items", "the test did not reject a difference; it says nothing of sameness"),
    ("equivalent within k points", "a paired TOST at `verdict.min_gain` rejected both \"worse by k\" and \"better by k\""),
    ("val quality", "the primary metric on the validation split, which picks every winner"),
    ("converged? / still improving", "how training ended: still improving means its validation loss was still "
                                     "falling beyond noise at max_steps, so more steps may change its rank"),
    ("label choice", "the answer chosen among `task.labels` by likelihood instead of free generation"),
    ("format-only misses", "answers right but for case, punctuation or spacing"),
    ("contains ref", "answers that contain the reference, format aside"),
    ("lm-eval EM", "lm-evaluation-harness's exact match on the same split: a cross-check of prompts and metric"),
    ("pref acc / pref margin", "held-out preference pairs whose chosen answer is more likely / the mean "
                               "log-probability margin in nats"),
    ("tok/s, step s, wall s", "training tokens per second (steady state), median optimizer-step time, whole run"),
    ("peak RSS / reserved MB", "peak resident memory of the process (CPU) / CUDA allocator reserve (GPU)"),
    ("saved MB", "bytes on disk of what a variant saves (adapter or full weights)"),
    ("p25, p50, p75, p95 s", "per-request latency at batch 1: quartiles, median, 95th percentile"),
    ("unmerged", "an adapter served beside its base rather than merged into it"),
    ("MFU / HFU", "model / hardware FLOP utilisation: useful (or executed, recompute counted) FLOP/s over the "
                  "card's peak"),
    ("smallest card / cheapest card", "the card with the least memory that holds the job / the one with the "
                                      "lowest price for the whole job (a faster card can cost less in all)"),
    ("all in", "training + the arm's share of the search it used + its parent's all-in cost"),
    ("search share", "a search used by k arms (`tune.share`) carries 1/k of its tokens into each"),
    ("adopted trial", "a search trial that is the very run training would do, kept as the training run"),
    ("break-even", "the daily requests above which serving the fine-tuned model on its own card costs less "
                   "than paying per prompt token"),
    ("probe / Δ probe", "share of the 200 offline general questions right / its change against the base model"),
    ("KL to base", "mean per-token KL divergence from the base model on 24 general instructions (nats)"),
    ("control (quantized base)", "the 4-bit base QLoRA trains on, untrained, scored like every run"),
    ("projected", "computed from the sizing model and assumed inputs, not measured"),
]


def glossary_lines() -> list[str]:
    return ["## Glossary", "", *[f"- **{t}**: {d}." for t, d in GLOSSARY], ""]


def provenance_lines(p: dict) -> list[str]:
    libs = ", ".join(f"{k} {v}" for k, v in p["versions"].items() if v)
    src = p.get("base_model") or {}
    base = src.get("alias") or src.get("source") or "?"
    model = [f"- Base model: `{base}` ({src.get('kind', '?')}{', ' + src['wheel'] if src.get('wheel') else ''})"
             + (f": {src['note']}." if src.get("note") else ".")] if src else []
    return ["## Provenance", "", *model, f"- Data hash: `{p['data_hash']}` · git commit: `{p['git_commit']}` · "
            f"Python {p['python']} on {p['machine']}", f"- Libraries: {libs}", ""]

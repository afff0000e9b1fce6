"""The comparison: one row per baseline and variant, as Markdown, CSV and DVC metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from bakeoff import runs

# column → (header, format) for the Markdown table; every figure is defined in measure.py or evaluate.py
COLUMNS = {
    "name": ("run", "{}"), "kind": ("kind", "{}"), "technique": ("technique", "{}"), "status": ("status", "{}"),
    "quality": ("quality", "{:.1%}"), "quality_ci": ("95% CI", "{}"), "gain_vs_prompting": ("Δ vs best prompt", "{}"),
    "flips": ("flips −/+", "{}"), "quality_label_choice": ("label choice", "{:.1%}"),
    "format_misses": ("format-only misses", "{:.0f}"), "lm_eval_exact_match": ("lm-eval EM", "{:.1%}"),
    "pref_accuracy": ("pref acc", "{:.1%}"), "pref_margin": ("pref margin", "{:+.2f}"),
    "val_loss": ("val loss", "{:.3f}"),
    "train_tokens_per_s": ("train tok/s", "{:.0f}"), "train_step_s_median": ("step s (median)", "{:.2f}"),
    "train_wall_s": ("train wall s", "{:.0f}"), "train_peak_rss_mb": ("train peak RSS MB", "{:.0f}"),
    "train_peak_allocated_mb": ("train peak alloc MB", "{:.0f}"),
    "train_peak_reserved_mb": ("train peak reserved MB", "{:.0f}"),
    "trainable_params": ("trainable params", "{:,.0f}"), "adapter_mb": ("saved MB", "{:.1f}"),
    "effective_batch": ("eff. batch", "{:.0f}"), "batch_split": ("micro × accum", "{}"),
    "tokens_seen": ("tokens seen", "{:,.0f}"),
    "precision": ("precision", "{}"),
    "gen_tokens_per_s": ("gen tok/s", "{:.1f}"), "prompt_tokens_per_request": ("prompt tok/req", "{:.0f}"),
    "latency_p50_s": ("p50 s", "{:.2f}"), "latency_p95_s": ("p95 s", "{:.2f}"),
    "latency_p50_s_unmerged": ("p50 s unmerged", "{:.2f}"), "latency_p95_s_unmerged": ("p95 s unmerged", "{:.2f}"),
    "eval_peak_rss_mb": ("eval peak RSS MB", "{:.0f}"),
}


def collect(baselines: list[str], variants: list[str]) -> pd.DataFrame:
    """One row per run from its records; a run with no record yet shows as `missing`."""
    rows = []
    for name in baselines + variants:
        ev = runs.read_json(runs.eval_record(name)) or {}
        tr = (runs.read_json(runs.train_record(name)) or {}) if name in variants else {}
        technique = ev.get("technique") or tr.get("technique", "")
        backend = ev.get("backend") or tr.get("backend") or "hf"
        row = {"name": name, "kind": "baseline" if name in baselines else "variant",
               "technique": technique if backend == "hf" else f"{technique} ({backend})",
               "status": ev.get("status") or tr.get("status") or "missing",
               "error": (ev.get("error") or tr.get("error") or "").split("\n")[0],
               "run_id": ev.get("run_id") or tr.get("run_id", ""),
               **(tr.get("metrics") or {}), **(ev.get("metrics") or {})}
        if "micro_batch" in row and row["micro_batch"] == row["micro_batch"]:
            row["batch_split"] = f"{row['micro_batch']} × {row['grad_accum']}"
        rows.append(row)
    return pd.DataFrame(rows)


def _items(name: str, key: str = "score") -> dict[int, object] | None:
    """The primary metric's per-example items of one run, by example id (None: no predictions)."""
    path = runs.predictions(name)
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows or key not in rows[0]:
        return None
    return {r["id"]: tuple(r[key]) if isinstance(r[key], list) else r[key] for r in rows}


def prompting_quality(r) -> float:
    """A baseline's quality: the better of free generation and choice among the labels by likelihood."""
    free, choice = r.get("quality"), r.get("quality_label_choice")
    free = free if isinstance(free, (int, float)) and free == free else float("-inf")
    choice = choice if isinstance(choice, (int, float)) and choice == choice else float("-inf")
    return max(free, choice)


def best_baseline(df: pd.DataFrame) -> str | None:
    ok = df[(df["kind"] == "baseline") & (df["status"] == "ok")]
    if ok.empty:
        return None
    scores = [prompting_quality(r) for _, r in ok.iterrows()]
    return str(ok.iloc[max(range(len(scores)), key=lambda i: (scores[i], -i))]["name"])


def _right(item) -> float:
    """An example's correctness from its item: the label pair agrees, or the score itself."""
    return float(item[0] == item[1]) if isinstance(item, tuple) else float(item)


def flips(items: dict, base: dict) -> list[dict]:
    """Examples whose score moved against the baseline: wrong → right / right → wrong (or better / worse for a
    graded metric)."""
    out = []
    for i in items:
        a, b = _right(items[i]), _right(base[i])
        if a == b:
            continue
        binary = a in (0.0, 1.0) and b in (0.0, 1.0)
        direction = ("wrong_to_right" if a > b else "right_to_wrong") if binary else ("better" if a > b else "worse")
        out.append({"id": i, "direction": direction, "score": a, "baseline_score": b})
    return out


def add_confidence(df: pd.DataFrame, metric: str, resamples: int = 2000, flips_dir: Path | None = None) -> dict:
    """Add each run's 95% interval and each variant's gain over the best baseline (paired bootstrap); write a
    flip file per variant into ``flips_dir``. Returns {variant: [flip rows]}."""
    from bakeoff.evaluate import METRICS
    from bakeoff.measure import bootstrap_ci

    figure = METRICS[metric].figure
    best = best_baseline(df)
    items = {}
    for _, r in df.iterrows():
        if r["status"] != "ok":
            continue
        use_choice = r["kind"] == "baseline" and prompting_quality(r) > (r.get("quality") or 0)
        items[r["name"]] = _items(r["name"], "choice_score" if use_choice else "score")
    base_items = items.get(best) if best else None
    out: dict[str, list[dict]] = {}
    df["best_baseline"] = best
    for col in ("quality_ci_low", "quality_ci_high", "gain", "gain_ci_low", "gain_ci_high"):
        df[col] = float("nan")
    for col in ("quality_ci", "gain_vs_prompting", "flips"):
        df[col] = None
    for i, r in df.iterrows():
        it = items.get(r["name"])
        if not it:
            continue
        ids = sorted(it)
        _, lo, hi = bootstrap_ci([it[k] for k in ids], figure, resamples=resamples)
        df.loc[i, ["quality_ci_low", "quality_ci_high"]] = [lo, hi]
        df.loc[i, "quality_ci"] = f"{lo:.1%}–{hi:.1%}"
        if r["kind"] != "variant" or not base_items:
            continue
        if set(ids) != set(base_items):
            raise ValueError(f"runs/{r['name']}/predictions.jsonl and runs/{best}/predictions.jsonl cover "
                             f"different test examples: rerun both (dvc repro)")
        gain, glo, ghi = bootstrap_ci([it[k] for k in ids], figure, [base_items[k] for k in ids], resamples)
        df.loc[i, ["gain", "gain_ci_low", "gain_ci_high"]] = [gain, glo, ghi]
        df.loc[i, "gain_vs_prompting"] = f"{gain * 100:+.1f} pp [{glo * 100:+.1f}, {ghi * 100:+.1f}]"
        f = flips(it, base_items)
        out[r["name"]] = f
        lost = sum(x["direction"] in ("right_to_wrong", "worse") for x in f)
        df.loc[i, "flips"] = f"{lost}/{len(f) - lost}"
        if flips_dir is not None:
            _write_flips(flips_dir, r["name"], best, f)
    return out


def _write_flips(flips_dir: Path, name: str, best: str, f: list[dict]) -> None:
    """reports/flips/<variant>.jsonl: each flipped example with both predictions and the reference."""
    preds = {n: {r["id"]: r for r in map(json.loads, runs.predictions(n).read_text().splitlines()) if r}
             for n in (name, best)}
    flips_dir.mkdir(parents=True, exist_ok=True)
    with open(flips_dir / f"{name}.jsonl", "w") as fh:
        for x in f:
            mine, theirs = preds[name][x["id"]], preds[best][x["id"]]
            fh.write(json.dumps({**x, "baseline": best, "prompt": mine.get("prompt", ""),
                                 "reference": mine["reference"], "prediction": mine["prediction"],
                                 "baseline_prediction": theirs["prediction"],
                                 **({"baseline_label_choice": theirs["choice"]} if "choice" in theirs else {})}, ensure_ascii=False) + "\n")


def _fmt(value, spec: str) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "–"
    try:
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


QUALITY = ["name", "kind", "technique", "status", "quality", "quality_ci", "quality_label_choice",
           "gain_vs_prompting", "flips", "format_misses",
           "lm_eval_exact_match", "pref_accuracy", "pref_margin", "val_loss"]


def _table(df: pd.DataFrame, cols: list[str]) -> list[str]:
    cols = [c for c in cols if c in df.columns and (c == "name" or df[c].notna().any())]
    lines = ["| " + " | ".join(COLUMNS[c][0] for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r.get(c), COLUMNS[c][1]) for c in cols) + " |")
    return lines


def forgetting(names: list[str]) -> list[str]:
    """The standard lm-eval tasks each run was scored on (a forgetting check), or why they were skipped."""
    lines = []
    for name in names:
        rec = runs.read_json(runs.eval_record(name)) or {}
        for task, res in (rec.get("lm_eval_tasks") or {}).items():
            if res.get("status") == "ok":
                figs = ", ".join(f"{k} {v:.3f}" for k, v in res.items() if k != "status")
                lines.append(f"- `{name}` · {task}: {figs}")
            else:
                lines.append(f"- `{name}` · {task}: skipped — {res.get('reason', '')}")
    return ["## Forgetting check (standard lm-eval tasks)", "", *lines] if lines else []


def markdown(df: pd.DataFrame, metric: str, head: list[str] | None = None, tail: list[str] | None = None) -> str:
    n_test = _fmt(df.get("n_test", pd.Series([None])).max(), "{:.0f}")
    best = df["best_baseline"].iloc[0] if "best_baseline" in df.columns and len(df) else None
    lines = ["# bakeoff comparison", "", *(head or []),
             "## Quality", "",
             f"Primary metric: `{metric}` on the test split ({n_test} examples), with its paired bootstrap 95% "
             f"interval. Δ is each variant's gain over the best prompting baseline (`{best}`), in percentage "
             "points with its interval; flips −/+ counts examples that went right → wrong / wrong → right against "
             "it (each listed in `reports/flips/<variant>.jsonl`). lm-eval EM is lm-evaluation-harness's exact "
             "match on the same split; pref acc is the share of held-out preference pairs whose chosen answer is "
             "more likely, pref margin its mean log-probability margin (nats).", "",
             *_table(df, QUALITY), "",
             "## Cost: training and serving", "",
             "Figures are defined in `src/bakeoff/measure.py`; CPU memory is peak resident memory. Latency is "
             "one request at batch 1 (as served: adapters merged, QLoRA on its 4-bit base; unmerged beside it).",
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
          tail: list[str] | None = None) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"md": out_dir / "comparison.md", "csv": out_dir / "comparison.csv", "json": out_dir / "metrics.json"}
    paths["md"].write_text(markdown(df, metric, head, tail))
    df.to_csv(paths["csv"], index=False)
    paths["json"].write_text(json.dumps(metrics_json(df, metric), indent=2))
    return paths


# ---------------------------------------------------------------- the verdict

def verdict(df: pd.DataFrame, min_gain: float) -> dict:
    """Fine-tune, prompting is enough, or inconclusive: the best variant's gain over the best prompting baseline
    on the primary metric, judged by its paired bootstrap interval against ``min_gain``."""
    import math

    best_b = df["best_baseline"].iloc[0] if "best_baseline" in df.columns and len(df) else None
    ok = df[(df["kind"] == "variant") & (df["status"] == "ok") & df.get("gain", pd.Series(dtype=float)).notna()]
    if best_b is None or ok.empty:
        why = "no prompting baseline finished" if best_b is None else "no fine-tuned variant finished"
        return {"decision": "inconclusive", "reason": why, "min_gain": min_gain}
    top = ok.sort_values("quality", ascending=False, kind="stable").iloc[0]
    gain, lo, hi, n = float(top["gain"]), float(top["gain_ci_low"]), float(top["gain_ci_high"]), int(top["n_test"])
    out = {"variant": top["name"], "baseline": best_b, "gain": gain, "ci_low": lo, "ci_high": hi,
           "min_gain": min_gain, "n_test": n}
    if lo > min_gain:
        out.update(decision="fine-tune",
                   reason=f"`{top['name']}` beats `{best_b}` by {gain * 100:+.1f} points, 95% interval "
                          f"[{lo * 100:+.1f}, {hi * 100:+.1f}], all above min_gain {min_gain * 100:.1f}")
    elif hi < min_gain:
        out.update(decision="prompting is enough",
                   reason=f"the best variant `{top['name']}` gains {gain * 100:+.1f} points over `{best_b}`, "
                          f"95% interval [{lo * 100:+.1f}, {hi * 100:+.1f}], all below min_gain {min_gain * 100:.1f}")
    else:
        half = (hi - lo) / 2
        gap = abs(gain - min_gain)
        # the interval narrows as 1/√n: it clears min_gain once its half-width is below the gap
        need = math.ceil(n * (half / gap) ** 2) if gap > 1e-9 else None
        settle = f"about {need} would settle it" if need else "no test set size would settle it: the gain sits at min_gain"
        out.update(decision="inconclusive", examples_needed=need,
                   reason=f"`{top['name']}` gains {gain * 100:+.1f} points over `{best_b}`; {n} test examples "
                          f"give an interval of ±{half * 100:.1f} points ([{lo * 100:+.1f}, {hi * 100:+.1f}]), which "
                          f"contains min_gain {min_gain * 100:.1f}; {settle}")
    return out


def cost(df: pd.DataFrame, v: dict, price_per_1k: float, train_fit: dict | None) -> dict:
    """The money side of the verdict: what training costs (on the sizing target), what each request saves in
    prompt tokens, and the request volume at which training has paid for itself."""
    out: dict = {}
    if "variant" not in v:
        return out
    rows = {r["name"]: r for _, r in df.iterrows()}
    var, base = rows[v["variant"]], rows[v["baseline"]]
    saved = float(base.get("prompt_tokens_per_request") or 0) - float(var.get("prompt_tokens_per_request") or 0)
    out["prompt_tokens_saved_per_request"] = round(saved, 1)
    out["usd_saved_per_request"] = saved / 1000 * price_per_1k
    out["train_wall_s_here"] = var.get("train_wall_s")
    if train_fit:
        out.update({f"train_{k}": train_fit[k] for k in ("target", "gpu", "gpus", "hours", "usd", "need_gb")})
        usd = train_fit.get("usd")
        if usd is not None and out["usd_saved_per_request"] > 0:
            out["break_even_requests"] = int(round(usd / out["usd_saved_per_request"]))
    return out


def verdict_lines(v: dict, c: dict) -> list[str]:
    lines = ["## Verdict", "", f"**{v['decision']}** — {v['reason']}.", ""]
    if c:
        tok = c["prompt_tokens_saved_per_request"]
        lines.append(f"- Prompt tokens saved per request: {tok:+.0f} (the fine-tuned model needs no shots), "
                     f"worth ${c['usd_saved_per_request']:.6f} at your price per 1k prompt tokens.")
        if c.get("train_gpu"):
            gpus = f"{c['train_gpus']}× {c['train_gpu']}" if c["train_gpus"] > 1 else c["train_gpu"]
            lines.append(f"- Training `{v['variant']}` on the sizing target `{c['train_target']}`: ~{c['train_need_gb']:.0f} GB, "
                         f"fits {gpus}; an estimated {c['train_hours']:.2f} GPU-hours per card, ${c['train_usd']:,.2f} "
                         "(estimate: sizing model and sizing.mfu; not measured).")
        if c.get("break_even_requests") is not None:
            lines.append(f"- Fine-tuning pays for itself after about {c['break_even_requests']:,} requests.")
        elif c.get("train_usd") is not None:
            lines.append("- It never pays for itself on prompt tokens alone: the fine-tuned prompts are not shorter "
                         "or prompt tokens are free at your price.")
        if c.get("train_wall_s_here"):
            lines.append(f"- Here (measured): `{v['variant']}` trained in {c['train_wall_s_here']:.0f} s on this machine.")
    return lines + [""]


# ---------------------------------------------------------------- plots

def pareto(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats: lower cost (x) and higher quality (y)."""
    front = []
    for i, (x, y) in enumerate(points):
        if not any((x2 <= x and y2 >= y) and (x2 < x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i):
            front.append(i)
    return sorted(front, key=lambda i: points[i][0])


def plots(df: pd.DataFrame, histories: dict[str, list[dict]], out_dir: Path, metric: str) -> dict[str, Path]:
    """PNG plots: quality against peak memory and against training time (Pareto front marked), the loss curves
    and per-run quality bars with their intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    ok = df[df["status"] == "ok"]
    mem_col = "train_peak_reserved_mb" if "train_peak_reserved_mb" in df.columns and df["train_peak_reserved_mb"].notna().any() \
        else "train_peak_rss_mb"
    for key, col, label in (("quality_vs_memory", mem_col, "training peak memory (MiB)"),
                            ("quality_vs_time", "train_wall_s", "training wall time (s)")):
        sub = ok[ok.get(col, pd.Series(dtype=float)).notna()] if col in ok.columns else ok.iloc[0:0]
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        pts = [(float(r[col]), float(r["quality"])) for _, r in sub.iterrows()]
        for (x, y), (_, r) in zip(pts, sub.iterrows()):
            ax.scatter(x, y, color="tab:blue")
            ax.annotate(r["name"], (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        front = pareto(pts)
        if front:
            ax.plot([pts[i][0] for i in front], [pts[i][1] for i in front], "--", color="tab:red",
                    label="Pareto front")
            ax.legend(loc="lower right")
        for _, r in ok[ok["kind"] == "baseline"].iterrows():
            ax.axhline(float(r["quality"]), color="grey", lw=0.8, ls=":")
            ax.annotate(r["name"], (ax.get_xlim()[0], float(r["quality"])), fontsize=7, color="grey")
        ax.set_xlabel(label)
        ax.set_ylabel(metric)
        ax.set_title(f"{metric} against {label.split(' (')[0]}")
        fig.tight_layout()
        paths[key] = out_dir / f"{key}.png"
        fig.savefig(paths[key], dpi=110)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    drawn = [name for name, h in histories.items() if h]
    for name in drawn:
        h = histories[name]
        ax.plot([x["step"] for x in h], [x["loss"] for x in h], marker=".", label=name)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.set_title("loss curves" if drawn else "loss curves (no variant recorded one)")
    if drawn:
        ax.legend(fontsize=8)
    fig.tight_layout()
    paths["loss_curves"] = out_dir / "loss_curves.png"
    fig.savefig(paths["loss_curves"], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.4, 0.5 + 0.4 * max(len(ok), 1)))
    names = list(ok["name"])
    q = ok["quality"].astype(float).to_numpy()
    lo = ok.get("quality_ci_low", pd.Series([float("nan")] * len(ok))).astype(float).to_numpy()
    hi = ok.get("quality_ci_high", pd.Series([float("nan")] * len(ok))).astype(float).to_numpy()
    colors = ["tab:grey" if k == "baseline" else "tab:blue" for k in ok["kind"]]
    err = [[max(a - b, 0) if b == b else 0 for a, b in zip(q, lo)], [max(b - a, 0) if b == b else 0 for a, b in zip(q, hi)]]
    ax.barh(names, q, xerr=err, color=colors, capsize=3)
    ax.invert_yaxis()
    ax.set_xlabel(f"{metric} (95% interval)")
    ax.set_title("quality per run (grey: prompting)")
    fig.tight_layout()
    paths["quality_bars"] = out_dir / "quality_bars.png"
    fig.savefig(paths["quality_bars"], dpi=110)
    plt.close(fig)
    return paths


# ---------------------------------------------------------------- one page

def html(markdown_text: str, images: dict[str, Path]) -> str:
    """A self-contained page: the Markdown report as HTML, every plot inlined as a data URI (no external URL)."""
    import base64
    import html as h
    import re

    def inline(text: str) -> str:
        text = h.escape(text)
        text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
        return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)

    body, table, in_list = [], [], False

    def flush_table():
        if not table:
            return
        rows = [r for r in table if not re.fullmatch(r"\|(-+\|)+", r.replace(" ", ""))]
        cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
        out = ["<table>", "<tr>" + "".join(f"<th>{inline(c)}</th>" for c in cells[0]) + "</tr>"]
        out += ["<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>" for row in cells[1:]]
        body.append("\n".join(out + ["</table>"]))
        table.clear()

    for line in markdown_text.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush_table()
        if line.startswith("- "):
            if not in_list:
                body.append("<ul>")
                in_list = True
            body.append(f"<li>{inline(line[2:])}</li>")
            continue
        if in_list:
            body.append("</ul>")
            in_list = False
        m = re.match(r"(#+) (.*)", line)
        if m:
            level = len(m.group(1))
            body.append(f"<h{level}>{inline(m.group(2))}</h{level}>")
        elif line.strip():
            body.append(f"<p>{inline(line)}</p>")
    flush_table()
    if in_list:
        body.append("</ul>")
    body.append("<h2>Plots</h2>")
    for name, path in images.items():
        data = base64.b64encode(Path(path).read_bytes()).decode()
        body.append(f'<figure><img alt="{name}" src="data:image/png;base64,{data}"><figcaption>{name}</figcaption></figure>')
    style = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
             "table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;"
             "text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}code{background:#f3f3f3;"
             "padding:0 3px}img{max-width:100%}figure{display:inline-block;margin:0.5em}")
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>bakeoff comparison</title>"
            f"<style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n")


# ---------------------------------------------------------------- provenance

STACK = ("torch", "transformers", "peft", "trl", "accelerate", "datasets", "bitsandbytes", "unsloth", "lm_eval",
         "mlflow", "dvc", "pandas", "numpy")


def provenance(stats_path: Path | None = None) -> dict:
    """What a result traces back to: library versions, the data's hash, the git commit, the machine."""
    import importlib.metadata as md
    import platform

    from bakeoff.tracking import git_commit

    versions = {}
    for name in STACK:
        try:
            versions[name] = md.version(name.replace("_", "-"))
        except md.PackageNotFoundError:
            versions[name] = None
    stats = json.loads(stats_path.read_text()) if stats_path and stats_path.exists() else {}
    return {"data_hash": stats.get("data_hash"), "git_commit": git_commit(), "python": platform.python_version(),
            "machine": platform.machine(), "versions": versions}


def provenance_lines(p: dict) -> list[str]:
    libs = ", ".join(f"{k} {v}" for k, v in p["versions"].items() if v)
    return ["## Provenance", "", f"- Data hash: `{p['data_hash']}` · git commit: `{p['git_commit']}` · "
            f"Python {p['python']} on {p['machine']}", f"- Libraries: {libs}", ""]

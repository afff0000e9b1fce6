"""Every run's figures side by side: one row per run from its records, the winners chosen on validation, each gain's
paired interval, the flips behind it."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from bakeoff.core import runs
from bakeoff.core.records import RunRecord, read_run, read_search
from bakeoff.core.scoring import METRICS, by_label_choice
from bakeoff.decide.run_record import rows_of
from bakeoff.decide.statistics import bootstrap_ci


def collect(baselines: list[str], variants: list[str]) -> pd.DataFrame:
    """One row per run from its records; a run with no record yet shows as `missing`."""
    rows = []
    for name in baselines + variants:
        ev = read_run(runs.eval_record(name))
        tr = read_run(runs.train_record(name)) if name in variants else RunRecord()
        technique = ev.technique or (tr.technique if tr.has("technique") else "")
        backend = ev.backend or tr.backend or "hf"
        row = {
            "name": name,
            "kind": "baseline" if name in baselines else "variant",
            "technique": technique if backend == "hf" else f"{technique} ({backend})",
            "status": ev.status or tr.status or "missing",
            "error": (ev.error or tr.error or "").split("\n")[0],
            "run_id": ev.run_id or (tr.run_id if tr.has("run_id") else ""),
            **(tr.metrics or {}),
            **(ev.metrics or {}),
        }
        if ev.side_checks:  # side checks that did not finish (lm-eval, the probe, KL): their own failures
            row["side_checks_failed"] = "; ".join(f"{k} {c.status}: {c.error}" for k, c in ev.side_checks.items())
        if ev.engine:  # an endpoint baseline: which model answered, and how label choice was made
            row.update(engine=f"endpoint: {ev.engine.model}", label_choice_via=ev.engine.label_choice)
        tuned = read_search(name)
        if tuned.values:  # what the tune stage chose, and what its search cost (training tokens and time)
            shared = tuned.shared_from  # its search was another variant's, counted there
            row["tuned"] = {"values": tuned.values, "shared_from": shared}
            # an adopted trial is the training run itself, counted there, not again as search
            adopted = [t for t in tuned.trials if t.number == row.get("adopted_from_trial")]
            row.update(
                tune_tokens=0 if shared else tuned.tune_tokens - sum(t.tokens_seen or 0 for t in adopted),
                tune_wall_s=0 if shared else round(tuned.tune_wall_s - sum(t.wall_s or 0 for t in adopted), 1),
            )
        if (row.get("seeds") or 1) > 1:  # mean and spread over training seeds (stages/evaluate.py)
            row["seed_spread"] = (
                f"{row['seeds']}: sd {row['quality_seed_sd'] * 100:.1f} pp, "
                f"{row['quality_seed_min']:.1%}–{row['quality_seed_max']:.1%}"
            )
        if "micro_batch" in row and row["micro_batch"] == row["micro_batch"]:
            row["batch_split"] = f"{row['micro_batch']} × {row['grad_accum']}"
        if isinstance(row.get("dtypes"), dict):  # what the run held its weights and saved activations in
            row["held_dtypes"] = {**row.pop("dtypes"), "checkpointed": bool(row.get("gradient_checkpointing"))}
        rows.append(row)
    return pd.DataFrame(rows)


def _items(name: str, key: str = "score") -> dict[int, object] | None:
    """The primary metric's per-example items of one run, by example id (None: no predictions)."""
    return read_items(runs.predictions(name), key)


def read_items(path, key: str = "score") -> dict[int, object] | None:
    """The per-example items under ``key`` of a predictions file, by example id (None: no file, or no such key)."""
    from pathlib import Path

    path = Path(path)
    if not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not rows or key not in rows[0]:
        return None
    return {r["id"]: tuple(r[key]) if isinstance(r[key], list) else r[key] for r in rows}


def _seed_items(name: str) -> list[dict]:
    """The primary metric's items of a variant's other training seeds (``seed_scores`` in its predictions), one
    dict by example id per seed, in seed order ([] with one seed)."""
    rows = (
        [json.loads(line) for line in runs.predictions(name).read_text().splitlines() if line.strip()]
        if runs.predictions(name).exists()
        else []
    )
    seeds = sorted((rows[0].get("seed_scores") or {}) if rows else {}, key=int)
    return [{r["id"]: tuple(v) if isinstance(v := r["seed_scores"][s], list) else v for r in rows} for s in seeds]


def use_interleaved(df: pd.DataFrame, timed: dict | None) -> None:
    """The variants' serving latencies as the export stage timed them, interleaved in one process (``timed``:
    name → latency metrics), in place of each evaluation's own; ``latency_how`` says which a row holds."""
    if not timed or "status" in timed:
        return
    for name, m in timed.items():
        hit = df["name"] == name
        for k, x in m.items():
            df.loc[hit, k] = x
        df.loc[hit, "latency_how"] = "interleaved"  # one process, one request of each run in turn


def as_number(x) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and x == x else float("-inf")


def prompting_quality(r, split: str = "test") -> float:
    """A baseline's quality on ``split`` (test | val): the better of free generation and choice among the labels by
    likelihood."""
    pre = "val_" if split == "val" else ""
    return max(as_number(r.get(f"{pre}quality")), as_number(r.get(f"{pre}quality_label_choice")))


def choosing_split(df: pd.DataFrame) -> str:
    """The split that picks the verdict's winners: ``val`` when every finished run was scored on it (the test split
    then only reports), else ``test`` (records from before validation scoring), which the report says."""
    ok = df[df["status"] == "ok"]
    return "val" if len(ok) and "val_quality" in df.columns and ok["val_quality"].notna().all() else "test"


def best_baseline(df: pd.DataFrame) -> str | None:
    """The prompting baseline with the best quality on the choosing split (first listed on a tie)."""
    ok = df[(df["kind"] == "baseline") & (df["status"] == "ok")]
    if ok.empty:
        return None
    split = choosing_split(df)
    rows = rows_of(ok)
    scores = [prompting_quality(r, split) for r in rows]
    return str(rows[max(range(len(scores)), key=lambda i: (scores[i], -i))].name)


def correctness(item) -> float:
    """An example's correctness from its item: the label pair agrees, or the score itself."""
    return float(item[0] == item[1]) if isinstance(item, tuple) else float(item)


def flips(items: dict, base: dict) -> list[dict]:
    """Examples whose score moved against the baseline: wrong → right / right → wrong (or better / worse for a
    graded metric)."""
    out = []
    for i, item in items.items():
        a, b = correctness(item), correctness(base[i])
        if a == b:
            continue
        binary = a in (0.0, 1.0) and b in (0.0, 1.0)
        direction = ("wrong_to_right" if a > b else "right_to_wrong") if binary else ("better" if a > b else "worse")
        out.append({"id": i, "direction": direction, "score": a, "baseline_score": b})
    return out


def primary_items(df: pd.DataFrame) -> dict[str, dict | None]:
    """Every finished run's per-example items of the primary metric on the test split; a baseline answers by label
    choice where that scored better on the choosing split."""
    split = choosing_split(df)
    items = {}
    for r in rows_of(df):
        if r.status != "ok":
            continue
        use_choice = r.kind == "baseline" and by_label_choice(r, split)
        items[r.name] = _items(r.name, "choice_score" if use_choice else "score")
    return items


def add_confidence(df: pd.DataFrame, metric: str, resamples: int = 2000, flips_dir: Path | None = None) -> dict:
    """Add each run's 95% interval and each variant's gain over the best baseline (paired bootstrap); write a
    flip file per variant into ``flips_dir``. Returns {variant: [flip rows]}."""
    figure = METRICS[metric].figure
    best = best_baseline(df)
    items = primary_items(df)
    base_items = items.get(best) if best else None
    out: dict[str, list[dict]] = {}
    df["best_baseline"] = best
    for col in ("quality_ci_low", "quality_ci_high", "gain", "gain_ci_low", "gain_ci_high"):
        df[col] = float("nan")
    for col in ("quality_ci", "quality_label_choice_ci", "gain_vs_prompting", "flips", "verdict_figure"):
        df[col] = None
    for i, r in zip(df.index, rows_of(df)):
        it = items.get(r.name)
        if not it:
            continue
        ids = sorted(it)
        seeds = [[s[k] for k in ids] for s in _seed_items(r.name)] if r.kind == "variant" else []
        # each interval beside the figure it belongs to: free generation's under "quality", label choice's under
        # "label choice" (a baseline's verdict items may be either)
        free = it if r.kind == "variant" else (_items(r.name, "score") or {})
        if free:
            q, lo, hi = bootstrap_ci([free[k] for k in ids], figure, resamples=resamples, seeds=seeds or None)
            if seeds:  # several training seeds: the quality is their mean, the interval holds their spread
                df.loc[i, "quality"] = round(q, 4)
            df.loc[i, ["quality_ci_low", "quality_ci_high"]] = [lo, hi]
            df.loc[i, "quality_ci"] = f"{lo:.1%}–{hi:.1%}"
        choice = _items(r.name, "choice_score") if r.kind == "baseline" else None
        if choice:
            _, clo, chi = bootstrap_ci([choice[k] for k in ids], figure, resamples=resamples)
            df.loc[i, "quality_label_choice_ci"] = f"{clo:.1%}–{chi:.1%}"
        if r.kind == "baseline":  # the figure the verdict compares a variant against, and the path behind it
            by_choice = choice is not None and it == choice
            df.loc[i, "verdict_figure"] = (
                f"{figure([it[k] for k in ids]):.1%} {'by label choice' if by_choice else 'generated'}"
            )
        if r.kind != "variant" or not base_items:
            continue
        if set(ids) != set(base_items):
            raise ValueError(
                f"runs/{r.name}/predictions.jsonl and runs/{best}/predictions.jsonl cover "
                f"different test examples: rerun both (dvc repro)"
            )
        gain, glo, ghi = bootstrap_ci(
            [it[k] for k in ids], figure, [base_items[k] for k in ids], resamples, seeds=seeds or None
        )
        df.loc[i, ["gain", "gain_ci_low", "gain_ci_high"]] = [gain, glo, ghi]
        df.loc[i, "gain_vs_prompting"] = f"{gain * 100:+.1f} pp [{glo * 100:+.1f}, {ghi * 100:+.1f}]"
        f = flips(it, base_items)
        out[r.name] = f
        lost = sum(x["direction"] in ("right_to_wrong", "worse") for x in f)
        df.loc[i, "flips"] = f"{lost}/{len(f) - lost}"
        if flips_dir is not None:
            _write_flips(flips_dir, r.name, best, f)
    return out


def _write_flips(flips_dir: Path, name: str, best: str, f: list[dict]) -> None:
    """reports/flips/<variant>.jsonl: each flipped example with both predictions and the reference."""
    preds = {
        n: {r["id"]: r for r in map(json.loads, runs.predictions(n).read_text().splitlines()) if r}
        for n in (name, best)
    }
    flips_dir.mkdir(parents=True, exist_ok=True)
    with open(flips_dir / f"{name}.jsonl", "w") as fh:
        for x in f:
            mine, theirs = preds[name][x["id"]], preds[best][x["id"]]
            fh.write(
                json.dumps(
                    {
                        **x,
                        "baseline": best,
                        "prompt": mine.get("prompt", ""),
                        "reference": mine["reference"],
                        "prediction": mine["prediction"],
                        "baseline_prediction": theirs["prediction"],
                        **({"baseline_label_choice": theirs["choice"]} if "choice" in theirs else {}),
                    },
                    ensure_ascii=False,
                )
                + "\n"
            )

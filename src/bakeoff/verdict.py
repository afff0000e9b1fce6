"""The answer: which prompting baseline and which variant are best, how sure we are of the gain, and what it costs.

    df = collect(baselines, variants)              # one row per run, from runs/<name>/*.json
    add_confidence(df, "exact_match", 2000, flips) # intervals, gains over the best baseline, flip files
    v = verdict(df, min_gain=0.05)                  # fine-tune | prompting is enough | inconclusive
    d = diagnose(df, params.baselines, labels)     # prompting that knows the answers but misses their form
    c = cost(df, v, usd_per_1k_prompt_tokens, fit) # tokens saved per request, training $ on the target, break-even

Pure decisions over run records and per-example items (``bakeoff.measure.bootstrap_ci``); no torch, no plotting.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from bakeoff import runs
from bakeoff.stats import bootstrap_ci
from bakeoff.metrics import METRICS


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
        if ev.get("side_checks"):  # side checks that did not finish (lm-eval, the probe, KL): their own failures
            row["side_checks_failed"] = "; ".join(f"{k} {c['status']}: {c['error']}"
                                                  for k, c in ev["side_checks"].items())
        if ev.get("engine"):  # an endpoint baseline: which model answered, and how label choice was made
            row.update(engine=f"endpoint: {ev['engine'].get('model')}", label_choice_via=ev["engine"].get("label_choice"))
        tuned = runs.read_json(runs.tuned_record(name)) or {}
        if tuned.get("values"):  # what the tune stage chose, and what its search cost (training tokens and time)
            row["tuned"] = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                                     for k, v in tuned["values"].items())
            shared = tuned.get("shared_from")  # its search was another variant's, counted there
            row["tuned"] += f" (search of `{shared}`)" if shared else ""
            # an adopted trial is the training run itself, counted there, not again as search
            adopted = [t for t in tuned.get("trials") or [] if t.get("number") == row.get("adopted_from_trial")]
            row.update(tune_tokens=0 if shared else tuned.get("tune_tokens", 0) - sum(t.get("tokens_seen") or 0
                                                                                     for t in adopted),
                       tune_wall_s=0 if shared else round(tuned.get("tune_wall_s", 0) - sum(t.get("wall_s") or 0
                                                                                            for t in adopted), 1))
        if (row.get("seeds") or 1) > 1:  # mean and spread over training seeds (stages/evaluate.py)
            row["seed_spread"] = (f"{row['seeds']}: sd {row['quality_seed_sd'] * 100:.1f} pp, "
                                  f"{row['quality_seed_min']:.1%}–{row['quality_seed_max']:.1%}")
        if "micro_batch" in row and row["micro_batch"] == row["micro_batch"]:
            row["batch_split"] = f"{row['micro_batch']} × {row['grad_accum']}"
        if isinstance(row.get("dtypes"), dict):  # what the run held its weights and saved activations in
            d = row.pop("dtypes")
            base = d.get("base", "?") + (f" ({d['compute']} compute)" if d.get("compute") else "")
            row["held_dtypes"] = (f"base {base} · head {d.get('head', '?')} · trained {d.get('trainable', '?')} · "
                                  f"activations {d.get('activations', '?')}"
                                  + (" · checkpointed" if row.get("gradient_checkpointing") else ""))
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


def _seed_items(name: str) -> list[dict]:
    """The primary metric's items of a variant's other training seeds (``seed_scores`` in its predictions), one
    dict by example id per seed, in seed order ([] with one seed)."""
    rows = [json.loads(line) for line in runs.predictions(name).read_text().splitlines() if line.strip()] \
        if runs.predictions(name).exists() else []
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
        df.loc[hit, "latency_how"] = "timed interleaved in one process, one request of each run in turn"


LN2 = math.log(2)
MOVE_TOL = 0.01  # nats: a preference loss this close to ln 2 (where DPO starts) without a standard error of its own


def did_not_move(df: pd.DataFrame, parents: dict) -> dict[str, dict]:
    """Derived runs that did not move from their parent: identical answers on every test item, and a preference
    loss on its validation pairs within the noise of ln 2 (two standard errors where the curve has them, else
    ``MOVE_TOL``), the loss of a policy still equal to its reference. Their ``convergence`` is set to say so."""
    out = {}
    rows = {r["name"]: r for _, r in df.iterrows()}
    for child, parent in parents.items():
        a, b = rows.get(child), rows.get(parent)
        if a is None or b is None or a["status"] != "ok" or b["status"] != "ok":
            continue
        mine, theirs = _items(child, "prediction"), _items(parent, "prediction")
        if not mine or mine != theirs:
            continue
        curve = ((runs.read_json(runs.train_record(child)) or {}).get("val_curve") or [])
        last = curve[-1] if curve else {}
        loss, se = last.get("loss"), last.get("se")
        if loss is not None and abs(loss - LN2) > max(2 * (se or 0.0), MOVE_TOL):
            continue
        out[child] = {"parent": parent, "identical": len(mine), "pref_loss": loss}
        df.loc[df["name"] == child, "convergence"] = f"did not move from `{parent}`"
    return out


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
    scores = [prompting_quality(r, split) for _, r in ok.iterrows()]
    return str(ok.iloc[max(range(len(scores)), key=lambda i: (scores[i], -i))]["name"])


def correctness(item) -> float:
    """An example's correctness from its item: the label pair agrees, or the score itself."""
    return float(item[0] == item[1]) if isinstance(item, tuple) else float(item)


def flips(items: dict, base: dict) -> list[dict]:
    """Examples whose score moved against the baseline: wrong → right / right → wrong (or better / worse for a
    graded metric)."""
    out = []
    for i in items:
        a, b = correctness(items[i]), correctness(base[i])
        if a == b:
            continue
        binary = a in (0.0, 1.0) and b in (0.0, 1.0)
        direction = ("wrong_to_right" if a > b else "right_to_wrong") if binary else ("better" if a > b else "worse")
        out.append({"id": i, "direction": direction, "score": a, "baseline_score": b})
    return out


def primary_items(df: pd.DataFrame) -> dict[str, dict | None]:
    """Every finished run's per-example items of the primary metric on the test split; a baseline answers by label
    choice where that scored better on the choosing split."""
    pre = "val_" if choosing_split(df) == "val" else ""
    items = {}
    for _, r in df.iterrows():
        if r["status"] != "ok":
            continue
        use_choice = r["kind"] == "baseline" and as_number(r.get(f"{pre}quality_label_choice")) > as_number(r.get(f"{pre}quality"))
        items[r["name"]] = _items(r["name"], "choice_score" if use_choice else "score")
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
    for i, r in df.iterrows():
        it = items.get(r["name"])
        if not it:
            continue
        ids = sorted(it)
        seeds = [[s[k] for k in ids] for s in _seed_items(r["name"])] if r["kind"] == "variant" else []
        # each interval beside the figure it belongs to: free generation's under "quality", label choice's under
        # "label choice" (a baseline's verdict items may be either)
        free = it if r["kind"] == "variant" else (_items(r["name"], "score") or {})
        if free:
            q, lo, hi = bootstrap_ci([free[k] for k in ids], figure, resamples=resamples, seeds=seeds or None)
            if seeds:  # several training seeds: the quality is their mean, the interval holds their spread
                df.loc[i, "quality"] = round(q, 4)
            df.loc[i, ["quality_ci_low", "quality_ci_high"]] = [lo, hi]
            df.loc[i, "quality_ci"] = f"{lo:.1%}–{hi:.1%}"
        choice = _items(r["name"], "choice_score") if r["kind"] == "baseline" else None
        if choice:
            _, clo, chi = bootstrap_ci([choice[k] for k in ids], figure, resamples=resamples)
            df.loc[i, "quality_label_choice_ci"] = f"{clo:.1%}–{chi:.1%}"
        if r["kind"] == "baseline":  # the figure the verdict compares a variant against, and the path behind it
            by_choice = choice is not None and it == choice
            df.loc[i, "verdict_figure"] = (f"{figure([it[k] for k in ids]):.1%} "
                                           f"{'by label choice' if by_choice else 'generated'}")
        if r["kind"] != "variant" or not base_items:
            continue
        if set(ids) != set(base_items):
            raise ValueError(f"runs/{r['name']}/predictions.jsonl and runs/{best}/predictions.jsonl cover "
                             f"different test examples: rerun both (dvc repro)")
        gain, glo, ghi = bootstrap_ci([it[k] for k in ids], figure, [base_items[k] for k in ids], resamples,
                                      seeds=seeds or None)
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


def verdict(df: pd.DataFrame, min_gain: float) -> dict:
    """Fine-tune, prompting is enough, or inconclusive: the best variant's gain over the best prompting baseline
    on the primary metric, judged by its paired bootstrap interval against ``min_gain``. Both winners are chosen on
    the validation split (``choosing_split``); the gain and its interval are the test split's."""
    best_b = df["best_baseline"].iloc[0] if "best_baseline" in df.columns and len(df) else None
    ok = df[(df["kind"] == "variant") & (df["status"] == "ok") & df.get("gain", pd.Series(dtype=float)).notna()]
    if best_b is None or ok.empty:
        why = "no prompting baseline finished" if best_b is None else "no fine-tuned variant finished"
        return {"decision": "inconclusive", "reason": why, "min_gain": min_gain}
    split = choosing_split(df)
    col = "val_quality" if split == "val" else "quality"
    top = ok.sort_values(col, ascending=False, kind="stable").iloc[0]
    gain, lo, hi, n = float(top["gain"]), float(top["gain_ci_low"]), float(top["gain_ci_high"]), int(top["n_test"])
    out = {"variant": top["name"], "baseline": best_b, "gain": gain, "ci_low": lo, "ci_high": hi,
           "min_gain": min_gain, "n_test": n, "chosen_on": "validation" if split == "val" else "test"}
    tied = [str(x) for x in ok.loc[ok[col] == top[col], "name"]]
    if len(tied) > 1:  # a tie for the leader: the rule that broke it is said, not hidden in a sort
        out["tie"] = {"runs": tied, "at": float(top[col]), "split": out["chosen_on"],
                      "rule": "the first listed in params.yaml leads"}
    against = df.loc[df["name"] == best_b, "verdict_figure"].iloc[0] if "verdict_figure" in df.columns else None
    if isinstance(against, str):
        out["baseline_figure"] = against
    said = f"`{best_b}` ({against})" if isinstance(against, str) else f"`{best_b}`"
    t = out.get("tie")
    lead = (f"`{top['name']}` (it ties `{'`, `'.join(x for x in t['runs'] if x != top['name'])}` at {t['at']:.1%} on "
            f"{t['split']}; {t['rule']})" if t else f"`{top['name']}`")
    if lo > min_gain:
        out.update(decision="fine-tune",
                   reason=f"{lead} beats {said} by {gain * 100:+.1f} points, 95% interval "
                          f"[{lo * 100:+.1f}, {hi * 100:+.1f}], all above min_gain {min_gain * 100:.1f}")
    elif hi < min_gain:
        out.update(decision="prompting is enough",
                   reason=f"the best variant {lead} gains {gain * 100:+.1f} points over {said}, "
                          f"95% interval [{lo * 100:+.1f}, {hi * 100:+.1f}], all below min_gain {min_gain * 100:.1f}")
    else:
        half = (hi - lo) / 2
        gap = abs(gain - min_gain)
        # the interval narrows as 1/√n: it clears min_gain once its half-width is below the gap
        # rounded before the ceiling: float noise in the gain (0.09999999999999998) must not add an example
        need = math.ceil(round(n * (half / gap) ** 2, 6)) if gap > 1e-9 else None
        settle = f"about {need} would settle it" if need else "no test set size would settle it: the gain sits at min_gain"
        out.update(decision="inconclusive", examples_needed=need,
                   reason=f"{lead} gains {gain * 100:+.1f} points over {said}; {n} test examples "
                          f"give an interval of ±{half * 100:.1f} points ([{lo * 100:+.1f}, {hi * 100:+.1f}]), which "
                          f"contains min_gain {min_gain * 100:.1f}; {settle}")
    return out


FORMAT_GAP = 0.2  # contains-reference this far above the primary metric: the answers are known, the format is not


def _cheap_fixes(b, searched: bool) -> dict[str, bool]:
    """Which cheap fixes prompting arm ``b`` ran (``searched=False``: the prompt it ran with) or tried (``True``: that
    prompt or any value of its search space)."""
    def values(key):
        return [getattr(b, key), *(((b.search or {}).get(key) or []) if searched else [])]

    return {"an instruction": any(values("instruction")),
            "8 or more nearest shots": max(values("shots")) >= 8 and "nearest" in values("selection")}


def diagnose(df: pd.DataFrame, baselines: dict, labels: list | None = None) -> list[dict]:
    """Knowledge or format, per prompting baseline: when far more of its answers *contain* the reference than
    match it (``contains_reference`` − quality ≥ ``FORMAT_GAP``), the base model knows the answers and fails on
    their form, and a cheap fix may close the gap before any training. Each finding names what it tried (shots,
    selection, instruction, label choice), what another prompting arm tried (as written or in its search), and
    what no arm tried."""
    out, by_arms = [], {}
    for n, b in baselines.items():
        for what in (what for what, yes in _cheap_fixes(b, True).items() if yes):
            by_arms.setdefault(what, []).append(n)
    for _, r in df[(df["kind"] == "baseline") & (df["status"] == "ok")].iterrows():
        contains, quality = r.get("contains_reference"), prompting_quality(r)
        if not isinstance(contains, (int, float)) or contains != contains or contains - quality < FORMAT_GAP:
            continue
        b = baselines.get(r["name"])
        choice = r.get("quality_label_choice")
        tried = [f"{b.shots} shot{'s' if b.shots != 1 else ''}" + (f" ({b.selection})" if b.shots else "")
                 if b else "?", f"instruction {b.instruction!r}" if b and b.instruction else "no instruction"]
        if isinstance(choice, (int, float)) and choice == choice:
            tried.append(f"label choice ({choice:.0%})")
        ran, searched = (_cheap_fixes(b, False), _cheap_fixes(b, True)) if b else ({}, {})
        fixes = {"an instruction": f"an instruction that fixes the form (baselines.{r['name']}.instruction)",
                 "8 or more nearest shots": "more or nearer shots"}
        elsewhere, left = [], []
        for what, fix in fixes.items():
            others = [a for a in by_arms.get(what, []) if a != r["name"]]
            if ran.get(what):  # in the prompt it ran with, named above
                continue
            if searched.get(what):  # its own search tried it and chose otherwise on validation
                tried.append(f"{what} (in its search, not chosen)")
            elif others:
                elsewhere.append(f"{what} ({', '.join(others)})")
            else:
                left.append(fix)
        left += [] if labels else ["a closed answer set (task.labels: the answer is then chosen by likelihood)"]
        out.append({"baseline": r["name"], "contains_reference": float(contains), "quality": float(quality),
                    "tried": tried, "tried_elsewhere": elsewhere, "left": left,
                    "line": f"`{r['name']}` fails on format, not knowledge: {contains:.0%} of its answers contain the "
                            f"reference, {quality:.0%} score on the primary metric. Tried: {', '.join(tried)}."
                            + (f" Tried by other prompting arms: {'; '.join(elsewhere)}." if elsewhere else "")
                            + (f" Not tried: {'; '.join(left)}." if left else "")})
    return out


def cost(df: pd.DataFrame, v: dict, price_per_1k: float, costs: dict, serve_card: dict | None) -> dict:
    """The money side of the verdict: the verdict's variant all in on the sizing target (``costs``: name →
    ``all_in``), the prompt tokens each request saves, and the daily volume above which serving it on its own card
    costs less than pay-per-token prompting (``break_even``). The break-even follows the verdict: given for
    "fine-tune", given as what it would be if the gain held for "inconclusive", not given for "prompting is enough"
    (the card would serve a worse answer)."""
    out: dict = {}
    if "variant" not in v:
        return out
    rows = {r["name"]: r for _, r in df.iterrows()}
    var, base = rows[v["variant"]], rows[v["baseline"]]
    prompt = float(base.get("prompt_tokens_per_request") or 0)
    saved = prompt - float(var.get("prompt_tokens_per_request") or 0)
    out["variant"] = v["variant"]
    out["prompt_tokens_saved_per_request"] = round(saved, 1)
    out["usd_saved_per_request"] = saved / 1000 * price_per_1k
    out["train_wall_s_here"] = var.get("train_wall_s")
    c = costs.get(v["variant"])
    if c:
        out["all_in"] = c
    from bakeoff.costs import break_even

    endpoint_usd = as_number(base.get("usd_per_request"))  # an endpoint baseline: its measured tokens, its prices
    endpoint_usd = None if endpoint_usd == float("-inf") else endpoint_usd
    be = break_even(prompt, price_per_1k, serve_card, endpoint_usd)
    if be and endpoint_usd is not None:
        be["priced_by"] = "endpoint"
    if be:
        key = {"fine-tune": "break_even", "inconclusive": "break_even_if_gain_held"}.get(v["decision"])
        out.update({k: x for k, x in be.items() if k != "break_even_requests_per_day"})
        if key:
            out[key + "_requests_per_day"] = be["break_even_requests_per_day"]
    return out

"""Where one search trial's time goes, and what the search's speed levers save: one trial of `lora`, `full` and
`dpo` at the default shape (params.yaml, the prepared task), before and after, in one process, as ratios.

    python benchmarks/trial_time.py                  # after `dvc repro data` (about 15 min on 2 CPU cores)
    python benchmarks/trial_time.py --steps 4        # a short look (ratios are not judged at a short shape)

A trial here is what ``tune@<variant>`` runs for each Optuna trial (``bakeoff.search.trials``): the variant at its
recipe's values, its full ``max_steps``, validation loss every ``eval_steps``, the best evaluation's weights kept;
DPO's trial is then judged by the task metric on the validation split (generation), as its search judges it. The
DPO trials continue the `lora` trial trained here (its parent, as `dpo` continues `lora` in the pipeline).

Each trial's wall time is split into phases by a TrainerCallback: setup (the model loaded, the trainer built: the
rows tokenized; with ``precompute_ref``, DPO's reference pass), steps (the optimizer steps), validation (each
evaluation), saves (the checkpoint behind "keep the best weights"), finish (the best weights reloaded and the model
saved) and judge (DPO's task metric on validation).

Levers compared (``before`` → ``after``):
  dpo   ``precompute_ref: false`` (the frozen reference's forward pass in every step, the pipeline's setting until
        now) → ``true`` (once per pair, before the first step; TRL caches it by the pairs and the reference's
        weights, so a search's second and later trials reuse the first trial's). Both the first trial (which computes
        the cache) and a second trial (which reuses it) are timed after.
  lora, full: no lever changed; each is timed once and its phases shown (where a trial's time goes).

Targets (exit 1 on a miss; judged at the default shape only): ``dpo_later_trial_speedup`` (a DPO trial that reuses
the reference, before / after) at least ``DPO_TARGET``; ``dpo_first_trial_speedup`` at least 0.95 (the trial that
computes the reference is no slower); ``dpo_val_loss_gap`` (the largest gap between the after trials' last validation
loss and before's) at most ``LOSS_TOL``: the same reference, so the same training.
Writes reports/bench/trial_time.json. Run it alone: another torch process on 2 cores slows both.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from targets import Targets, add_argument

ROOT = Path(__file__).resolve().parents[1]
DPO_TARGET, LOSS_TOL = 1.15, 0.01


def phase_clock():
    from transformers import TrainerCallback

    class Phases(TrainerCallback):
        def __init__(self):
            self.t = {"validation": 0.0, "saves": 0.0}
            self.begin = self.end = self.last = None

        def on_train_begin(self, args, state, control, **kw):
            self.begin = self.last = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.last = time.perf_counter()

        def on_evaluate(self, args, state, control, **kw):
            now = time.perf_counter()
            self.t["validation"] += now - self.last
            self.last = now

        def on_save(self, args, state, control, **kw):
            now = time.perf_counter()
            self.t["saves"] += now - self.last
            self.last = now

        def on_train_end(self, args, state, control, **kw):
            self.end = time.perf_counter()

    return Phases()


def one_trial(
    params, name: str, steps: int | None, work: Path, options: dict | None = None, parent: Path | None = None
) -> dict:
    """One trial of variant ``name`` as its search runs it, timed by phase."""
    from bakeoff.core.models import resolve_precision
    from bakeoff.search.arm import val_metric
    from bakeoff.search.space import trial_variant
    from bakeoff.search.trials import keeps_best, recipe_values
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    v = params.variant(name)
    if options:
        v = replace(v, options={**v.options, **options})
    if steps:
        v = replace(v, train=replace(v.train, max_steps=steps, eval_steps=max(1, steps // 2)))
    space = params.tune.spaces.get(v.technique) or {}
    tv = trial_variant(v, params.tune, recipe_values(v, space))
    technique = get_technique(v.technique)
    data = ROOT / "data" / "prepared"
    rows, val = technique.load_rows(data), technique.val_rows(data)
    out = work / f"{name}-{time.monotonic_ns()}"
    clock = phase_clock()
    t0 = time.perf_counter()
    job = Job(
        technique,
        tv,
        ROOT / "models" / "base",
        out / "model",
        resolve_precision(v.train.precision),
        out / "work",
        parent_dir=parent,
        judge_patience=v.train.early_stopping_patience,
        keep_best=keeps_best(v),
    )
    rec = train(job, rows, val_rows=val, extra_callbacks=[clock])
    t_trained = time.perf_counter()
    judge = None
    if v.parent:  # judged by the task metric on validation, as tune_from@ judges it
        judge = val_metric(params)(tv, out / "model")
    t_done = time.perf_counter()
    phases = {
        "setup": clock.begin - t0,
        "steps": clock.end - clock.begin - sum(clock.t.values()),
        **clock.t,
        "finish": t_trained - clock.end,
        "judge": t_done - t_trained if v.parent else 0.0,
    }
    losses = [p["loss"] for p in rec["val_curve"]]
    return {
        "variant": name,
        "options": options or {},
        "wall_s": round(t_done - t0, 1),
        "phases_s": {k: round(x, 1) for k, x in phases.items()},
        "steps": rec.get("stopped_at_step"),
        "val_loss_last": round(losses[-1], 5) if losses else None,
        "val_metric": judge,
        "train_tokens_per_s": rec.get("train_tokens_per_s"),
        "model": str(out / "model"),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps per trial (default: params.yaml's)")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "trial_time.json"))
    add_argument(ap)
    args = ap.parse_args(argv)

    import os

    os.chdir(ROOT)
    from bakeoff.core.config import load_params
    from bakeoff.core.runs import device_name

    params = load_params()
    if not (ROOT / "data" / "prepared" / "prefs_train.jsonl").exists():
        print("no prepared task: run `dvc repro data` first", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bakeoff-trial-time-"))
    runs = {}
    try:
        for name in ("lora", "full"):
            runs[name] = one_trial(params, name, args.steps, work)
            print(f"{name}: {runs[name]['wall_s']} s  {runs[name]['phases_s']}", flush=True)
        parent = Path(runs["lora"]["model"])
        runs["dpo_before"] = one_trial(params, "dpo", args.steps, work, {"precompute_ref": False}, parent)
        print(f"dpo before: {runs['dpo_before']['wall_s']} s  {runs['dpo_before']['phases_s']}", flush=True)
        for key in ("dpo_after_first", "dpo_after_second"):
            runs[key] = one_trial(params, "dpo", args.steps, work, {"precompute_ref": True}, parent)
            print(f"{key.replace('_', ' ')}: {runs[key]['wall_s']} s  {runs[key]['phases_s']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    before = runs["dpo_before"]
    ratio_first = before["wall_s"] / runs["dpo_after_first"]["wall_s"]
    ratio_second = before["wall_s"] / runs["dpo_after_second"]["wall_s"]
    gap = max(abs(runs[k]["val_loss_last"] - before["val_loss_last"]) for k in ("dpo_after_first", "dpo_after_second"))
    judged = args.steps is None
    machine = device_name()
    print(f"\nOne search trial at {'the default shape' if judged else f'{args.steps} steps'} on {machine}")
    phases = list(runs["lora"]["phases_s"])
    print(f"| trial | wall s | {' | '.join(phases)} |")
    print(f"|---|---:|{'---:|' * len(phases)}")
    for k, r in runs.items():
        print(f"| {k} | {r['wall_s']} | {' | '.join(str(r['phases_s'][p]) for p in phases)} |")
    print(
        f"\ndpo trial speed-up, before / after: {ratio_first:.2f}x on the search's first trial (it computes the "
        f"reference), {ratio_second:.2f}x on each later one (it reuses it)"
    )
    targets = Targets.from_args(args.target)
    if judged:  # a short run is a look at the phases, not a measurement of the levers
        targets.at_least("dpo_later_trial_speedup", round(ratio_second, 3), DPO_TARGET)
        targets.at_least("dpo_first_trial_speedup", round(ratio_first, 3), 0.95)
        targets.at_most("dpo_val_loss_gap", round(gap, 5), LOSS_TOL)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps(
            {
                "machine": machine,
                "steps": args.steps or "default",
                "runs": {k: {kk: vv for kk, vv in r.items() if kk != "model"} for k, r in runs.items()},
                "ratios": {"dpo_first": round(ratio_first, 3), "dpo_later": round(ratio_second, 3)},
                "targets": targets.results,
            },
            indent=1,
        )
    )
    print(f"wrote {args.out}")
    targets.exit()
    return 0


if __name__ == "__main__":
    sys.exit(main())

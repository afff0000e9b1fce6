"""One point of a data-value curve, as the curve stage runs it (``curve@<arm>-<share>``): the arm trained (a variant)
or prompted (a baseline) on a nested, label-stratified share of the training split (``bakeoff.data.subsets``), scored
on the test split as its own run was, recorded in reports/curve/<arm>-<share>/ and as a child MLflow run of the arm's.

    run_point(params, "recommended", 0.25, "lora", "the recommended variant")

``curve.arms`` names runs or roles (``recommended``, ``best_prompt``), which the stage resolves first
(``bakeoff.decide.decision.curve_arm``). The schedule at a smaller share: the arm's searched values and, with
``curve.schedule: steps``, its own optimizer steps (more epochs over fewer rows), with ``epochs`` the same epochs
(``ceil(share × max_steps)`` steps, at least ``curve.min_steps``); either way with the arm's own early stopping on the
same validation split. A baseline's point draws its shots from the share. The full-size point is the arm's own run,
never rerun. A point that fails is that point's status, never the pipeline's.
"""

from __future__ import annotations

import gc
import math
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core import runs, tracking
from bakeoff.core.records import RunRecord, read_run
from bakeoff.core.runs import curve_point_dir as point_dir
from bakeoff.core.scoring import by_label_choice as label_choice_wins

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def digest(rows: list) -> str:
    """The rows a point drew, as one short hash of their texts (the same share: the same digest on every rerun)."""
    import hashlib

    from bakeoff.data.subsets import row_key

    return hashlib.sha256("\n".join(sorted(row_key(r) for r in rows)).encode()).hexdigest()[:16]


def steps_at(max_steps: int, share: float, floor: int, schedule: str = "steps") -> int:
    """Optimizer steps at ``share`` of the rows: ``steps``, the arm's own (more epochs over fewer rows, its early
    stopping judging when to end); ``epochs``, the same epochs as the full run, at least ``floor``."""
    if schedule == "steps":
        return max_steps
    return min(max_steps, max(floor, math.ceil(share * max_steps)))


def run_point(params: Params, arm: str, share: float, name: str | None, why: str) -> dict:
    """The curve stage: one point of curve arm ``arm``, the run ``name`` it resolved to (``why``: how it was chosen;
    ``bakeoff.decide.decision.curve_arm``), its predictions and record in its folder; returns the record."""
    out = runs.fresh_dir(point_dir(arm, share))
    record = {"arm": arm, "share": share, "run": name, "chosen_as": why}
    own = read_run(runs.eval_record(name)) if name else RunRecord()
    if not own or own.status != "ok":
        record.update(
            status="skipped", metrics={}, error=f"no finished run to draw the curve of ({why}: {name or 'none'})"
        )
    else:
        record["kind"] = own.kind
        runs.guarded(record, lambda: _measure(params, name, share, record, out))
        parent = own.run_id
        if parent:
            try:  # a child of the arm's MLflow run; its failure (the run gone from the store) is the point's note
                record["mlflow_run_id"] = tracking.child_of(
                    params,
                    parent,
                    f"{name} curve {share:g}",
                    {"kind": "curve_point", "curve_of": name, "curve.share": share, "curve.arm": arm},
                    record.get("metrics") or {},
                    ok=record["status"] == "ok",
                )
            except tracking.TrackingUnreachable:
                raise
            except Exception as e:  # the point stands without its MLflow run
                record["mlflow_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    if record["status"] != "ok":
        print(f"[curve] {arm} at {share:g}: {record['status']}: {record.get('error', '')[:200]}", flush=True)
    runs.write_json(out / "point.json", record)
    return record


def _measure(params: Params, name: str, share: float, record: dict, out: Path) -> dict:
    from bakeoff.core.models import load_tokenizer, resolve_precision
    from bakeoff.core.scoring import score
    from bakeoff.data.examples import write_jsonl
    from bakeoff.evaluate.generation import generate
    from bakeoff.evaluate.local import EvalInputs, rows_of

    inputs = EvalInputs.load(runs.PREPARED, params)
    if name in params.baselines:
        from bakeoff.core.spaces import as_run

        if not as_run(params, name)[0].shots:  # a prompt that reads no training row: its own run's answers
            return _no_shots(name, share, inputs, out)
    plan, serving = inputs.plan, resolve_precision(params.eval.dtype)
    tok = load_tokenizer(runs.BASE)
    if name in params.variants:
        model, to_prompt, m = _trained(params, name, share, plan.labels, serving)
    else:
        model, to_prompt, m = _prompted(params, name, share, inputs.train, plan.labels, serving)
    t0 = time.time()
    prompts, refs = [to_prompt(e) for e in inputs.test], [e.completion for e in inputs.test]
    if by_label_choice(params, name, plan.labels):  # as its own run is judged: the answer chosen among the labels
        from bakeoff.evaluate.logprobs import choose_labels

        chosen = choose_labels(model, tok, prompts, plan.labels, desc=f"curve {name} {share:g} label choice")
        value, items = score(plan.metric, chosen, refs, plan.labels)
        rows = rows_of(inputs.test, chosen, items)
        for r in rows:
            r.update(choice=r["prediction"], choice_score=r["score"])
        m["figure"] = "label choice"
    else:
        preds, _ = generate(model, tok, prompts, plan.decoding, desc=f"curve {name} {share:g}")
        value, items = score(plan.metric, preds, refs, plan.labels)
        rows = rows_of(inputs.test, preds, items)
        m["figure"] = "generation"
    m.update(quality=round(value, 4), n_test=len(inputs.test), eval_wall_s=round(time.time() - t0, 2))
    write_jsonl(out / "predictions.jsonl", rows)
    del model
    gc.collect()
    print(f"[curve] {name} at {share:g} ({m['rows']} of {m['rows_full']} rows): quality {value:.1%}", flush=True)
    return m


def by_label_choice(params: Params, name: str, labels) -> bool:
    """Whether a baseline's own run is judged by its choice among the labels (``bakeoff.core.scoring.
    by_label_choice``, as ``bakeoff.decide.figures.primary_items`` applies it): its points are scored the same way,
    and only so."""
    if name not in params.baselines or not labels:
        return False
    own = read_run(runs.eval_record(name)).metrics or {}
    return label_choice_wins(own, "val" if "val_quality" in own else "test")


def _no_shots(name: str, share: float, inputs, out: Path) -> dict:
    """A prompt without shots reads no training row: at every share it is its own run, whose answers it takes."""
    shutil.copy(runs.predictions(name), out / "predictions.jsonl")
    own = read_run(runs.eval_record(name)).metrics or {}
    return {
        "rows": max(1, round(share * len(inputs.train))),
        "rows_full": len(inputs.train),
        "shots": 0,
        "train_steps": 0,
        "tokens_seen": 0,
        "train_wall_s": 0.0,
        "eval_wall_s": 0.0,
        "quality": own.get("quality"),
        "n_test": own.get("n_test"),
        "reused": "no shots: the same prompt at every share, its own run's answers",
    }


def _trained(params: Params, name: str, share: float, labels, serving: str):
    """The variant trained on the share at its searched values on ``curve.schedule``; the model as served."""
    from bakeoff.core.spaces import apply, as_run
    from bakeoff.data.corpus import prepared
    from bakeoff.data.raft import VariantPassages
    from bakeoff.data.subsets import nested_subset
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    v, _ = as_run(params, name)
    technique = get_technique(v.technique)
    if v.backend == "unsloth":
        from bakeoff.train.backends import unsloth

        reason = unsloth.cpu_reason()
        if reason:
            raise runs.Skipped(reason)
    every = technique.load_rows(runs.PREPARED)
    rows = nested_subset(every, share, params.task.seed, labels)
    steps = steps_at(v.train.max_steps, share, params.curve.min_steps, params.curve.schedule)
    pv = apply(v, {}, max_steps=steps, checkpoint_steps=0, seeds=1)
    use = VariantPassages.of(v, prepared(runs.PREPARED), params.retrieval.embedder)  # a variant asked with passages
    val = technique.val_rows(runs.PREPARED)
    trained_on, val = (use.training(rows, pv.train.seed), use.asked(val or [])) if use else (rows, val)
    work = runs.fresh_dir(runs.work_dir(f"curve.{name}-{share}"))
    got = train(Job.of_variant(technique, pv, work / "model", work / "train"), trained_on, val_rows=val or None)
    model = technique.load_for_eval(runs.BASE, work / "model", pv, serving)
    shutil.rmtree(work, ignore_errors=True)  # loaded: the point keeps its answers, not its weights
    keep = (
        "train_steps",
        "tokens_seen",
        "rows_seen",
        "train_wall_s",
        "train_tokens_per_s",
        "train_loss_final",
        "stopped_at_step",
        "best_step",
        "convergence",
    )
    m = {
        "rows": len(rows),
        "rows_full": len(every),
        "rows_digest": digest(rows),
        "max_steps": steps,
        "lr": pv.train.lr,
        **{k: got[k] for k in keep if k in got},
    }
    return model, ((lambda e: use.asked([e])[0].messages) if use else (lambda e: e.messages)), m


def _prompted(params: Params, name: str, share: float, train_rows: list, labels, serving: str):
    """The base model prompted as the baseline's own run, its shots drawn from the share."""
    from bakeoff.core.models import load_for_eval
    from bakeoff.core.spaces import as_run
    from bakeoff.data.corpus import prepared
    from bakeoff.data.prompts import Prompter
    from bakeoff.data.subsets import nested_subset

    b, _ = as_run(params, name)
    if b.endpoint:
        raise runs.Skipped("an endpoint baseline: its curve would be paid per call (name a local baseline)")
    rows = nested_subset(train_rows, share, params.task.seed, labels)
    to_prompt = Prompter(b, rows, params.task.seed, params.retrieval.embedder, prepared(runs.PREPARED))
    model = load_for_eval(runs.BASE, precision=serving)
    m = {
        "rows": len(rows),
        "rows_full": len(train_rows),
        "rows_digest": digest(rows),
        "shots": b.shots,
        "selection": b.selection,
        "train_steps": 0,
        "tokens_seen": 0,
        "train_wall_s": 0.0,
    }
    return model, to_prompt, m

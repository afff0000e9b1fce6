"""One trained variant evaluated as the evaluate stage runs it (``evaluate@<variant>``), in the same MLflow run as
its training: the baselines' evaluation on the test split, scored as it would be served (in ``eval.dtype``: a LoRA
adapter merged into the base, a QLoRA adapter on its 4-bit base), with its side figures (the forgetting checks, KL to
the base, QLoRA's untrained 4-bit control, latency unmerged, lm-eval), each of which may fail alone.
"""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

from bakeoff.core import runs, tracking
from bakeoff.core.models import load_tokenizer, resolve_precision, torch_name
from bakeoff.core.records import RunRecord, SeedRun, read_run
from bakeoff.core.techniques import facts
from bakeoff.data.examples import write_jsonl
from bakeoff.evaluate.generation import latency
from bakeoff.evaluate.local import (
    Ask,
    EvalInputs,
    KlToBase,
    LmEvalRun,
    evaluate_examples,
    quantized_control,
    run_lm_eval,
    score_seed,
    side_check,
)
from bakeoff.train.techniques import get_technique

if TYPE_CHECKING:
    from bakeoff.core.sections import Params

BASE = runs.BASE


def unmerged_latency(technique, v, serving: str, tok, inputs) -> dict:
    """Latency of an adapter served unmerged (nothing where the technique serves it merged only)."""
    unmerged = technique.load_unmerged(BASE, runs.variant_dir(v.name), v, serving)
    if unmerged is None:
        return {}
    prompts = [e.messages for e in inputs.test]
    got = latency(
        unmerged, tok, prompts, inputs.plan.max_new_tokens, inputs.plan.latency_requests, f"{v.name} unmerged"
    ).metrics("_unmerged")
    del unmerged
    gc.collect()
    return got


def evaluate_variant(params: Params, name: str) -> None:
    """The evaluate stage: score the variant (or carry its training's failure over) and write its record."""
    v = params.variant(name)
    trained = read_run(runs.train_record(name))
    inputs = EvalInputs.load(runs.PREPARED, params)
    record = {"name": name, "kind": "variant", "technique": v.technique, "backend": v.backend}
    with tracking.resume(params, trained.run_id, tracking.RunTags(name, "variant", v.technique), {}) as run:
        record["run_id"] = run.info.run_id
        tracking.log_splits({"test": "testing"}, str(runs.PREPARED))
        if trained.status != "ok":  # training did not produce a model: carry its status over
            status = trained.status if trained.has("status") else "failed"
            error = trained.error if trained.has("error") else "no training record"
            record.update(status=status, metrics={}, error=error)
            write_jsonl(runs.predictions(name), [])
        else:
            runs.guarded(record, lambda: Evaluation(params, v, trained, inputs, record).run())
            if record["status"] != "ok":
                write_jsonl(runs.predictions(name), [])
            tracking.log_metrics(record["metrics"])
        tracking.mark(record)
    runs.finish(record, runs.eval_record(name))


class Evaluation:
    """One variant's evaluation, one model resident at a time: the test split and its seeds, then the side figures
    (each a side check: its failure is recorded, never the arm's), the base loaded last for KL."""

    def __init__(self, params: Params, v, trained: RunRecord, inputs, record: dict):
        self.params, self.v, self.trained, self.record = params, v, trained, record
        self.inputs = inputs.as_asked(v, params.retrieval.embedder)  # with its passages, where it has passages
        self.name, self.technique = v.name, get_technique(v.technique)
        self.out, self.serving = runs.variant_dir(v.name), resolve_precision(params.eval.dtype)
        self.tok = load_tokenizer(BASE)
        self.model = None

    def run(self) -> dict:
        metrics, rows = self.test()
        kl = KlToBase(BASE, self.name, self.serving) if self.params.eval.probe else None
        if kl and not side_check(self.record, metrics, "general_kl", lambda: kl.take(self.model, self.tok)):
            kl = None  # how far training moved the model from the base on general text (finished below)
        if facts(self.v.technique).quantized and hasattr(self.model, "disable_adapter"):
            self.control(metrics, kl)
        self.after_test(metrics, rows)
        if kl:  # the base, where it is loaded, only once the evaluated model is freed
            self.model = self.lm = None
            gc.collect()
            side_check(self.record, metrics, "general_kl", lambda: kl.finish(self.tok))
        return metrics

    def test(self) -> tuple[dict, list[dict]]:
        """The test split (resumable), the other training seeds, the predictions file."""
        name, inputs, trained = self.name, self.inputs, self.trained
        self.model = self.technique.load_for_eval(BASE, self.out, self.v, self.serving)
        resume = runs.Resume(
            runs.work_dir(name) / "test_answers.jsonl",  # a killed evaluation continues here
            f"{trained.run_id}|{self.serving}|{inputs.plan.max_new_tokens}",
        )
        metrics, rows = evaluate_examples(
            self.model,
            self.tok,
            inputs.test,
            inputs.val,
            inputs.plan,
            Ask(pairs=inputs.pairs, desc=name, resume=resume),
        )
        seeds = [x for x in trained.seeds or [] if x.status == "ok"]
        if seeds:  # the other training seeds: test quality each, mean and spread (bakeoff.decide.figures)
            metrics.update(self.seed_metrics(rows, metrics["quality"], seeds))
        write_jsonl(runs.predictions(name), rows)
        resume.finish()
        metrics.update(
            served=self.technique.served_as(self.out), serving_dtype=self.technique.serving_dtype(self.v, self.serving)
        )
        if inputs.retrieval is not None:  # asked with passages: how often they held the gold document
            metrics.update(inputs.retrieval.recall(inputs.test))
        return metrics, rows

    def control(self, metrics: dict, kl) -> None:
        """QLoRA's control: the untrained 4-bit base scored like every run (task, probe, KL to the base)."""
        from bakeoff.evaluate.lmeval import run_probe

        params = self.params
        probe = (
            (
                lambda m: run_probe(
                    m,
                    self.tok,
                    runs.work_dir(self.name) / "probe_control",
                    params.eval.batch_size,
                    torch_name(self.serving),
                    params.eval.probe_limit,
                )
            )
            if params.eval.probe
            else None
        )
        try:  # the control is a side figure: its failure is recorded, never the arm's
            metrics.update(quantized_control(self.model, self.tok, self.inputs.test, self.inputs.plan, probe))
            if kl:
                kl.take_control(self.model)
        except Exception as e:
            metrics["control_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]

    def after_test(self, metrics: dict, rows: list[dict]) -> None:
        """Latency unmerged, lm-eval on the same test split, the forgetting checks."""
        params, record, name = self.params, self.record, self.name
        lm_model = self.technique.lm_eval_model(BASE, self.out)
        if lm_model is not None:  # lm-eval loads it from the saved files: free ours first
            self.model = None
            gc.collect()
        if self.inputs.plan.latency_requests:
            side_check(
                record,
                metrics,
                "latency_unmerged",
                lambda: unmerged_latency(self.technique, self.v, self.serving, self.tok, self.inputs),
            )
        self.lm = lm_model if lm_model is not None else self.model
        if params.eval.lm_eval != "off":
            side_check(
                record,
                metrics,
                "lm_eval",
                lambda: run_lm_eval(
                    self.inputs,
                    rows,
                    self.lm,
                    self.tok,
                    runs.work_dir(name) / "lm_eval",
                    LmEvalRun(params.eval.lm_eval, torch_name(self.serving)),
                ),
            )
        self.general_checks(metrics)

    def seed_metrics(self, rows: list[dict], primary: float, seeds: list[SeedRun]) -> dict:
        """Each extra seed's test quality (also logged into its child MLflow run), and the mean and standard deviation
        over every seed, the primary one included."""
        import statistics

        v, qualities = self.v, [primary]
        for s in seeds:
            model = self.technique.load_for_eval(BASE, runs.seed_dir(v.name, s.seed), v, self.serving)
            q = score_seed(model, self.tok, self.inputs, rows, s.seed, f"{v.name} seed {s.seed}")
            del model
            gc.collect()
            qualities.append(q)
            tracking.log_to_run(s.run_id, {"quality": q})
        return {
            "seeds": len(qualities),
            "quality_seed_mean": round(statistics.mean(qualities), 4),
            "quality_seed_sd": round(statistics.stdev(qualities), 4),
            "quality_seed_min": round(min(qualities), 4),
            "quality_seed_max": round(max(qualities), 4),
        }

    def general_checks(self, metrics: dict) -> None:
        """The forgetting checks lm-eval runs on ``self.lm`` (a loaded model or its ``hf`` model_args), each a side
        check: the offline probe (metrics) and the standard tasks (``record["lm_eval_tasks"]``, skipped offline)."""
        from bakeoff.evaluate.lmeval import run_probe, run_standard

        params, record, lm, tok, dtype = self.params, self.record, self.lm, self.tok, torch_name(self.serving)
        if params.eval.probe:
            side_check(
                record,
                metrics,
                "probe",
                lambda: run_probe(
                    lm, tok, runs.work_dir(self.name) / "probe", params.eval.batch_size, dtype, params.eval.probe_limit
                ),
            )
        if params.eval.lm_eval_tasks:

            def standard():
                record["lm_eval_tasks"] = run_standard(
                    params.eval.lm_eval_tasks, lm, tok, params.eval.batch_size, params.eval.lm_eval_limit, dtype
                )

            side_check(record, metrics, "lm_eval_tasks", standard)

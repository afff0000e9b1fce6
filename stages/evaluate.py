"""Stage `evaluate@<variant>`: the baselines' evaluation, on a trained variant; same MLflow run as training.

    python stages/evaluate.py lora

The model is scored as it would be served, in the serving dtype `eval.dtype` (a LoRA adapter merged into the
base; a QLoRA adapter on its 4-bit base, computing in that dtype); latency is measured unmerged too where that
differs. lm-eval scores the same test split from the saved files (`peft=` for an adapter).
"""

import gc
import sys

from bakeoff import runs, tracking
from bakeoff.config import load_params
from bakeoff.data import write_jsonl
from bakeoff.errors import cli
from bakeoff.evaluate import (EvalInputs, KlToBase, evaluate_examples, latency, quantized_control, run_lm_eval,
                              score_seed, side_check)
from bakeoff.models import load_tokenizer, resolve_precision, torch_name
from bakeoff.techniques import get_technique

BASE = runs.BASE


def seed_metrics(technique, v, serving: str, tok, inputs, rows: list[dict], primary: float, seeds: list[dict]) -> dict:
    """Each extra seed's test quality (also logged into its child MLflow run), and the mean and standard deviation
    over every seed, the primary one included."""
    import statistics

    qualities = [primary]
    for s in seeds:
        model = technique.load_for_eval(BASE, runs.seed_dir(v.name, s["seed"]), v, serving)
        q = score_seed(model, tok, inputs.test, inputs.plan, rows, s["seed"], f"{v.name} seed {s['seed']}")
        del model
        gc.collect()
        qualities.append(q)
        tracking.log_to_run(s["run_id"], {"quality": q})
    return {"seeds": len(qualities), "quality_seed_mean": round(statistics.mean(qualities), 4),
            "quality_seed_sd": round(statistics.stdev(qualities), 4), "quality_seed_min": round(min(qualities), 4),
            "quality_seed_max": round(max(qualities), 4)}


def general_checks(params, name: str, lm, tok, serving: str, record: dict, metrics: dict) -> None:
    """The forgetting checks lm-eval runs on ``lm`` (a loaded model or its ``hf`` model_args), each a side check:
    the offline probe (metrics) and the standard tasks (``record["lm_eval_tasks"]``, skipped offline)."""
    from bakeoff.lmeval import run_probe, run_standard

    if params.eval.probe:
        side_check(record, metrics, "probe", lambda: run_probe(lm, tok, runs.work_dir(name) / "probe",
                                                                params.eval.batch_size, torch_name(serving),
                                                                params.eval.probe_limit))
    if params.eval.lm_eval_tasks:
        def standard():
            record["lm_eval_tasks"] = run_standard(params.eval.lm_eval_tasks, lm, tok, params.eval.batch_size,
                                                   params.eval.lm_eval_limit, torch_name(serving))
        side_check(record, metrics, "lm_eval_tasks", standard)


def unmerged_latency(technique, v, serving: str, tok, inputs) -> dict:
    """Latency of an adapter served unmerged (nothing where the technique serves it merged only)."""
    unmerged = technique.load_unmerged(BASE, runs.variant_dir(v.name), v, serving)
    if unmerged is None:
        return {}
    prompts = [e.messages for e in inputs.test]
    got = latency(unmerged, tok, prompts, inputs.plan.max_new_tokens, inputs.plan.latency_requests,
                  f"{v.name} unmerged").metrics("_unmerged")
    del unmerged
    gc.collect()
    return got


@cli
def main() -> None:
    # long: the evaluation's steps in the order they run, one model resident at a time, and their records
    name = sys.argv[1]
    params = load_params()
    v = params.variant(name)
    trained = runs.read_json(runs.train_record(name)) or {}
    inputs = EvalInputs.load(runs.PREPARED, params)
    record = {"name": name, "kind": "variant", "technique": v.technique, "backend": v.backend}
    with tracking.resume(params, trained.get("run_id"), name, "variant", v.technique, {}) as run:
        record["run_id"] = run.info.run_id
        if trained.get("status") != "ok":  # training did not produce a model: carry its status over
            record.update(status=trained.get("status", "failed"), metrics={},
                          error=trained.get("error", "no training record"))
            write_jsonl(runs.predictions(name), [])
        else:
            def work():
                technique = get_technique(v.technique)
                out, serving = runs.variant_dir(name), resolve_precision(params.eval.dtype)
                tok = load_tokenizer(BASE)
                model = technique.load_for_eval(BASE, out, v, serving)
                resume = runs.Resume(runs.work_dir(name) / "test_answers.jsonl",  # a killed evaluation continues here
                                f"{trained.get('run_id')}|{serving}|{inputs.plan.max_new_tokens}")
                metrics, rows = evaluate_examples(model, tok, inputs.test, inputs.val, inputs.plan,
                                                  pairs=inputs.pairs, desc=name, resume=resume)
                seeds = [x for x in trained.get("seeds") or [] if x.get("status") == "ok"]
                if seeds:  # the other training seeds: test quality each, mean and spread (bakeoff.verdict)
                    metrics.update(seed_metrics(technique, v, serving, tok, inputs, rows, metrics["quality"], seeds))
                write_jsonl(runs.predictions(name), rows)
                resume.finish()
                metrics.update(served=technique.served_as(out), serving_dtype=technique.serving_dtype(v, serving))
                kl = KlToBase(BASE, name, serving) if params.eval.probe else None
                if kl and not side_check(record, metrics, "general_kl", lambda: kl.take(model, tok)):
                    kl = None  # how far training moved the model from the base on general text (finished below)
                if v.technique == "qlora" and hasattr(model, "disable_adapter"):
                    # the control: the untrained 4-bit base scored like every run (task, probe, KL to the base)
                    from bakeoff.lmeval import run_probe

                    probe = (lambda m: run_probe(m, tok, runs.work_dir(name) / "probe_control", params.eval.batch_size,
                                                 torch_name(serving), params.eval.probe_limit)) if params.eval.probe else None
                    try:  # the control is a side figure: its failure is recorded, never the arm's
                        metrics.update(quantized_control(model, tok, inputs.test, inputs.plan, probe))
                        if kl:
                            kl.take_control(model)
                    except Exception as e:  # noqa: BLE001
                        metrics["control_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
                lm_model = technique.lm_eval_model(BASE, out)
                if lm_model is not None:  # lm-eval loads it from the saved files: free ours first
                    del model
                    gc.collect()
                    model = None
                if inputs.plan.latency_requests:
                    side_check(record, metrics, "latency_unmerged", lambda: unmerged_latency(technique, v, serving,
                                                                                           tok, inputs))
                lm = lm_model if lm_model is not None else model
                if params.eval.lm_eval != "off":
                    side_check(record, metrics, "lm_eval", lambda: run_lm_eval(
                        inputs, rows, lm, tok, runs.work_dir(name) / "lm_eval", dtype=torch_name(serving),
                        mode=params.eval.lm_eval))
                general_checks(params, name, lm, tok, serving, record, metrics)
                if kl:  # the base, where it is loaded, only once the evaluated model is freed
                    del model, lm
                    gc.collect()
                    side_check(record, metrics, "general_kl", lambda: kl.finish(tok))
                return metrics

            runs.guarded(record, work)
            if record["status"] != "ok":
                write_jsonl(runs.predictions(name), [])
            tracking.log_metrics(record["metrics"])
        tracking.mark(record)
    record["device"] = runs.device_name()  # what its figures were measured on (bakeoff.worker: per machine)
    runs.write_json(runs.eval_record(name), record)
    print(f"[{name}] {record['status']}: {runs.summary(record)}")


if __name__ == "__main__":
    main()

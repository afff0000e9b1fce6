"""One prompting baseline evaluated as the baseline stage runs it (``baseline@<name>``): the untouched base model (or
a model behind an OpenAI-compatible endpoint) under one prompting strategy: zero-shot, k fixed shots or the k nearest
training examples per test item, each with an optional instruction; the same chat template, decoding and metrics as
the variants. The base as it is also gets the model-level checks (preference pairs, the forgetting probe).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from bakeoff.core import runs, tracking
from bakeoff.core.models import load_for_eval, load_tokenizer, resolve_precision, torch_name
from bakeoff.core.spaces import as_run
from bakeoff.data.examples import write_jsonl
from bakeoff.data.prompts import SIMILAR, Prompter
from bakeoff.evaluate.local import Ask, EvalInputs, LmEvalRun, evaluate_examples, run_lm_eval, side_check

if TYPE_CHECKING:
    from bakeoff.core.sections import Params

BASE = runs.BASE
SELECTED = {"nearest": "nearest", "nearest_dense": "nearest (embeddings)", "hybrid": "nearest (hybrid)"}


def describe(b) -> str:
    what = "zero-shot" if not b.shots else f"{b.shots}-shot {SELECTED.get(b.selection, b.selection)}"
    what += f" + {b.passages} retrieved passages" if b.passages else ""
    who = f" of {b.endpoint['model']} at an endpoint" if b.endpoint else ""
    return what + (" + instruction" if b.instruction else "") + " prompting" + who


def endpoint_work(b, name: str, inputs, to_prompt, record: dict):
    """An endpoint baseline: the same prompts sent to an OpenAI-compatible server (bakeoff.evaluate.endpoint). The
    key and the URL are checked before the first request; the answers are cached, so a rerun sends none."""
    from bakeoff.evaluate import endpoint

    ep = endpoint.Endpoint.from_spec(b.endpoint)
    ep.check_key()  # an unset key variable is the user's to fix: the stage stops, naming it, before any request
    record["engine"] = {
        "kind": "endpoint",
        "base_url": ep.base_url,
        "model": ep.model,
        "concurrency": ep.concurrency,
        "price": b.price,
    }

    def work():
        served = ep.preflight()  # a server that does not answer or refuses the key: this baseline's failure
        record["engine"]["model_listed"] = ep.model in served if served else None
        metrics, rows = endpoint.evaluate(ep, inputs, Ask(to_prompt, desc=name), b.price)
        record["engine"]["label_choice"] = metrics.pop("label_choice", "no label set: generation only")
        write_jsonl(runs.predictions(name), rows)
        metrics["serving_dtype"] = "endpoint"
        return metrics

    return work


def prompt_sent(b, inputs, to_prompt) -> dict | None:
    """The exact turns sent for the first test item (instruction, shots and passages included) and the rule that
    chose them, for the report's "The prompts sent"."""
    if not inputs.test:
        return None
    ex = inputs.test[0]
    rule = (
        f"the {b.shots} training examples most similar to each test item ({SIMILAR[b.selection]}), "
        "the most similar last"
        if b.shots and b.selection in SIMILAR
        else f"the same {b.shots} training examples for every item, drawn with task.seed"
        if b.shots
        else "no shots"
    )
    if b.passages:
        rule += f"; the {b.passages} passages of task.corpus ({b.chunk_words} words) most relevant to the item"
    return {"item": ex.id, "rule": rule, "instruction": b.instruction, "messages": to_prompt(ex)}


def evaluate_baseline(params: Params, name: str) -> None:
    """The baseline stage: score the baseline (as its prompt search chose it) and write its record."""
    b, tuned = as_run(params, name)  # with the prompting search's choice, made on validation
    inputs = EvalInputs.load(runs.PREPARED, params)
    try:
        to_prompt = Prompter(b, inputs.train, params.task.seed, params.retrieval.embedder, inputs.corpus)
    except Exception as e:  # passages without a corpus (skipped), an embedder that cannot load: this arm's status
        to_prompt, refused = None, e
    sent = prompt_sent(b, inputs, to_prompt) if to_prompt else None
    record = {"name": name, "kind": "baseline", "technique": describe(b), "prompt_sent": sent}
    remote = endpoint_work(b, name, inputs, to_prompt, record) if b.endpoint and to_prompt else None  # checked first

    def work() -> dict:
        if to_prompt is None:
            raise refused
        return remote() if remote else local_work(params, b, name, inputs, to_prompt, record)

    logged = {"baseline": asdict(b), "task": asdict(params.task), "eval": asdict(params.eval), "tuned": tuned}
    with tracking.run(params, tracking.RunTags(name, "baseline", record["technique"]), logged) as run:
        record["run_id"] = run.info.run_id
        tracking.log_splits(
            {**({"train": "shots"} if b.shots else {}), "val": "validation", "test": "testing"}, str(runs.PREPARED)
        )
        runs.guarded(record, work)
        if record["status"] != "ok":
            write_jsonl(runs.predictions(name), [])
        tracking.log_metrics(record["metrics"])
        tracking.mark(record)
    runs.finish(record, runs.eval_record(name))


def retrieval_metrics(b, inputs, to_prompt) -> dict:
    """With passages: k, and recall@k, the share of test items whose passages include the document they name."""
    if not to_prompt.passages:
        return {}
    from bakeoff.data.corpus import recall_figures

    return recall_figures(inputs.test, to_prompt.passages)


def local_work(params: Params, b, name: str, inputs, to_prompt, record: dict) -> dict:
    """The local base model: the test split (resumable), then its side checks, each failing alone."""
    serving = resolve_precision(params.eval.dtype)
    model, tok = load_for_eval(BASE, precision=serving), load_tokenizer(BASE)
    resume = runs.Resume(
        runs.work_dir(name) / "test_answers.jsonl",  # a killed evaluation continues here
        f"base:{params.model.base}|{serving}|{inputs.plan.max_new_tokens}",
    )
    as_is = not b.shots and not b.instruction and not b.passages  # the base as it is: the model-level checks run here
    metrics, rows = evaluate_examples(
        model,
        tok,
        inputs.test,
        inputs.val,
        inputs.plan,
        Ask(to_prompt, inputs.pairs if as_is else None, name, label_choice=True, resume=resume),
    )
    metrics["serving_dtype"] = serving
    metrics.update(retrieval_metrics(b, inputs, to_prompt))
    write_jsonl(runs.predictions(name), rows)
    resume.finish()
    if params.eval.lm_eval != "off":  # each side check's failure is its own, never the baseline's
        side_check(
            record,
            metrics,
            "lm_eval",
            lambda: run_lm_eval(
                inputs,
                rows,
                {"pretrained": str(BASE)},
                tok,
                runs.work_dir(name) / "lm_eval",
                LmEvalRun(params.eval.lm_eval, torch_name(serving), to_prompt),
            ),
        )
    if params.eval.probe and as_is:
        from bakeoff.evaluate.lmeval import run_probe

        side_check(
            record,
            metrics,
            "probe",
            lambda: {
                **run_probe(
                    model, tok, runs.work_dir(name) / "probe", params.eval.batch_size, limit=params.eval.probe_limit
                ),
                "general_kl": 0.0,
            },
        )  # the base itself
    if params.eval.lm_eval_tasks and as_is:
        from bakeoff.evaluate.lmeval import run_standard

        def standard():
            record["lm_eval_tasks"] = run_standard(
                params.eval.lm_eval_tasks, model, tok, params.eval.batch_size, params.eval.lm_eval_limit
            )

        side_check(record, metrics, "lm_eval_tasks", standard)
    return metrics

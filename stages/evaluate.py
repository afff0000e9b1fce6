"""Stage `evaluate@<variant>`: the baselines' evaluation, on a trained variant; same MLflow run as training.

    python stages/evaluate.py lora
"""

import sys
from pathlib import Path

from bakeoff import runs, tracking
from bakeoff.config import load_params
from bakeoff.data import load_examples, write_jsonl
from bakeoff.errors import cli
from bakeoff.evaluate import evaluate_examples
from bakeoff.models import load_tokenizer, resolve_precision
from bakeoff.techniques import get_technique

BASE, DATA = Path("models/base"), Path("data/prepared")


@cli
def main() -> None:
    name = sys.argv[1]
    params = load_params()
    v = params.variant(name)
    trained = runs.read_json(runs.train_record(name)) or {}
    val, test = (load_examples(DATA / f"{s}.jsonl") for s in ("val", "test"))
    if params.eval.max_examples:
        test = test[:params.eval.max_examples]
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
                model = technique.load_for_eval(BASE, runs.variant_dir(name), v, resolve_precision(v.train.precision))
                tok = load_tokenizer(BASE)
                metrics, rows = evaluate_examples(model, tok, test, val, params.task.metric,
                                                  params.task.max_new_tokens, params.eval.batch_size, desc=name)
                write_jsonl(runs.predictions(name), rows)
                return metrics

            runs.guarded(record, work)
            if record["status"] != "ok":
                write_jsonl(runs.predictions(name), [])
            tracking.log_metrics(record["metrics"])
        tracking.mark(record)
    runs.write_json(runs.eval_record(name), record)
    print(f"[{name}] {record['status']}: {record['metrics'] or record.get('error')}")


if __name__ == "__main__":
    main()

"""Stage `baseline@<name>`: evaluate the untouched base model under one prompting strategy.

    python stages/baseline.py zero_shot
"""

import sys
from dataclasses import asdict
from pathlib import Path

from bakeoff import runs, tracking
from bakeoff.config import load_params
from bakeoff.data import few_shot_messages, fixed_shots, load_examples, write_jsonl
from bakeoff.errors import cli
from bakeoff.evaluate import evaluate_examples
from bakeoff.models import load_for_eval, load_tokenizer

BASE, DATA = Path("models/base"), Path("data/prepared")


@cli
def main() -> None:
    name = sys.argv[1]
    params = load_params()
    b = params.baseline(name)
    train, val, test = (load_examples(DATA / f"{s}.jsonl") for s in ("train", "val", "test"))
    if params.eval.max_examples:
        test = test[:params.eval.max_examples]
    shots = fixed_shots(train, b.shots, params.task.seed)
    logged = {"baseline": asdict(b), "task": asdict(params.task), "eval": asdict(params.eval)}
    record = {"name": name, "kind": "baseline", "technique": f"{b.shots}-shot prompting"}
    with tracking.run(params, name, "baseline", record["technique"], logged) as run:
        record["run_id"] = run.info.run_id

        def work():
            model, tok = load_for_eval(BASE), load_tokenizer(BASE)
            metrics, rows = evaluate_examples(
                model, tok, test, val, params.task.metric, params.task.max_new_tokens, params.eval.batch_size,
                to_prompt=lambda e: few_shot_messages(e, shots), desc=name)
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

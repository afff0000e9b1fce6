"""Stage `train@<variant>` (and `train_from@<variant>` for `derived:` ones): train one variant, record how it went.

    python stages/train.py lora

A variant that fails ends with status `oom`, `skipped` or `failed` in runs/<variant>/train.json and in its
MLflow run; the stage still exits 0 so `dvc repro` goes on with the other variants.
"""

import json
import sys
from dataclasses import asdict
from pathlib import Path

from bakeoff.config import load_params
from bakeoff.errors import cli


@cli
def main() -> None:
    name = sys.argv[1]
    params = load_params()
    v = params.variant(name)
    if v.backend == "unsloth":  # before anything imports transformers, PEFT or TRL
        from bakeoff.techniques import unsloth

        unsloth.preload()
    from bakeoff import runs, tracking
    from bakeoff.models import resolve_precision
    from bakeoff.techniques import get_technique
    from bakeoff.techniques.base import train

    base, data = Path("models/base"), Path("data/prepared")
    out = runs.fresh_dir(runs.variant_dir(name))
    data_hash = json.loads((data / "stats.json").read_text())["data_hash"]
    logged = {"variant": {"technique": v.technique, "backend": v.backend, **v.options}, "train": asdict(v.train)}
    record = {"name": name, "kind": "variant", "technique": v.technique, "backend": v.backend, "parent": v.parent}
    with tracking.run(params, name, "variant", v.technique, logged, data_hash=data_hash, system_metrics=True) as run:
        record["run_id"] = run.info.run_id

        def work():
            if v.parent and (runs.read_json(runs.train_record(v.parent)) or {}).get("status") != "ok":
                raise runs.Skipped(f"its parent variant {v.parent!r} did not train (see runs/{v.parent}/train.json)")
            technique = get_technique(v.technique)
            m = train(technique, v, base, technique.load_rows(data), out, resolve_precision(v.train.precision),
                      work_dir=Path(".bakeoff_tmp") / name,
                      parent_dir=runs.variant_dir(v.parent) if v.parent else None)
            record["history"] = m.pop("history")  # the loss curve, for the report's plot
            for h in record["history"]:
                tracking.log_metrics({"train_loss": h["loss"]}, step=h["step"])
            return m

        runs.guarded(record, work)
        if record["status"] != "ok":
            runs.fresh_dir(out)  # nothing half-written for evaluate to take as a model
            (out / "NOT_TRAINED").write_text(f"{record['status']}: {record['error']}\n")
        tracking.log_metrics(record["metrics"])
        tracking.mark(record)
    runs.write_json(runs.train_record(name), record)
    print(f"[{name}] {record['status']}: {record['metrics'] or record.get('error')}")


if __name__ == "__main__":
    main()

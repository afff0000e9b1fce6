"""Stage `train@<variant>` (and `train_from@<variant>` for `derived:` ones): train one variant, record how it went.

    python stages/train.py lora

A variant that fails ends with status `oom`, `skipped` or `failed` in runs/<variant>/train.json and in its
MLflow run; the stage still exits 0 so `dvc repro` goes on with the other variants.

When the tune stage's chosen trial is the very run this stage would train (finished at full length, not one the
variant's early stopping would have cut, same values, seed, data and parent: `adopt` in runs/<variant>/tuned.json),
the stage adopts its model and measured record instead of training it again; the record says `adopted_from_trial`
and where it was measured.

With `checkpoint_steps: N` the trainer keeps its newest checkpoint in .bakeoff_tmp/<variant>/; a run that was
killed continues from it on the next `dvc repro` (same params and data), in the same MLflow run. With
`processes: N > 1` the stage starts itself N times under `torchrun` (CPU, gloo) or `accelerate launch` (GPUs,
with `accelerate_config` for FSDP or DeepSpeed); rank 0 writes the records and the one MLflow run, and a rank that
fails (raises, runs out of memory, is killed) makes the arm's status that failure, with the rank and its reason.
"""

import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from bakeoff.config import load_params
from bakeoff.errors import cli


@cli
def main() -> None:
    # long: the stage's whole flow in one reading order: launch, Unsloth first, resume, train, record, MLflow
    name = sys.argv[1]
    params = load_params()
    from bakeoff import runs, tune

    v, tuned = tune.as_run(params, name)  # with the tune stage's choice, judged on validation
    if v.train.processes > 1 and "LOCAL_RANK" not in os.environ:  # every rank's failure is the arm's status
        from bakeoff.techniques.trainer import launch

        return launch(str(Path(__file__).resolve()), name, params, v)
    no_unsloth = None
    if v.backend == "unsloth":  # before anything imports transformers, PEFT or TRL; on a CPU, not at all
        from bakeoff.techniques.backends import unsloth

        no_unsloth = unsloth.cpu_reason()
        if no_unsloth is None:
            unsloth.preload()
    from bakeoff import tracking
    from bakeoff.models import resolve_precision
    from bakeoff.techniques import get_technique
    from bakeoff.techniques.trainer import fingerprint, guard_rank, rank, resumable, train

    if rank() == 0:
        tracking.check_reachable(tracking.tracking_uri(params))  # before anything of the last run is touched

    base, data, work = runs.BASE, runs.PREPARED, runs.work_dir(name)
    data_hash = runs.read_json(data / "stats.json")["data_hash"]
    logged = tune.run_identity(v, tuned)
    parent_rec = runs.read_json(runs.train_record(v.parent)) if v.parent else None
    fp = fingerprint(logged, data_hash, (parent_rec or {}).get("run_id"))
    resume, resume_run_id = resumable(work, fp, v.train.checkpoint_steps)
    adopt = (runs.read_json(runs.tuned_record(name)) or {}).get("adopt") or {}
    adopt = adopt if adopt.get("fingerprint") == fp and resume is None and Path(adopt["dir"], "model").exists() else {}

    def work_fn():
        if no_unsloth:
            raise runs.Skipped(no_unsloth)
        if v.parent and (parent_rec or {}).get("status") != "ok":
            raise runs.Skipped(f"its parent variant {v.parent!r} did not train (see runs/{v.parent}/train.json)")
        if adopt:  # the search already trained this very run (same values, seed, data, schedule): take it
            print(f"[{name}] adopting trial {adopt['trial']} of its search (the same run; not trained again)", flush=True)
            shutil.copytree(Path(adopt["dir"]) / "model", out, dirs_exist_ok=True)
            rec = runs.read_json(Path(adopt["dir"]) / "record.json")
            return {**rec, "adopted_from_trial": adopt["trial"],
                    "measured_in": f"tune@{name} (trial {adopt['trial']}, the search's process)"}
        technique = get_technique(v.technique)
        return train(technique, v, base, technique.load_rows(data), out, resolve_precision(v.train.precision),
                     work_dir=work, parent_dir=runs.variant_dir(v.parent) if v.parent else None, resume=resume,
                     val_rows=technique.val_rows(data))

    if rank() != 0:  # another process of a multi-process run: train, and leave records and MLflow to rank 0
        out = runs.variant_dir(name)
        return guard_rank(name, work_fn)  # its failure is written for the launcher, which records the arm's

    out = runs.fresh_dir(runs.variant_dir(name))
    if resume is None:
        shutil.rmtree(work, ignore_errors=True)
    record = {"name": name, "kind": "variant", "technique": v.technique, "backend": v.backend, "parent": v.parent}
    opened = (tracking.resume(params, resume_run_id, name, "variant", v.technique, logged) if resume
              else tracking.run(params, name, "variant", v.technique, logged, data_hash=data_hash, system_metrics=True))
    with opened as run:
        record["run_id"] = run.info.run_id
        runs.write_json(work / "resume.json", {"fingerprint": fp, "run_id": run.info.run_id})
        if resume:
            tracking.mark_resumed(resume.name)
            print(f"[{name}] resuming from {resume}", flush=True)

        def work_and_log():
            m = work_fn()
            record["history"] = m.pop("history")  # the loss curves, for the report's plot
            record["val_curve"] = m.pop("val_curve")
            for h in record["history"]:
                tracking.log_metrics({"train_loss": h["loss"]}, step=h["step"])
            for h in record["val_curve"]:
                tracking.log_metrics({"val_loss_during_training": h["loss"]}, step=h["step"])
            record["kernel_choice"] = m.pop("kernel_choice")  # what ran the step (bakeoff.techniques.kernels)
            tracking.set_tags({"convergence": m["convergence"], "kernels": m["kernels"],
                               **{f"kernel.{k}": val for k, val in record["kernel_choice"].items()}})
            if v.train.seeds > 1:  # the same variant again under other seeds, each a child run of this one
                record["seeds"] = [train_seed(seed) for seed in range(v.train.seed + 1, v.train.seed + v.train.seeds)]
            return m

        def train_seed(seed: int) -> dict:
            sv = replace(v, train=replace(v.train, seed=seed, checkpoint_steps=0))
            rec = {"seed": seed}
            with tracking.child_run(f"{name} seed {seed}", {"bakeoff.name": name, "kind": "seed", "seed": seed,
                                                            "technique": v.technique}) as child:
                def fn():
                    technique = get_technique(v.technique)
                    got = train(technique, sv, base, technique.load_rows(data), runs.seed_dir(name, seed),
                                resolve_precision(v.train.precision), work_dir=work / f"seed-{seed}",
                                parent_dir=runs.variant_dir(v.parent) if v.parent else None,
                                val_rows=technique.val_rows(data))
                    for h in got.pop("history"):
                        tracking.log_metrics({"train_loss": h["loss"]}, step=h["step"])
                    got.pop("val_curve"), got.pop("kernel_choice")
                    return got

                runs.guarded(rec, fn)
                tracking.log_metrics(rec["metrics"])
                tracking.mark(rec)
            keep = ("train_loss_final", "best_step", "stopped_at_step", "tokens_seen", "train_wall_s", "convergence")
            return {"seed": seed, "run_id": child.info.run_id, "status": rec["status"], "error": rec.get("error"),
                    **{k: rec["metrics"][k] for k in keep if k in rec["metrics"]}}

        runs.guarded(record, work_and_log)
        if record["status"] != "ok":
            runs.fresh_dir(out)  # nothing half-written for evaluate to take as a model
            (out / "NOT_TRAINED").write_text(f"{record['status']}: {record['error']}\n")
        else:
            shutil.rmtree(work, ignore_errors=True)  # finished: its checkpoints are no longer needed
            if adopt:
                shutil.rmtree(adopt["dir"], ignore_errors=True)
        tracking.log_metrics({k: v for k, v in record["metrics"].items() if not k.endswith("_per_process")})
        tracking.mark(record)
    record["device"] = runs.device_name()  # what its figures were measured on (bakeoff.worker: per machine)
    runs.write_json(runs.train_record(name), record)
    print(f"[{name}] {record['status']}: {runs.summary(record)}")


if __name__ == "__main__":
    main()

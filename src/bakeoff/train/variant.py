"""One variant trained as the train stage runs it (``train@<variant>``, ``train_from@<variant>``), and its record.

A variant that fails ends with status `oom`, `skipped` or `failed` in runs/<variant>/train.json and in its MLflow
run; the stage still exits 0 so `dvc repro` goes on with the other variants. When the tune stage's chosen trial is
the very run this would train (same values, seed, data, schedule and parent: `adopt` in runs/<variant>/tuned.json),
its model and measured record are adopted instead of training it again. With `checkpoint_steps: N` a killed run
continues from its newest checkpoint in .bakeoff_tmp/<variant>/, in the same MLflow run. With `processes: N > 1`
the stage starts itself N times (``bakeoff.train.launch``); rank 0 writes the records and the one MLflow run.

Nothing here imports transformers, PEFT or TRL at module level: Unsloth must be imported before them.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core import runs, spaces
from bakeoff.core.records import DataStats, RunRecord, read_search
from bakeoff.data.raft import variant_rows

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def run_variant(script: str, name: str, params: Params) -> None:
    """The train stage: launch the ranks, or train (or adopt) this variant and write its record."""
    v, tuned = spaces.as_run(params, name)  # with the tune stage's choice, judged on validation
    if v.train.processes > 1 and "LOCAL_RANK" not in os.environ:  # every rank's failure is the arm's status
        from bakeoff.train.launch import launch

        return launch(script, name, params, v)
    no_unsloth = _unsloth_first(v)
    from bakeoff.core import tracking
    from bakeoff.train.trainer import rank

    if rank() == 0:
        tracking.check_reachable(tracking.tracking_uri(params))  # before anything of the last run is touched
    job = Job.prepare(params, name, v, tuned, no_unsloth)
    if rank() != 0:  # another process of a multi-process run: train, and leave records and MLflow to rank 0
        from bakeoff.train.launch import guard_rank

        job.out = runs.variant_dir(name)
        return guard_rank(name, job.produce)  # its failure is written for the launcher, which records the arm's
    runs.finish(job.run(), runs.train_record(name))


def live_curves() -> list:
    """[a TrainerCallback] logging every logged training loss (``train_loss``) and every evaluation's loss
    (``val_loss_during_training``) into the active MLflow run at its optimizer step while the run trains, from the
    first process only (``bakeoff.train.callbacks.LiveCurves``); [] without an active run."""
    import mlflow

    if mlflow.active_run() is None:
        return []
    from bakeoff.train.callbacks import LiveCurves

    return [LiveCurves()]


def link_trial(name: str, trial: int) -> str | None:
    """Tag the active run (an adopted arm: its training ran as trial ``trial`` of its search) with the trial's MLflow
    run, and say so in its description, so the UI leads from the short run to where it was measured."""
    import mlflow

    client, run = mlflow.MlflowClient(), mlflow.active_run()
    found = client.search_runs(
        [run.info.experiment_id],
        max_results=1,
        order_by=["attributes.start_time DESC"],
        filter_string=f"tags.`bakeoff.name` = '{name}.tune' and tags.kind = 'trial' and "
        f"attributes.run_name = '{name} trial {trial}'",
    )
    if not found:
        return None
    trial_run = found[0].info.run_id
    mlflow.set_tags(
        {
            "bakeoff.adopted_run_id": trial_run,
            "mlflow.note.content": f"Adopted: trial {trial} of the search trained this very run (the same "
            f"values, seed, data and schedule); it was measured in run {trial_run} "
            f"({name} trial {trial}, under {name}.tune).",
        }
    )
    return trial_run


def _unsloth_first(v) -> str | None:
    """Unsloth before anything imports transformers, PEFT or TRL; on a CPU, not at all (the reason it is skipped)."""
    if v.backend != "unsloth":
        return None
    from bakeoff.train.backends import unsloth

    reason = unsloth.cpu_reason()
    if reason is None:
        unsloth.preload()
    return reason


@dataclass
class Job:
    """What one variant's training needs: its resolved variant, where it resumes from, what it may adopt."""

    params: object
    name: str
    v: object
    no_unsloth: str | None
    logged: dict
    data_hash: str
    parent_rec: dict | None
    fp: str
    resume: Path | None
    resume_run_id: str | None
    adopt: dict
    out: Path | None = None

    @classmethod
    def prepare(cls, params: Params, name: str, v, tuned: dict, no_unsloth: str | None) -> Job:
        from bakeoff.train.trainer import fingerprint, resumable

        data_hash = DataStats.from_dict(runs.read_json(runs.PREPARED / "stats.json")).data_hash
        logged = spaces.run_identity(v, tuned)
        parent_rec = runs.read_json(runs.train_record(v.parent)) if v.parent else None
        fp = fingerprint(logged, data_hash, RunRecord.from_dict(parent_rec or {}).run_id)
        resume, resume_run_id = resumable(runs.work_dir(name), fp, v.train.checkpoint_steps)
        adopt = read_search(name).adopt
        adopt = (
            adopt if adopt.get("fingerprint") == fp and resume is None and Path(adopt["dir"], "model").exists() else {}
        )
        return cls(params, name, v, no_unsloth, logged, data_hash, parent_rec, fp, resume, resume_run_id, adopt)

    def produce(self) -> dict:
        """Train (or adopt) the model into ``out``; its measured figures."""
        from bakeoff.train.techniques import get_technique
        from bakeoff.train.trainer import Job, train

        v, name = self.v, self.name
        if self.no_unsloth:
            raise runs.Skipped(self.no_unsloth)
        if v.parent and (self.parent_rec or {}).get("status") != "ok":
            raise runs.Skipped(f"its parent variant {v.parent!r} did not train (see runs/{v.parent}/train.json)")
        if self.adopt:  # the search already trained this very run (same values, seed, data, schedule): take it
            trial = self.adopt["trial"]
            print(f"[{name}] adopting trial {trial} of its search (the same run; not trained again)", flush=True)
            shutil.copytree(Path(self.adopt["dir"]) / "model", self.out, dirs_exist_ok=True)
            rec = runs.read_json(Path(self.adopt["dir"]) / "record.json")
            return {
                **rec,
                "adopted_from_trial": trial,
                "measured_in": f"tune@{name} (trial {trial}, the search's process)",
            }
        technique = get_technique(v.technique)
        job = Job.of_variant(technique, v, self.out, runs.work_dir(name))
        rows, val = variant_rows(technique, v, runs.PREPARED, self.params.retrieval.embedder, runs.BASE)  # passages
        got = train(job, rows, val_rows=val, resume=self.resume, extra_callbacks=live_curves())
        return {**got, "curves_logged": True}

    def run(self) -> dict:
        """Rank 0: the model folder, the MLflow run (resumed where a checkpoint is), the record."""
        from bakeoff.core import tracking

        name, v, work = self.name, self.v, runs.work_dir(self.name)
        self.out = runs.fresh_dir(runs.variant_dir(name))
        if self.resume is None:
            shutil.rmtree(work, ignore_errors=True)
        record = {"name": name, "kind": "variant", "technique": v.technique, "backend": v.backend, "parent": v.parent}
        tags = tracking.RunTags(name, "variant", v.technique)
        opened = (
            tracking.resume(self.params, self.resume_run_id, tags, self.logged)
            if self.resume
            else tracking.run(self.params, tags, self.logged, data_hash=self.data_hash, system_metrics=True)
        )
        with opened as run:
            record["run_id"] = run.info.run_id
            runs.write_json(work / "resume.json", {"fingerprint": self.fp, "run_id": run.info.run_id})
            tracking.log_splits({"train": "training", "val": "validation"}, str(runs.PREPARED))
            if self.resume:
                tracking.mark_resumed(self.resume.name)
                print(f"[{name}] resuming from {self.resume}", flush=True)
            runs.guarded(record, lambda: self.produce_and_log(record))
            if record["status"] != "ok":
                runs.fresh_dir(self.out)  # nothing half-written for evaluate to take as a model
                (self.out / "NOT_TRAINED").write_text(f"{record['status']}: {record['error']}\n")
            else:
                shutil.rmtree(work, ignore_errors=True)  # finished: its checkpoints are no longer needed
                if self.adopt:
                    shutil.rmtree(self.adopt["dir"], ignore_errors=True)
            tracking.log_metrics({k: x for k, x in record["metrics"].items() if not k.endswith("_per_process")})
            tracking.mark(record)
        return record

    def produce_and_log(self, record: dict) -> dict:
        """The model, its curves into the record and MLflow, its kernels as tags, its other seeds as child runs."""
        from bakeoff.core import tracking

        m = self.produce()
        record["history"] = m.pop("history")  # the loss curves, for the report's plot
        record["val_curve"] = m.pop("val_curve")
        if not m.pop("curves_logged", False):  # adopted: the trial trained it; its curves into this run, by step
            for h in record["history"]:
                tracking.log_metrics({"train_loss": h["loss"]}, step=h["step"])
            for h in record["val_curve"]:
                tracking.log_metrics({"val_loss_during_training": h["loss"]}, step=h["step"])
            link_trial(self.name, m["adopted_from_trial"])
        record["kernel_choice"] = m.pop("kernel_choice")  # what ran the step (bakeoff.train.kernels)
        tracking.set_tags(
            {
                "convergence": m["convergence"],
                "kernels": m["kernels"],
                **{f"kernel.{k}": val for k, val in record["kernel_choice"].items()},
            }
        )
        t = self.v.train
        if t.seeds > 1:  # the same variant again under other seeds, each a child run of this one
            record["seeds"] = [self.train_seed(seed) for seed in range(t.seed + 1, t.seed + t.seeds)]
        return m

    def train_seed(self, seed: int) -> dict:
        """The variant again under another seed, as a child MLflow run; a summary of how it ended."""
        from bakeoff.core import tracking

        v, name = self.v, self.name
        rec = {"seed": seed}
        with tracking.child_run(
            f"{name} seed {seed}", {"bakeoff.name": name, "kind": "seed", "seed": seed, "technique": v.technique}
        ) as child:
            runs.guarded(
                rec, lambda: self._seed_run(replace(v, train=replace(v.train, seed=seed, checkpoint_steps=0)), seed)
            )
            tracking.log_metrics(rec["metrics"])
            tracking.mark(rec)
        keep = ("train_loss_final", "best_step", "stopped_at_step", "tokens_seen", "train_wall_s", "convergence")
        return {
            "seed": seed,
            "run_id": child.info.run_id,
            "status": rec["status"],
            "error": rec.get("error"),
            **{k: rec["metrics"][k] for k in keep if k in rec["metrics"]},
        }

    def _seed_run(self, sv, seed: int) -> dict:
        from bakeoff.core import tracking
        from bakeoff.train.techniques import get_technique
        from bakeoff.train.trainer import Job, train

        v, name = self.v, self.name
        technique = get_technique(v.technique)
        job = Job.of_variant(technique, sv, runs.seed_dir(name, seed), runs.work_dir(name) / f"seed-{seed}")
        rows, val = variant_rows(technique, sv, runs.PREPARED, self.params.retrieval.embedder)
        got = train(job, rows, val_rows=val)
        for h in got.pop("history"):
            tracking.log_metrics({"train_loss": h["loss"]}, step=h["step"])
        got.pop("val_curve"), got.pop("kernel_choice")
        return got

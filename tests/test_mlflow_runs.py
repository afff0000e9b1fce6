"""MLflow by its conventions, read back through MLflow's client from a real (sqlite) tracking store: the training
and validation loss logged at each optimizer step while training runs (``bakeoff.train.variant.live_curves``), the
prepared splits as dataset inputs with their digests (``bakeoff.core.tracking.log_splits``), a search trial's run open
while it trains with system metrics (``bakeoff.search.arm.TrialLog``), and an adopted arm linked to its trial's run
(``bakeoff.train.variant.link_trial``). The champion's MLflow model is checked in tests/test_pipeline.py.

    pytest tests/test_mlflow_runs.py      (about 30 s: one tiny model trains 3 steps)
"""

from __future__ import annotations

import hashlib
import time
import warnings

import pytest


@pytest.fixture
def client(tmp_path, monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("tickets")
    yield mlflow.MlflowClient()
    while mlflow.active_run():
        mlflow.end_run()


def test_the_training_loss_reaches_mlflow_at_each_step_while_training_runs(client, tiny_model_dir, tmp_path):
    """At step 3 of a tiny model's training, steps 1 and 2 of `train_loss` are already in MLflow (read back through
    its client), and the evaluation at step 2 as `val_loss_during_training`: logged as it trains, not after."""
    import mlflow
    import torch
    from transformers import AutoModelForCausalLM, Trainer, TrainerCallback, TrainingArguments

    from bakeoff.train.variant import live_curves

    seen = {}

    class Peek(TrainerCallback):  # runs after live_curves' callback, at the start of step 3
        def on_step_begin(self, args, state, control, **kw):
            if state.global_step == 2:
                run = mlflow.active_run().info.run_id
                seen["train"] = [m.step for m in client.get_metric_history(run, "train_loss")]
                seen["val"] = [m.step for m in client.get_metric_history(run, "val_loss_during_training")]

    ids = torch.randint(5, 200, (8, 16))
    rows = [{"input_ids": x, "labels": x.clone(), "attention_mask": torch.ones_like(x)} for x in ids]
    args = TrainingArguments(
        str(tmp_path / "out"),
        max_steps=3,
        per_device_train_batch_size=2,
        logging_steps=1,
        eval_strategy="steps",
        eval_steps=2,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        disable_tqdm=True,
    )
    with mlflow.start_run(run_name="lora") as run:
        trainer = Trainer(
            model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
            args=args,
            train_dataset=rows,
            eval_dataset=rows[:2],
            callbacks=[*live_curves(), Peek()],
        )
        trainer.train()
    assert seen == {"train": [1, 2], "val": [2]}
    history = client.get_metric_history(run.info.run_id, "train_loss")
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert live_curves() == []  # no active run: nothing to log into


def test_the_splits_are_dataset_inputs_with_their_digests_and_rows(client, tmp_path):
    import mlflow

    from bakeoff.core import tracking

    folder = tmp_path / "prepared"
    folder.mkdir()
    (folder / "train.jsonl").write_text('{"a": 1}\n{"a": 2}\n{"a": 3}\n')
    (folder / "val.jsonl").write_text('{"a": 4}\n')
    with warnings.catch_warnings(), mlflow.start_run() as run:
        warnings.filterwarnings("error", "The specified dataset source can be interpreted")  # said on each split
        tracking.log_splits({"train": "training", "val": "validation", "test": "testing"}, str(folder))
    inputs = client.get_run(run.info.run_id).inputs.dataset_inputs
    got = {i.dataset.name: (i.dataset.digest, {t.key: t.value for t in i.tags}) for i in inputs}
    assert set(got) == {"train", "val"}  # no test.jsonl here: not logged
    digest, tags = got["train"]
    assert digest == hashlib.sha256((folder / "train.jsonl").read_bytes()).hexdigest()[:16]
    assert tags["mlflow.data.context"] == "training" and tags["rows"] == "3"
    assert got["val"][1]["mlflow.data.context"] == "validation"


def test_a_trial_run_is_open_while_it_trains_with_system_metrics_and_the_adopted_arm_links_to_it(client):
    import mlflow

    from bakeoff.search.arm import TrialLog
    from bakeoff.train.variant import link_trial

    mlflow.set_system_metrics_sampling_interval(0.5)
    mlflow.set_system_metrics_samples_before_logging(1)
    try:
        with (
            mlflow.start_run(run_name="lora.tune", tags={"bakeoff.name": "lora.tune"}),
            TrialLog("lora").opened(0, {"lr": 1e-4}) as held,
        ):
            trial = mlflow.active_run().info.run_id
            assert client.get_run(trial).data.tags["state"] == "running"  # open before its training
            time.sleep(2.0)  # the trial "trains"
            held["result"] = {"state": "complete", "value": 0.25, "wall_s": 2.0}
    finally:
        mlflow.set_system_metrics_sampling_interval(None)
        mlflow.set_system_metrics_samples_before_logging(None)
    got = client.get_run(trial)
    assert got.data.tags["state"] == "complete" and got.data.metrics["value"] == 0.25
    assert got.data.params == {"lr": "0.0001"}
    assert any(k.startswith("system/cpu_utilization") for k in got.data.metrics), sorted(got.data.metrics)
    assert got.info.end_time - got.info.start_time >= 2000  # the run lasted the training, not a blink after it
    with mlflow.start_run(run_name="lora", tags={"bakeoff.name": "lora"}) as arm:
        assert link_trial("lora", 0) == trial
        assert link_trial("lora", 7) is None  # no such trial: no link
    tags = client.get_run(arm.info.run_id).data.tags
    assert tags["bakeoff.adopted_run_id"] == trial and trial in tags["mlflow.note.content"]


def test_a_rank_stopped_after_opening_its_run_leaves_one_run_for_the_arm(client, tmp_path, monkeypatch):
    """Rank 0 of a two-process run opened its MLflow run and was stopped before it wrote which (rank 1 raised first):
    the launcher's failure record goes into that run, so the arm has one run, tagged ``failed`` with rank 1's reason,
    not a second one beside it."""
    from pathlib import Path

    from bakeoff.core import runs, tracking
    from bakeoff.core.config import load_params
    from bakeoff.train.launch import rank_failure_path, record_failed_launch

    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    monkeypatch.chdir(tmp_path)
    v = params.variant("lora")
    t0 = time.time()
    with tracking.run(params, tracking.RunTags("lora", "variant", v.technique), {"r": 4}) as opened:
        pass  # rank 0's run, opened; rank 0 is stopped before it writes runs/.work/lora/resume.json
    runs.write_json(rank_failure_path("lora", 1), {"rank": 1, "status": "failed", "error": "RuntimeError: planted"})
    record = record_failed_launch(params, "lora", v, 1, t0)
    found = client.search_runs(
        [client.get_experiment_by_name(tracking.experiment_name(params)).experiment_id],
        filter_string="tags.`bakeoff.name` = 'lora'",
    )
    assert [r.info.run_id for r in found] == [opened.info.run_id] == [record["run_id"]]
    assert found[0].data.tags["status"] == "failed"
    assert "rank 1 failed: RuntimeError: planted" in found[0].data.tags["error"]

"""No side figure's failure takes an arm's result, and no failed export stops the report: faults forced into the real
stages (tests/faults.py) under one `dvc repro` on a small task with the tiny model.

- lm-eval raising while it scores `lora`'s test split, and the forgetting probe raising: `lora` keeps its quality
  and test answers, each side check records its own failure, the report names them;
- the export raising before any variant is shipped: reports/shipped.json says so, compare runs, the report says so;
- `lora`'s search raising before its first trial: it trains on params.yaml's values, and the report's search table
  and first screen say its search did not run.

    .venv/bin/pytest tests/test_faults.py     # about two minutes on 2 CPU cores
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import faults
import pytest
import yaml
from conftest import make_dvc_repo

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_model_dir):
    repo = tmp_path_factory.mktemp("faults")
    params = make_dvc_repo(repo, tiny_model_dir, rows=48)
    params["train_defaults"].update(
        max_steps=2, effective_batch=4, micro_batch=2, precision="fp32", warmup_steps_excluded=1, logging_steps=1
    )
    params["baselines"] = {"zero_shot": {"shots": 0}}
    params["variants"] = {"lora": {"technique": "lora", "r": 4, "alpha": 8}}
    params["derived"] = {}
    params["eval"].update(
        latency_requests=2, bootstrap_resamples=200, probe_limit=20, lm_eval="reuse", lm_eval_tasks=[]
    )
    params["export"].update(serve=False)
    params["tune"]["trials"] = 2  # searched, but its search raises before its first trial (below)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        **faults.env(
            tmp_path_factory.mktemp("site"),
            [
                ("bakeoff.evaluate.lmeval", "run_task", "stages/evaluate.py", None),
                ("bakeoff.evaluate.lmeval", "run_probe", "stages/evaluate.py", None),
                ("bakeoff.decide.decision", "decide", "stages/export.py", None),
                ("bakeoff.search.trials", "search_variant", "stages/tune.py", None),
            ],
        ),
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = "git init -q && git config user.email t@t && git config user.name t && dvc init -q && dvc repro"
    r = subprocess.run(cmd, shell=True, cwd=repo, env=env, capture_output=True, text=True, check=False)
    return repo, r


def test_the_run_goes_on_through_every_fault(repo):
    repo, r = repo
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "side check lm_eval failed: RuntimeError: planted fault in bakeoff.evaluate.lmeval.run_task" in r.stdout


def test_a_failed_side_check_keeps_the_arms_quality_and_records_its_own_failure(repo):
    repo, _ = repo
    rec = json.loads((repo / "runs" / "lora" / "eval.json").read_text())
    assert rec["status"] == "ok" and 0 <= rec["metrics"]["quality"] <= 1, rec
    preds = (repo / "runs" / "lora" / "predictions.jsonl").read_text().splitlines()
    assert len(preds) == 8  # every test answer kept (task.test_size 8)
    checks = rec["side_checks"]
    assert checks["lm_eval"] == {
        "status": "failed",
        "error": "RuntimeError: planted fault in bakeoff.evaluate.lmeval.run_task",
    }
    assert checks["probe"]["status"] == "failed" and "run_probe" in checks["probe"]["error"]
    assert "lm_eval_exact_match" not in rec["metrics"] and "probe_acc" not in rec["metrics"]
    assert "general_kl" in rec["metrics"]  # the side checks that did not fail still ran
    base = json.loads((repo / "runs" / "zero_shot" / "eval.json").read_text())
    assert "side_checks" not in base and "lm_eval_exact_match" in base["metrics"]  # the fault was lora's alone


def test_a_failed_export_is_recorded_and_the_report_still_written(repo):
    repo, _ = repo
    shipped = json.loads((repo / "reports" / "shipped.json").read_text())
    assert shipped["status"] == "failed" and "planted fault in bakeoff.decide.decision.decide" in shipped["error"]
    report = (repo / "reports" / "comparison.md").read_text()
    assert "The export did not run (failed: RuntimeError: planted fault in bakeoff.decide.decision.decide)" in report
    sides = report.split("## Side checks that did not finish")[1].split("\n## Quality")[0]
    assert "- `lora`: lm_eval failed: RuntimeError: planted fault in bakeoff.evaluate.lmeval.run_task" in sides, sides


def test_a_search_that_did_not_run_is_in_the_search_table_and_on_the_first_screen(repo):
    repo, _ = repo
    tuned = json.loads((repo / "runs" / "lora" / "tuned.json").read_text())
    assert tuned["status"] == "failed" and tuned["values"] == {} and tuned["trials"] == []
    assert json.loads((repo / "runs" / "lora" / "train.json").read_text())["status"] == "ok"  # trained as written
    report = (repo / "reports" / "comparison.md").read_text()
    first = report.split("\n## Quality")[0]
    assert "The search did not run for `lora` (failed)" in first, first
    table = report.split("## Searches and their budget")[1].split("\n## Quality")[0]
    planted = "planted fault in bakeoff.search.trials.search_variant"
    assert f"| lora | **not run** (failed: RuntimeError: {planted}" in table, table

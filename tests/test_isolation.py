"""No arm's death stops `dvc repro`: one `dvc repro` on a small task with the tiny model, where `lora`'s training
process is killed by SIGKILL (what the host's out-of-memory killer does; tests/faults.py plants it) and the other arms
train, evaluate and are compared. The fast tier's failure-isolation test; test_faults.py covers raised faults.

    .venv/bin/pytest tests/test_isolation.py     # about a minute and a half on 2 CPU cores
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


@pytest.mark.slow  # a whole pipeline: dvc repro of every stage
def test_an_arm_killed_by_sigkill_is_its_status_the_others_finish_and_the_report_names_it(tmp_path, tiny_model_dir):
    repo = tmp_path / "repo"
    repo.mkdir()
    params = make_dvc_repo(repo, tiny_model_dir, rows=32)
    params["train_defaults"].update(
        max_steps=2, effective_batch=4, micro_batch=2, precision="fp32", warmup_steps_excluded=1, logging_steps=1
    )
    params["baselines"] = {"zero_shot": {"shots": 0}}
    params["variants"] = {
        "lora": {"technique": "lora", "r": 4, "alpha": 8},
        "lora_wide": {"technique": "lora", "r": 8, "alpha": 16},
    }
    params["derived"] = {}
    params["eval"].update(latency_requests=2, bootstrap_resamples=200, probe=False, lm_eval="off", lm_eval_tasks=[])
    params["export"].update(serve=False)
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        **faults.env(
            tmp_path / "site", [("bakeoff.train.variant", "run_variant", "stages/train.py lora", None, "kill")]
        ),
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("BAKEOFF_SUPERVISED", None)
    cmd = "git init -q && git config user.email t@t && git config user.name t && dvc init -q && dvc repro"
    r = subprocess.run(cmd, shell=True, cwd=repo, env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]  # the kill did not stop dvc repro

    killed = json.loads((repo / "runs" / "lora" / "train.json").read_text())
    assert killed["status"] == "oom" and "killed by SIGKILL" in killed["error"], killed
    assert json.loads((repo / "runs" / "lora" / "eval.json").read_text())["status"] == "oom"
    for arm in ("lora_wide", "zero_shot"):  # the others finished
        rec = json.loads((repo / "runs" / arm / "eval.json").read_text())
        assert rec["status"] == "ok" and 0 <= rec["metrics"]["quality"] <= 1, rec
    report = (repo / "reports" / "comparison.md").read_text()
    assert "No result from `lora` (oom)" in report.split("\n## Quality")[0]  # on the first screen
    gone = report.split("## Runs that did not finish")[1]
    assert "- `lora`: oom — the process was killed by SIGKILL, likely the host's out-of-memory killer" in gone, gone
    assert "lora_wide" in report.split("## Runs that did not finish")[0]  # compared with the rest

"""The GPU check (benchmarks/gpu_check.py) at its tiny shape on CPU: it starts, every part runs, and what it
records is what the pipeline's own records say."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_record
import gpu_step


@pytest.mark.parametrize("shape, low, high", [("8b", 7.9e9, 8.1e9), ("1b", 1.2e9, 1.3e9)])
def test_the_shapes_are_the_models_they_stand_for(shape, low, high):
    """Llama-3.1-8B has 8.03e9 parameters and Llama-3.2-1B 1.24e9 (tied embeddings)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**gpu_step.SHAPES[shape]))
    assert low < sum(p.numel() for p in model.parameters()) < high


def test_the_default_models_tokenizer_ships_with_the_benchmarks():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gpu_step.ensure_tokenizer())  # DVC-tracked; rebuilt where absent
    assert len(tok) == 49152 and tok.chat_template and "<|im_start|>" in tok.chat_template


@pytest.mark.slow
def test_the_gpu_check_runs_at_its_tiny_shape_on_cpu(tmp_path):
    out = tmp_path / "gpu.json"
    # the stage commands in dvc.yaml's order, as on the lent GPU's image (no dvc there), two stages of a level at once
    # as the device call runs them (`--jobs`), one torch thread each; dvc repro is test_pipeline's
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_check.py"),
            "--shape",
            "tiny",
            "--runner",
            "commands",
            "--jobs",
            "2",
            "--parts",
            "env,pipeline,8b,unsloth,mfu,profile",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["env"]["cuda"] is False and res["env"]["versions"]["torch"]
    pipe = res["pipeline"]
    assert pipe["status"] == "ok" and pipe["how"] == "stage commands, 2 at a time", json.dumps(pipe)[-3000:]
    # the databases made first, model, data, a baseline's search and run, 7 arms x 3, export, 2 curve points, compare
    assert pipe["stages"] == 30
    runs = pipe["runs"]
    for name in ("full", "lora", "qlora", "lora_lowmem", "dpo"):
        assert runs[name]["train"] == "ok" and runs[name]["eval"] == "ok", (name, runs[name])
        assert runs[name]["trials"] and "complete" in runs[name]["trials"], (name, runs[name])
    assert runs["unsloth"]["train"] == "skipped" and "CUDA" in runs["unsloth"]["error"]
    # the arm past its budget: every trial and its run `oom`, and the pipeline went on to the comparison
    assert runs["full_oom"]["train"] == "oom" and set(runs["full_oom"]["trials"]) == {"oom"}
    assert (
        runs["qlora"]["dtypes"]["base"] == "nf4 4-bit"
        and runs["qlora"]["dtypes"]["activations"] == runs["qlora"]["dtypes"]["unquantized"]
    )
    steps = res["8b"]["rows"]
    assert {k: v["status"] for k, v in steps.items()} == {k: "ok" for k in steps}, steps
    assert steps["qlora + checkpointing"]["gradient_checkpointing"] and not steps["qlora"]["gradient_checkpointing"]
    assert all(v["predicted_gb"] > 0 and v["measured_gb"] is None for v in steps.values())  # no CUDA: no CUDA peak
    assert res["unsloth"]["status"].startswith("skipped") or res["unsloth"]["status"].startswith("missing")
    assert res["mfu"]["rows"]["full"]["status"] == "ok" and res["mfu"]["rows"]["lora"]["tokens_per_s"] > 0
    assert "pipeline" in r.stdout and "qlora + checkpointing" in r.stdout
    assert res["env"]["process_start_s"] > 0
    for name, prof in res["profile"]["rows"].items():  # one profiled step each: where its time went
        assert prof["on"] == "CPU ops" and 0 < prof["busy_s"] and 0 < prof["busy_share"] <= 1.05, (name, prof)
        # at 64 wide the groups are close (matmul 20% and fourth, measured): the matmuls found and counted
        assert abs(sum(prof["groups"].values()) - 1) < 0.01 and prof["groups"].get("matmul", 0) >= 0.1, (name, prof)
    met = {t["name"]: t["met"] for t in res["targets"]}
    assert met == {"parts_failed": True, "pipeline_statuses_wrong": True}, res["targets"]  # CPU: the CUDA ones absent


def test_a_missed_target_of_the_gpu_check_exits_1(tmp_path):
    """The check cannot pass by failing: a target it misses (here one replaced to be out of reach) exits 1."""
    out = tmp_path / "gpu.json"
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "gpu_check.py"),
        "--shape",
        "tiny",
        "--parts",
        "env",
        "--out",
        str(out),
    ]
    ok = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert ok.returncode == 0 and "target parts_failed: 0 ≤ 0: met" in ok.stdout, ok.stdout[-2000:] + ok.stderr
    # the same record's targets again (--rescore: no part reruns), one replaced to be out of reach
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_check.py"),
            "--rescore",
            str(out),
            "--out",
            str(out),
            "--target",
            "parts_failed=-1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert r.returncode == 1 and "target parts_failed: 0 ≤ -1: MISSED" in r.stdout, r.stdout[-2000:] + r.stderr
    assert "MISSED: parts_failed" in r.stderr
    assert json.loads(out.read_text())["targets"] == [
        {"name": "parts_failed", "value": 0, "target": "≤ -1", "met": False}
    ]


def test_the_gpu_checks_cuda_targets_miss_on_figures_that_miss_them(capsys):
    """The CUDA targets on figures as a GPU run writes them: each miss is printed and counted; a figure never
    measured is a miss, not a pass."""
    from targets import Targets

    rows = lambda **kw: {k: {"status": "ok", **v} for k, v in kw.items()}
    res = {
        "env": {"status": "ok"},
        "pipeline": {
            "status": "ok",
            "runs": {"lora": {"train": "ok", "eval": "ok"}, "full_oom": {"train": "oom"}, "qlora": {"train": "failed"}},
        },
        "8b": {
            "status": "ok",
            "rows": rows(
                **{
                    "qlora": {"measured_gb": 25.0, "error_vs_model": 0.05},
                    "qlora + checkpointing": {"measured_gb": 9.0, "error_vs_model": -0.2},
                    "lora": {"measured_gb": 30.0, "error_vs_model": 0.01},
                }
            ),
        },
        "unsloth": {"status": "ok", "rows": rows(unsloth={"tokens_per_s": 1.0})},
        "mfu": {
            "status": "ok",
            "rows": rows(
                full={"mfu": 0.40, "measured_gb": 20.0}, lora={"measured_gb": 10.0}, qlora={"measured_gb": 7.0}
            ),
        },
    }
    t = Targets()
    gpu_record.check_targets(res, t, tiny=False)
    missed = set(t.missed)
    assert missed == {
        "pipeline_statuses_wrong",
        "qlora_8b_peak_gib",
        "qlora_over_lora_peak_8b",
        "qlora_over_lora_peak_1b",
        "sizing_error_8b_qlora_+_checkpointing",
        "mfu_1b_lora",
    }, t.results
    assert "MISSED" in capsys.readouterr().out


def test_one_gpu_run_over_two_device_calls_keeps_what_each_measured():
    """--rescore merges the calls: a later call's parts replace the earlier call's, except a part it did not run; a
    part cut short by the time limit counts as a failed part."""
    from targets import Targets

    first = {
        "env": {"status": "ok"},
        "unsloth": {"status": "ok", "rows": {"hf": {"status": "ok"}}},
        "pipeline": {"status": "timeout"},
        "table": ["old"],
        "sizing": {"mfu": {}},
    }
    second = {"pipeline": {"status": "ok", "runs": {}}, "unsloth": {"status": "not run: the 360-s limit was reached"}}
    got = gpu_record.merged([first, second])
    assert got["pipeline"] == {"status": "ok", "runs": {}} and got["unsloth"] == first["unsloth"]
    assert "table" not in got and "sizing" not in got
    # a call resumed from the committed record, rescored with it: the three device calls, each once
    committed = {**first, "rescored": {"from": ["call1", "call2"]}}
    third = {**gpu_record.merged([committed]), "pipeline": {"status": "ok", "runs": {}}}
    assert "rescored" not in third
    assert gpu_record.rescored_from(["gpu.json", "call3.json"], [committed, third]) == ["call1", "call2", "call3.json"]
    t = Targets()
    gpu_record.check_targets(first, t, tiny=True)
    assert {r["name"]: r["value"] for r in t.results}["parts_failed"] == 1

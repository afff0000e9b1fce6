"""What DVC shows of a run (bakeoff.report.dvc_files): `dvc metrics show` one row of at most ten numbers per arm, no
warning; `dvc plots show` and `dvc plots diff` render the loss, quality and curve data in the project's templates
(dvc.yaml's top-level plots, configs/dvc_plots), on a repository this file makes with git and DVC.

    pytest tests/test_dvc_views.py      (seconds, no torch)
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from bakeoff.core.records import RunRecord
from bakeoff.decide.curve_record import Curve
from bakeoff.decide.sizing_record import AllIn
from bakeoff.report import dvc_files

ROOT = Path(__file__).resolve().parents[1]
DVC = str(Path(sys.executable).with_name("dvc"))


def table(lora_quality: float = 0.8) -> pd.DataFrame:
    nan = math.nan
    return pd.DataFrame(
        [
            {
                "name": "zero_shot",
                "status": "ok",
                "quality": 0.1,
                "quality_ci_low": 0.05,
                "quality_ci_high": 0.2,
                "gain": nan,
                "gen_wall_s": 20.0,
                "eval_peak_rss_mb": 1800.0,
                "kernels": "eager",
            },
            {
                "name": "lora",
                "status": "ok",
                "quality": lora_quality,
                "quality_ci_low": 0.7,
                "quality_ci_high": 0.9,
                "gain": 0.5,
                "gain_ci_low": 0.4,
                "gain_ci_high": 0.6,
                "train_wall_s": 200.0,
                "gen_wall_s": 12.0,
                "train_peak_rss_mb": 4000.0,
                "eval_peak_rss_mb": 2000.0,
                "convergence": "still improving",
            },
            {"name": "unsloth", "status": "skipped", "error": "needs a CUDA GPU", "quality": nan},
        ]
    )


RECORDS = {
    "lora": RunRecord.from_dict(
        {
            "history": [{"step": 5, "loss": 0.7}, {"step": 10, "loss": 0.3}],
            "val_curve": [{"step": 10, "loss": 0.2, "se": 0.01}],
        }
    ),
    "unsloth": RunRecord.from_dict({"status": "skipped"}),
}
CURVE = Curve.from_dict({"arms": {"recommended": {"run": "lora", "rows": [50, 100, 200], "quality": [0.5, 0.6, 0.8]}}})


def test_each_arm_is_at_most_ten_numbers_with_its_status_as_one():
    m = dvc_files.arm_metrics(table(), {"lora": AllIn(usd=6.954)})
    assert m["unsloth"] == {"ok": 0}  # skipped: no figure, its reason is in the report
    assert m["lora"] == {
        "ok": 1,
        "quality": 0.8,
        "ci_low": 0.7,
        "ci_high": 0.9,
        "gain": 0.5,
        "gain_ci_low": 0.4,
        "train_s": 200.0,
        "eval_s": 12.0,
        "peak_mb": 4000.0,
        "usd_target": 6.95,
    }
    assert m["zero_shot"]["peak_mb"] == 1800.0 and "gain" not in m["zero_shot"]  # evaluation's peak; no gain
    assert all(len(v) <= 10 and all(isinstance(x, (int, float)) for x in v.values()) for v in m.values())


def test_an_arm_removed_from_the_params_leaves_no_metrics_file_behind(tmp_path):
    dvc_files.write(tmp_path, table(), RECORDS, None, CURVE)
    assert (tmp_path / "arms" / "unsloth.json").is_file()
    dvc_files.write(tmp_path, table().iloc[:2], RECORDS, None, None)
    assert sorted(p.name for p in (tmp_path / "arms").iterdir()) == ["lora.json", "zero_shot.json"]
    assert (tmp_path / "dvc" / "curve.csv").read_text().strip() == "arm,rows,quality"  # no curve: its header alone


def test_the_records_are_copied_for_git_and_a_removed_arm_leaves_none(tmp_path):
    runs_dir, out = tmp_path / "runs", tmp_path / "reports"
    for arm, files in {"lora": ("tuned", "train", "eval"), "zero_shot": ("tuned", "eval")}.items():
        (runs_dir / arm).mkdir(parents=True)
        for f in files:
            (runs_dir / arm / f"{f}.json").write_text(json.dumps({"arm": arm, "file": f}))
    (runs_dir / "lora" / "predictions.jsonl").write_text("{}\n")  # predictions stay in DVC's cache
    (out / "shipped.json").parent.mkdir()
    (out / "shipped.json").write_text('{"shipped": "lora"}')
    dest = dvc_files.records(out, runs_dir, out / "shipped.json")
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file())
    assert got == [
        "lora/eval.json",
        "lora/train.json",
        "lora/tuned.json",
        "shipped.json",
        "zero_shot/eval.json",
        "zero_shot/tuned.json",
    ]
    assert json.loads((dest / "lora" / "train.json").read_text()) == {"arm": "lora", "file": "train"}
    shutil.rmtree(runs_dir / "zero_shot")
    dvc_files.records(out, runs_dir, None)
    assert sorted(p.name for p in dest.iterdir()) == ["lora"]


def dvc(repo: Path, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([DVC, *args], cwd=repo, capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git repository with DVC, the project's top-level plots and templates, and one run's files committed."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    for k, v in (("user.email", "t@example.com"), ("user.name", "t")):
        subprocess.run(["git", "config", k, v], cwd=tmp_path, check=True)
    dvc(tmp_path, "init", "-q")
    shutil.copytree(ROOT / "configs" / "dvc_plots", tmp_path / "configs" / "dvc_plots")
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"metrics": ["reports/arms"], "plots": spec["plots"]}))
    dvc_files.write(tmp_path / "reports", table(), RECORDS, {"lora": AllIn(usd=7.0)}, CURVE)
    subprocess.run("git add -A && git commit -qm one", shell=True, cwd=tmp_path, check=True)
    return tmp_path


def test_dvc_metrics_show_fits_a_terminal_with_no_warning(repo):
    text = dvc(repo, "metrics", "show")
    assert not text.stderr.strip(), text.stderr
    lines = text.stdout.strip().splitlines()
    assert len(lines) == 4 and lines[0].split()[0] == "Path" and len(lines[0].split()) <= 11
    shown = json.loads(dvc(repo, "metrics", "show", "--json").stdout)[""]["data"]
    assert shown["reports/arms/lora.json"]["data"]["quality"] == 0.8


def test_dvc_plots_show_and_diff_render_the_loss_quality_and_curve(repo):
    shown = json.loads(dvc(repo, "plots", "show", "--json").stdout)["data"]
    assert set(shown) == {"reports/dvc/loss.csv", "reports/dvc/quality.csv", "reports/dvc/curve.csv"}
    loss = shown["reports/dvc/loss.csv"][0]["content"]
    assert loss["facet"]["row"]["field"] == "split" and loss["spec"]["encoding"]["color"]["field"] == "arm"
    assert {(p["arm"], p["split"]) for p in loss["data"]["values"]} == {("lora", "train"), ("lora", "validation")}
    assert "measured" in loss["title"]
    dvc_files.write(repo / "reports", table(lora_quality=0.85), RECORDS, {"lora": AllIn(usd=7.0)}, CURVE)
    subprocess.run("git commit -qam two", shell=True, cwd=repo, check=True)
    diff = json.loads(dvc(repo, "plots", "diff", "HEAD~1", "HEAD", "--json").stdout)["data"]
    quality = diff["reports/dvc/quality.csv"][0]["content"]["data"]["values"]
    assert {(p["rev"], p["quality"]) for p in quality if p["arm"] == "lora"} == {("HEAD~1", "0.8"), ("HEAD", "0.85")}
    changed = dvc(repo, "metrics", "diff", "HEAD~1", "HEAD").stdout
    assert "reports/arms/lora.json" in changed and "0.85" in changed


def test_the_committed_run_reads_in_dvc_metrics_show_exp_show_and_plots_show():
    """On the repository itself: every arm of the committed run is one row of at most ten numbers, `dvc exp show
    --only-changed` fits a screen, and `dvc plots show` renders the three data plots beside the report's figures."""
    shown = json.loads(dvc(ROOT, "metrics", "show", "--json").stdout)[""]["data"]
    arms = json.loads((ROOT / "reports" / "metrics.json").read_text())["runs"]
    assert {Path(p).stem for p in shown} == set(arms)
    assert all(len(v["data"]) <= 10 and not v.get("error") for v in shown.values())
    assert all(isinstance(x, (int, float)) for v in shown.values() for x in v["data"].values())
    text = dvc(ROOT, "metrics", "show")
    assert "failed to load" not in (text.stdout + text.stderr).lower()
    exp = dvc(ROOT, "exp", "show", "--only-changed", "--no-pager", "--csv").stdout.splitlines()
    assert len(exp[0].split(",")) <= 120, len(exp[0].split(","))
    plots = json.loads(dvc(ROOT, "plots", "show", "--json").stdout)["data"]
    assert {"reports/dvc/loss.csv", "reports/dvc/quality.csv", "reports/dvc/curve.csv"} <= set(plots)
    loss = plots["reports/dvc/loss.csv"][0]["content"]["data"]["values"]
    trained = {n for n, a in arms.items() if a.get("status") == "ok" and n not in ("zero_shot", "prompt_search")}
    assert trained <= {p["arm"] for p in loss} and {p["split"] for p in loss} == {"train", "validation"}
    copied = {p.name for p in (ROOT / "reports" / "records").iterdir() if p.is_dir()}
    assert copied == set(arms), "reports/records/ holds git's copy of every arm's records"

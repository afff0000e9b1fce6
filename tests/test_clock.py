"""The clock over `dvc repro` (bakeoff.run.clock), on a real DVC project of three small stages, run twice."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bakeoff.core.clock_record import StageTime
from bakeoff.run.clock import about, human
from bakeoff.run.estimate import Estimator

DVC_YAML = textwrap.dedent("""\
    stages:
      first:
        cmd: python -c "import time; time.sleep(0.6); open('a.txt', 'w').write(open('in.txt').read())"
        deps: [in.txt]
        outs: [a.txt]
      second:
        cmd: python -c "import time; time.sleep(0.3); open('b.txt', 'w').write(open('a.txt').read() * 2)"
        deps: [a.txt]
        outs: [b.txt]
      alone:
        cmd: python -c "open('c.txt', 'w').write('c')"
        outs: [c.txt]
""")


def clock(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bakeoff.run.clock", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture()
def project(tmp_path):
    subprocess.run(["dvc", "init", "--no-scm", "--quiet"], cwd=tmp_path, check=True)
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    (tmp_path / "in.txt").write_text("x")
    return tmp_path


def test_durations_are_written_one_way():
    assert human(0.43) == "0.4 s"
    assert human(45) == "45 s"
    assert human(151) == "2 min 31 s"
    assert human(1200) == "20 min"
    assert human(3900) == "1 h 5 min"
    assert human(3057.7) == "51 min" and human(6460.6) == "1 h 48 min"  # to the nearest minute, as the README
    assert about(3) == "3 s"
    assert about(0.2) == "1 s"
    assert about(33) == "35 s"
    assert about(62) == "1 min"
    assert about(245) == "4 min"


def test_clock_plans_from_dvc_times_each_stage_and_learns_from_its_record(project):
    r = clock(project)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    # before the first stage: what will run, in DVC's order, and what each estimate rests on
    assert "[clock] 3 of 3 stages will run" in out and "throughput estimate" in out
    assert out.index("[clock] 3 of 3") < out.index("[1/3]")
    assert out.index("[1/3] first — about") < out.index("[2/3] second — about")  # second depends on first
    assert "left" in out.splitlines()[next(i for i, ln in enumerate(out.splitlines()) if ln.startswith("[1/3]"))]
    assert "[2/3] second — done in" in out and "[clock] 3 stages ran in" in out
    assert (project / "b.txt").read_text() == "xx"  # DVC really ran them
    rec = json.loads((project / "reports/clock.json").read_text())
    assert rec["stages"]["first"]["actual_s"] >= 0.6
    # a throughput estimate, scaled where this machine's speed probe differs from the reference's (another machine
    # kind, or a busy one)
    assert rec["stages"]["first"]["estimated_from"].startswith("throughput estimate")
    assert rec["runs"][-1]["completed"] and rec["runs"][-1]["stages_ran"] == 3

    # nothing changed: DVC's own check says so, and nothing runs
    r = clock(project)
    assert "[clock] nothing to run: all 3 stages match dvc.lock" in r.stdout and "done in" not in r.stdout

    # a changed input reruns its stage and the one downstream, estimated from the first run's record
    (project / "in.txt").write_text("y")
    r = clock(project)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[clock] 2 of 3 stages will run" in r.stdout and "(last run" in r.stdout
    assert "alone —" not in r.stdout  # DVC checks it and skips it, as `dvc repro` does; the clock says nothing
    rec2 = json.loads((project / "reports/clock.json").read_text())
    first, second = rec["stages"]["first"]["actual_s"], rec["stages"]["second"]["actual_s"]
    # scaled by the speed probe now against then, where they differ beyond the probe's spread
    f = Estimator(rec, probe=rec2["runs"][-1]["probe_s"]).speed(StageTime.from_dict(rec["stages"]["first"]))[0]
    assert rec2["stages"]["first"]["estimated_s"] == pytest.approx(first * f, abs=0.05)
    assert rec2["runs"][-1]["estimated_total_s"] == pytest.approx((first + second) * f, abs=0.1)
    assert (project / "b.txt").read_text() == "yy"

    # -f runs every stage again, as dvc repro -f does
    r = clock(project, "-f")
    assert "[clock] 3 of 3 stages will run" in r.stdout and "[3/3]" in r.stdout


def test_a_failed_stage_is_recorded_and_stops_the_run_as_dvc_does(project):
    (project / "dvc.yaml").write_text(
        DVC_YAML + '  broken:\n    cmd: python -c "import sys; sys.exit(3)"\n    deps: [b.txt]\n    outs: [d.txt]\n'
    )
    r = clock(project)
    assert r.returncode == 1
    assert "broken — FAILED in" in r.stdout and "failed to reproduce 'broken'" in r.stderr
    assert "exited with 3" in r.stderr and "Traceback" not in r.stderr
    rec = json.loads((project / "reports/clock.json").read_text())
    assert rec["stages"]["broken"]["last_status"] == "failed" and "actual_s" not in rec["stages"]["broken"]
    assert rec["runs"][-1]["completed"] is False and rec["stages"]["second"]["last_status"] == "ran"


def test_a_bad_dvc_yaml_is_said_without_a_traceback(project):
    (project / "dvc.yaml").write_text("stages:\n  first:\n    cmd: [\n")
    r = clock(project)
    assert r.returncode == 1 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr


def test_only_an_arms_empty_predictions_go_unwarned():
    import logging

    from bakeoff.run.clock import _EmptyPredictions

    f = _EmptyPredictions()
    rec = lambda path: logging.LogRecord("dvc.output", logging.WARNING, "", 0, "'%s' is empty.", (path,), None)
    assert not f.filter(rec("runs/unsloth/predictions.jsonl"))
    assert f.filter(rec("data/raw/mine.jsonl")) and f.filter(rec("runs/lora/eval.json"))


def test_a_search_is_estimated_by_whether_its_study_is_still_stored(tmp_path, monkeypatch):
    import sqlite3

    from bakeoff.run.estimate import Estimator

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/lora").mkdir(parents=True)
    (tmp_path / "runs/lora/tuned.json").write_text(json.dumps({"study": "tickets.lora.abc", "tune_wall_s": 340.0}))
    # no study storage: it will search again, as long as its trials took
    why = "its trials' recorded time (its study is not stored here)"
    assert Estimator({"stages": {}, "runs": []})("tune@lora") == (355.0, why)
    (tmp_path / ".bakeoff_tmp").mkdir()
    with sqlite3.connect(tmp_path / ".bakeoff_tmp/tune.db") as con:
        con.execute("create table studies (study_name text)")
        con.execute("insert into studies values ('tickets.lora.abc')")
    assert Estimator({"stages": {}, "runs": []})("tune@lora")[1] == "its study is stored here, so reused"
    timed = {"stages": {"tune@lora": {"actual_s": 9.5}}, "runs": []}
    assert Estimator(timed)("tune@lora") == (9.5, "last run")


def test_a_last_time_is_scaled_by_the_machines_speed_now_against_then(tmp_path, monkeypatch):
    """Machines of this kind run 1.4x slower some hours: a stage's last time is scaled by the speed probe now over
    the probe recorded when it was timed (within 5%: as measured; no probe: unscaled)."""
    from bakeoff.core.measure import speed_probe

    monkeypatch.chdir(tmp_path)
    rec = {"stages": {"train@lora": {"actual_s": 100.0, "probe_s": 0.02}}, "runs": []}
    assert Estimator(rec, probe=0.03)("train@lora") == (
        pytest.approx(150.0),
        "last run, x1.50 for this machine's speed now",
    )
    assert Estimator(rec, probe=0.023)("train@lora") == (100.0, "last run")  # within the probe's own spread
    assert Estimator(rec)("train@lora") == (100.0, "last run")
    assert Estimator(rec, probe=1.0)("train@lora")[0] == pytest.approx(250.0)  # a factor past 2.5 is a broken probe
    (tmp_path / "runs/lora").mkdir(parents=True)  # a search to run again: its trials' time, scaled the same way
    (tmp_path / "runs/lora/tuned.json").write_text(json.dumps({"study": "s", "tune_wall_s": 200.0}))
    rec["stages"]["tune@lora"] = {"actual_s": 5.0, "probe_s": 0.02}
    assert Estimator(rec, probe=0.03)("tune@lora")[0] == pytest.approx(315.0)
    probe = speed_probe()
    assert 0.001 < probe < 5.0


def test_an_arm_that_takes_another_arms_search_is_estimated_in_seconds(tmp_path, monkeypatch):
    """tune.share: qlora reads lora's study, which tune@lora searches first in the same run; its recorded trials
    (copied from lora's) are not its own time."""
    from types import SimpleNamespace

    from bakeoff.run.estimate import Estimator

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs/qlora").mkdir(parents=True)
    (tmp_path / "runs/qlora/tuned.json").write_text(
        json.dumps({"study": "t.lora.abc", "tune_wall_s": 840.0, "shared_from": "lora"})
    )
    params = SimpleNamespace(tune=SimpleNamespace(share={"qlora": "lora"}, storage=None, trials=4))
    why = "it takes lora's search, which runs first"
    assert Estimator({"stages": {}, "runs": []}, params)("tune@qlora") == (10.0, why)
    timed = {"stages": {"tune@qlora": {"actual_s": 12.5}}, "runs": []}
    assert Estimator(timed, params)("tune@qlora")[0] == 12.5


def test_a_curve_share_is_estimated_at_the_arms_whole_training_run_under_the_steps_schedule(tmp_path, monkeypatch):
    """curve.schedule steps trains every share the arm's own steps: a share's first estimate is the arm's training
    run and a test answer whatever its share; with epochs (the default) it shrinks with the share down to
    curve.min_steps; a prompt's share trains nothing."""
    from dataclasses import replace

    from bakeoff.core.config import load_params

    default = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    params = replace(default, curve=replace(default.curve, schedule="steps"), tune=replace(default.tune, trials=0))
    monkeypatch.chdir(tmp_path)
    never = {"stages": {}, "runs": []}
    est = Estimator(never, params)
    small, half = est("curve@recommended-0.125"), est("curve@recommended-0.5")
    assert small == half and small[1] == "throughput estimate"
    assert small[0] > est("train@lora")[0]  # the arm's whole run (no search to adopt from), and its answers besides
    prompt = est("curve@best_prompt-0.125")[0]
    assert prompt < small[0] / 2
    est = Estimator(never, default)
    assert default.curve.schedule == "epochs"
    assert est("curve@recommended-0.125")[0] <= est("curve@recommended-0.5")[0] < half[0]
    assert est("curve@best_prompt-0.125")[0] == prompt
    timed = {"stages": {"curve@recommended-0.125": {"actual_s": 480.0}}, "runs": []}  # then its own time
    assert Estimator(timed, params)("curve@recommended-0.125") == (480.0, "last run")


def test_a_first_estimate_adds_up_what_the_stage_will_do_at_this_machines_speed(tmp_path, monkeypatch):
    """Nothing measured here: an arm that searched adopts its trial (seconds), an arm that takes another's search
    trains in full; the quick look's budget (one trial, no GGUF, no side checks) is priced below the full run's; a
    machine whose speed probe is twice the reference's doubles the estimate and says so."""
    import yaml

    from bakeoff.core.config import Source, load_params, parse_params
    from bakeoff.run import quick
    from bakeoff.run.estimate import REFERENCE_PROBE

    root = Path(__file__).resolve().parents[1]
    full = load_params(root / "params.yaml")
    small = parse_params(quick.overrides(yaml.safe_load((root / "params.yaml").read_text())), Source("q", {}))
    monkeypatch.chdir(tmp_path)  # no record, no data stage's counts, no searches stored
    never = {"stages": {}, "runs": []}
    est, q = Estimator(never, full, REFERENCE_PROBE), Estimator(never, small, REFERENCE_PROBE)
    assert est("train@lora")[0] < 10 and 100 < est("train@qlora")[0] < est("train@lora_lowmem")[0]
    assert q("tune@lora")[0] < est("tune@lora")[0] / 4 and q("export")[0] < est("export")[0] / 3
    assert q("evaluate@lora")[0] < est("evaluate@lora")[0] / 2 and q("baseline@zero_shot")[1] == "throughput estimate"
    slow = Estimator(never, full, 2 * REFERENCE_PROBE)("tune@lora")
    assert slow[0] == pytest.approx(2 * est("tune@lora")[0]) and "x2.00 for this machine's speed" in slow[1]

"""What set-up installs: the ``bakeoff`` command (each subcommand's help, ``size``'s card table, its errors, another
configuration in a workspace of its own) and every import declared (deptry, as ``make test`` runs it).

    pytest tests/test_install.py      (about a minute, no torch)
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bakeoff.run import cli

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
BAKEOFF = shutil.which("bakeoff", path=str(BIN)) or shutil.which("bakeoff")
SUBCOMMANDS = ["quick", "repro", "size", "report", "ui"]


def bakeoff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    assert BAKEOFF, "no bakeoff command: make setup installs it ([project.scripts] in pyproject.toml)"
    return subprocess.run([BAKEOFF, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_the_command_lists_its_subcommands_and_each_has_help():
    top = bakeoff("--help")
    assert top.returncode == 0 and all(s in top.stdout for s in SUBCOMMANDS), top.stdout + top.stderr
    for sub in SUBCOMMANDS:
        r = bakeoff(sub, "--help")
        assert r.returncode == 0 and f"usage: bakeoff {sub}" in r.stdout and "--params FILE" in r.stdout, sub
    assert "--technique" in bakeoff("size", "--help").stdout and "--port" in bakeoff("ui", "--help").stdout


def table(out: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    return {r[0].strip(): [c.strip() for c in r[1:]] for r in rows[1:]}


def test_size_prints_every_card_for_the_model_and_technique_before_any_training():
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    q = bakeoff("size", "--model", "llama-3.1-8b", "--technique", "qlora", "--tokens", "1e7")
    assert q.returncode == 0, q.stderr
    rows = table(q.stdout)
    assert list(rows) == [g["name"] for g in params["sizing"]["gpus"]]
    assert "Projected, not measured: `llama-3.1-8b` trained with `qlora`" in q.stdout and "10,000,000" in q.stdout
    assert rows["H200"][2] == "yes" and float(rows["H200"][1]) < 24  # a 4-bit 8B fits a 24 GB card's 90%
    full = table(bakeoff("size", "--model", "llama-3.1-8b", "--technique", "full", "--tokens", "1e7").stdout)
    assert float(full["H200"][1]) > 4 * float(rows["H200"][1])  # 16-bit weights, gradients and Adam's state
    cards = {g: int(full[g][2].split()[0]) if full[g][2].endswith("sharded") else 1 for g in ("L4", "H200")}
    assert cards["L4"] > cards["H200"] > 1  # sharded where one card cannot hold it, more of the smaller card
    long = table(
        bakeoff(
            "size",
            "--model",
            "llama-3.1-8b",
            "--technique",
            "qlora",
            "--seq-len",
            "4096",
            "--micro-batch",
            "4",
            "--tokens",
            "1e7",
        ).stdout
    )
    assert float(long["H200"][1]) > float(rows["H200"][1])  # more activations
    priced = [float(rows[g][4].replace(",", "")) for g in ("H100-80GB", "H200")]
    assert priced[0] < priced[1]  # the same hours at a lower price


def test_the_card_table_projects_what_the_reports_sizing_projects():
    """One projection, one way: each card's need and a card's hours and dollars are the report's sizing figures for
    the same target, variant, shape and tokens (bakeoff.decide.sizing.table)."""
    from dataclasses import replace

    from bakeoff.core.config import load_params
    from bakeoff.decide.sizing import table
    from bakeoff.run.cards import Asked, cards

    params = load_params(ROOT / "params.yaml")
    params = replace(params, cost=replace(params.cost, train_tokens=1e7))
    fits = {(f.target, f.variant): f for f in table(params, {n: 1e7 for n in params.variants}, speeds=[])}
    for variant in ("full", "qlora", "lora_lowmem"):
        c = cards(params, Asked("llama-3.1-8b", variant), speeds=[])
        report = fits[("llama-3.1-8b", variant)]
        assert {f.need_gb for _, f in c.fits} == {report.need_gb}, variant
        same = next(f for g, f in c.fits if g.name == report.cheapest_gpu)
        assert (same.hours, same.usd) == (report.cheapest_hours, report.cheapest_usd), variant


def test_size_says_what_to_change_when_the_model_or_technique_is_unknown(tmp_path):
    r = bakeoff("size", "--model", "llama-9b", "--technique", "qlora")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "--model llama-9b: not in sizing.targets of params.yaml" in r.stderr and "llama-3.1-8b" in r.stderr
    r = bakeoff("size", "--model", "llama-3.1-8b", "--technique", "ppo")
    assert r.returncode == 2 and "--technique ppo" in r.stderr and "qlora" in r.stderr
    r = bakeoff("size", "--model", "x", "--technique", "lora", "--params", str(tmp_path / "none.yaml"))
    assert r.returncode == 2 and "no such file" in r.stderr


def test_size_reads_another_configuration_with_its_own_model_and_card(tmp_path):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["sizing"]["targets"].append(
        {
            "name": "mine-30b",
            "layers": 60,
            "hidden": 6656,
            "intermediate": 17920,
            "heads": 52,
            "kv_heads": 52,
            "vocab": 32000,
        }
    )
    raw["sizing"]["gpus"] = [{"name": "MyCard", "memory_gb": 96, "usd_per_hour": 2.0, "bf16_tflops": 500}]
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(raw))
    r = bakeoff(
        "size", "--model", "mine-30b", "--technique", "lora", "--tokens", "1e7", "--params", str(tmp_path / "mine.yaml")
    )
    assert r.returncode == 0, r.stderr
    assert list(table(r.stdout)) == ["MyCard"] and "`mine-30b`" in r.stdout


def test_a_bad_params_file_is_said_with_its_line_and_no_traceback(tmp_path):
    (tmp_path / "bad.yaml").write_text("task:\n  name: t\nsizing:\n  margin: lots\n")
    r = bakeoff("size", "--model", "llama-3.1-8b", "--technique", "qlora", "--params", str(tmp_path / "bad.yaml"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "bad.yaml" in r.stderr, r.stderr


def test_outside_the_project_the_command_says_where_to_run_it(tmp_path):
    (tmp_path / "params.yaml").write_text("task: {name: t}\n")
    r = bakeoff("repro", cwd=tmp_path)
    assert r.returncode == 2 and "no dvc.yaml" in r.stderr and "Traceback" not in r.stderr


def test_another_configuration_runs_in_a_workspace_of_its_own(tmp_path, monkeypatch):
    """``bakeoff repro --params FILE``: FILE's params in work/<name>/, the project's params.yaml untouched."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # params' store (a server URL set outside is kept as is)
    for part in ("dvc.yaml", "params.yaml", "stages", "src", "data", "configs"):
        src = ROOT / part
        (
            shutil.copytree(src, tmp_path / part, ignore=shutil.ignore_patterns("prepared*", "__pycache__"))
            if src.is_dir()
            else shutil.copy2(src, tmp_path / part)
        )
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["verdict"]["min_gain"] = 0.11
    (tmp_path / "other.yaml").write_text(yaml.safe_dump(raw))
    before = (tmp_path / "params.yaml").read_text()
    assert cli._workspace(tmp_path, tmp_path / "params.yaml")[0] == tmp_path
    where, env = cli._workspace(tmp_path, tmp_path / "other.yaml")
    assert where == tmp_path / "work" / "other" and (where / "dvc.yaml").is_file()
    assert yaml.safe_load((where / "params.yaml").read_text())["verdict"]["min_gain"] == 0.11
    assert (tmp_path / "params.yaml").read_text() == before and env["MLFLOW_TRACKING_URI"].startswith("sqlite:////")
    # dvc.yaml's stages run `python` from PATH: this interpreter's, though the venv is not activated
    assert env["PATH"].split(":")[0] == str(Path(sys.executable).parent)


def deptry(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "deptry"), ".", "--no-ansi"], cwd=root, capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture(scope="module")
def code_copy(tmp_path_factory) -> Path:
    """The project's code and pyproject.toml, where an import can be planted."""
    root = tmp_path_factory.mktemp("project")
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    for part in ("src", "stages", "benchmarks", "tests"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_every_import_is_declared_and_a_planted_undeclared_one_fails(code_copy):
    clean = deptry(code_copy)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    planted = code_copy / "src" / "bakeoff" / "core" / "planted.py"
    planted.write_text("import rich\nimport tomlkit\n")  # installed only because other packages bring them
    try:
        r = deptry(code_copy)
        out = r.stdout + r.stderr
        assert r.returncode == 1 and "DEP003 'rich'" in out and "DEP003 'tomlkit'" in out, out
        assert "planted.py" in out
    finally:
        planted.unlink()

"""The library's floor plan, checked: what each stage imports is what dvc.yaml says it depends on, imports run one
way, the params schema loads without torch, files and functions stay readable, and defaults are written once.

    .venv/bin/pytest tests/test_layout.py      # seconds; no model, no torch import of the library
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
LIB = SRC / "bakeoff"


def module_file(name: str) -> Path | None:
    """``bakeoff.a.b`` → src/bakeoff/a/b.py or src/bakeoff/a/b/__init__.py (None: not a bakeoff module)."""
    base = SRC.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


def imported(path: Path) -> set[str]:
    """Every bakeoff module ``path`` imports, anywhere in the file (function-local imports included), with the
    packages Python runs first (importing ``bakeoff.a.b`` runs ``bakeoff/a/__init__.py``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] != "bakeoff" or module_file(name) is None:
                continue  # not ours, or an attribute rather than a submodule
            parts = name.split(".")
            out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return out


def closure(path: Path) -> set[Path]:
    """The library files a script loads when every import it (and they) could run is run."""
    seen: set[str] = set()
    todo = list(imported(path))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo += imported(module_file(name))
    return {module_file(n) for n in seen}


def stage_deps() -> dict[str, tuple[Path, list[str]]]:
    """dvc.yaml's stages: name → (the script its cmd runs, its deps)."""
    spec = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    out = {}
    for name, stage in spec.items():
        body = stage.get("do", stage)
        script = next(w for w in body["cmd"].split() if w.startswith("stages/"))
        out[name] = (ROOT / script, [d for d in body["deps"] if "${" not in d])
    return out


@pytest.mark.parametrize("stage", sorted(stage_deps()))
def test_dvc_deps_cover_every_module_a_stage_imports(stage):
    script, deps = stage_deps()[stage]
    covered = [ROOT / d for d in deps]
    assert script in covered, f"dvc.yaml: stage {stage} does not depend on its own script {script.name}"
    missing = sorted(str(f.relative_to(ROOT)) for f in closure(script)
                     if not any(f == d or d in f.parents for d in covered))
    assert not missing, f"dvc.yaml: stage {stage} imports {missing} but does not list them in deps: an edit to them " \
                        "would leave its results stale"


def test_the_deps_check_catches_a_missing_module(tmp_path):
    # the check above, on a stage that imports through two levels and a function-local import
    files = closure(ROOT / "stages" / "compare.py")
    assert LIB / "verdict.py" in files and LIB / "metrics.py" in files  # compare → verdict → metrics
    assert LIB / "models.py" in files  # sizing.calibration imports it inside a function
    assert LIB / "report" / "__init__.py" in files and LIB / "report" / "plots.py" in files
    assert LIB / "techniques" / "trainer.py" not in files  # compare never trains


def _graph(local: bool) -> dict[str, set[str]]:
    """Module → modules it imports (module level only, unless ``local``); the implicit parent packages left out."""
    graph = {}
    for path in LIB.rglob("*.py"):
        name = ".".join(path.relative_to(SRC).with_suffix("").parts).removesuffix(".__init__")
        tree = ast.parse(path.read_text())
        nodes = ast.walk(tree) if local else tree.body
        deps = set()
        for node in nodes:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bakeoff"):
                deps |= {f"{node.module}.{a.name}" if module_file(f"{node.module}.{a.name}") else node.module
                         for a in node.names}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("bakeoff")}
        graph[name] = deps - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(n, trail):
        state[n] = 1
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return trail + [n, m]
            if not state.get(m) and (found := visit(m, trail + [n])):
                return found
        state[n] = 2
        return None

    for n in sorted(graph):
        if not state.get(n) and (found := visit(n, [])):
            return found
    return None


def test_no_import_circle():
    assert _cycle(_graph(local=True)) is None, " → ".join(_cycle(_graph(local=True)))


def test_an_import_circle_is_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_params_load_without_torch():
    code = ("import sys; from bakeoff.config import load_params; load_params('params.yaml'); "
            "import bakeoff.verdict, bakeoff.metrics, bakeoff.sizing, bakeoff.prompts; print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False", "the params schema or a pure module imports torch"


def test_library_files_and_functions_stay_readable():
    long_files = {str(p.relative_to(ROOT)): n for p in LIB.rglob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert not long_files, f"library files over 400 lines: {long_files}"
    long_functions = []
    for path in [*LIB.rglob("*.py"), *(ROOT / "stages").glob("*.py")]:
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                body = lines[node.lineno - 1:node.end_lineno]
                if not any("# long:" in line for line in body[:6]):
                    long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long_functions, f"functions over 60 lines without a '# long: <reason>' comment: {long_functions}"


# values a user must replace rather than defaults: the shipped task's files and the example price and card catalog
NOT_DEFAULTS = {"task.name", "task.train", "task.prefs", "cost.usd_per_1k_prompt_tokens", "cost.train_tokens",
                "sizing.target", "sizing.targets", "sizing.gpus", "tune.share",
                # the shipped project searches (4 trials per arm); a params.yaml without `tune.trials` does not
                "tune.trials"}


def test_dataclass_defaults_are_params_yaml():
    from bakeoff import config

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    sections = {"model": config.ModelConfig, "task": config.TaskConfig, "train_defaults": config.TrainConfig,
                "eval": config.EvalConfig, "tracking": config.TrackingConfig, "verdict": config.VerdictConfig,
                "cost": config.CostConfig, "sizing": config.SizingConfig, "tune": config.TuneConfig}
    differ, undocumented = [], []
    for section, cls in sections.items():
        for f in fields(cls):
            key = f"{section}.{f.name}"
            if f.name not in params[section]:
                undocumented.append(key)
                continue
            default = f.default if f.default is not MISSING else f.default_factory()
            if key not in NOT_DEFAULTS and default != params[section][f.name]:
                differ.append(f"{key}: {default!r} in config.py, {params[section][f.name]!r} in params.yaml")
    assert not differ, "defaults written twice disagree: " + "; ".join(differ)
    assert not undocumented, f"knobs params.yaml does not show: {undocumented}"


def test_old_sizing_names_still_work_with_a_warning(tmp_path):
    text = (ROOT / "params.yaml").read_text().replace("target_seq_len:", "seq_len:")
    (tmp_path / "params.yaml").write_text(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.strip().startswith("seq_len:"))
    code = "from bakeoff.config import load_params; print(load_params('params.yaml').sizing.target_seq_len)"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "1024"
    assert f"params.yaml:{line}: sizing.seq_len is deprecated, rename it sizing.target_seq_len" in r.stderr

"""The library's floor plan, checked: what each stage imports is what dvc.yaml says it depends on, imports run one
way, the params schema loads without torch, files and functions stay readable, and defaults are written once.

    .venv/bin/pytest tests/test_layout.py      # seconds; no model, no torch import of the library
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import MISSING, fields
from pathlib import Path

import pytest
import yaml

from bakeoff.run.deps import closure, docstring_only, imported, module_file, rewritten

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
LIB = SRC / "bakeoff"


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
    missing = sorted(
        str(f.relative_to(ROOT))
        for f in closure(script)
        if not docstring_only(f) and not any(f == d or d in f.parents for d in covered)
    )
    assert not missing, (
        f"dvc.yaml: stage {stage} imports {missing} but does not list them in deps: an edit to them "
        "would leave its results stale"
    )


def test_dvc_yamls_code_deps_are_what_the_import_graph_writes():
    """Each stage's code deps are the files its script loads (a folder where it loads all of it), no more: an edit
    to the report reruns compare alone, and one to the curve's fit no training run."""
    text = (ROOT / "dvc.yaml").read_text()
    assert rewritten(text) == text, "dvc.yaml's code deps are not its imports: python -m bakeoff.run.deps --write"
    deps = stage_deps()
    for stage, (_, listed) in deps.items():
        if stage != "compare":
            assert not any(d.startswith("src/bakeoff/report") for d in listed), stage
        if stage.startswith(("train", "tune")):
            assert "src/bakeoff/decide" not in listed and "src/bakeoff/decide/curve.py" not in listed, stage


def test_the_deps_writer_puts_a_missing_module_back_and_drops_an_unused_one(tmp_path):
    text = (ROOT / "dvc.yaml").read_text()
    broken = text.replace("src/bakeoff/core/threads.py]", "src/bakeoff/run/clock.py]", 1)
    assert broken != text and rewritten(broken) == text


def test_the_deps_check_catches_a_missing_module(tmp_path):
    # the check above, on a stage that imports through two levels and a function-local import
    files = closure(ROOT / "stages" / "compare.py")
    assert LIB / "decide" / "verdict.py" in files and LIB / "core" / "scoring.py" in files  # verdict → scoring
    assert LIB / "core" / "models.py" in files  # sizing.calibration imports it inside a function
    assert LIB / "report" / "__init__.py" in files and LIB / "report" / "plots.py" in files
    assert LIB / "train" / "trainer.py" not in files  # compare never trains


def test_a_stage_depends_on_what_it_can_change_and_no_more():
    """The model and data stages read params through the schema, which reads each technique's options alone: an edit
    to how DPO (or any technique) trains does not rerun them. Real inputs come first, code after."""
    deps = stage_deps()
    for stage in ("model", "data"):
        _, listed = deps[stage]
        covered = [ROOT / d for d in listed]
        for trainer_file in ("train/techniques/dpo.py", "train/trainer.py", "train/techniques/lora.py"):
            f = LIB / trainer_file
            assert not any(f == d or d in f.parents for d in covered), f"dvc.yaml: {stage} depends on {trainer_file}"
    for stage, (_, listed) in deps.items():
        code = [i for i, d in enumerate(listed) if d.startswith(("src/", "stages/"))]
        assert code == list(range(code[0], len(listed))), f"dvc.yaml: {stage} lists an input after its code"
    # an edit to the report, the curve's fit or the evidence reruns `compare` alone, no training
    for edited in (
        "report/curve.py",
        "report/tables.py",
        "report/verdict.py",
        "decide/curve.py",
        "decide/data_value.py",
        "decide/evidence.py",
    ):
        f = LIB / edited
        rerun = [s for s, (_, listed) in deps.items() if any(f == ROOT / d or ROOT / d in f.parents for d in listed)]
        assert rerun == ["compare"], f"an edit to {edited} reruns {rerun}"


FLOOR_RULE = re.compile(r"May import (.*?)\.(?:\s|$)", re.DOTALL)


def allowed_imports() -> dict[str, tuple[set[str], set[str]]]:
    """Each folder's own ``__init__.py`` docstring says what it may import ("May import ``core`` and ``data``", a
    file such as ``train/options.py`` as an exception, "every room" for the commands on top): folder → (rooms,
    files)."""
    out = {}
    for init in sorted(LIB.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        said = " ".join(re.findall(r"(?:May import|may import) ([^.]*(?:\.py[^.]*)*)\.", doc))
        assert said, f"{init.relative_to(ROOT)}: its docstring does not say what the folder may import"
        names = set(re.findall(r"``([a-z_/]+(?:\.py)?)``", said))
        if "every room" in said:
            names |= {p.name for p in LIB.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
        rooms = {n for n in names if "/" not in n}
        files = {n for n in names if "/" in n}
        out[init.parent.name] = (rooms, files)
    return out


def test_each_folder_imports_only_what_its_docstring_allows():
    rules = allowed_imports()
    assert set(rules) == {p.name for p in LIB.iterdir() if (p / "__init__.py").exists()}
    broken = []
    for path in LIB.rglob("*.py"):
        rel = path.relative_to(LIB)
        if len(rel.parts) == 1:
            continue  # bakeoff/__init__.py: the package's own log filters
        room = rel.parts[0]
        rooms, files = rules[room]
        for name in imported(path):
            target = module_file(name)
            trel = target.relative_to(LIB)
            if len(trel.parts) == 1 or trel.parts[0] == room or docstring_only(target):
                continue
            if trel.parts[0] not in rooms and str(trel) not in files:
                broken.append(f"{rel} imports {name}")
    assert not broken, "imports a folder's docstring does not allow: " + "; ".join(sorted(broken))


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
                deps |= {
                    f"{node.module}.{a.name}" if module_file(f"{node.module}.{a.name}") else node.module
                    for a in node.names
                }
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
    code = (
        "import sys; from bakeoff.core.config import load_params; load_params('params.yaml'); "
        "import bakeoff.decide.verdict, bakeoff.core.scoring, bakeoff.decide.sizing, bakeoff.data.prompts; "
        "print('torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False", "the params schema or a pure module imports torch"


def test_library_files_and_functions_stay_readable():
    long_files = {
        str(p.relative_to(ROOT)): n for p in LIB.rglob("*.py") if (n := len(p.read_text().splitlines())) > 350
    }
    assert not long_files, f"library files over 350 lines: {long_files}"
    escapes = [
        str(p.relative_to(ROOT))
        for p in [*LIB.rglob("*.py"), *(ROOT / "stages").glob("*.py")]
        if "# long:" in p.read_text()
    ]
    assert not escapes, f"'# long:' escapes: {escapes}"
    long_functions = []
    for path in [*LIB.rglob("*.py"), *(ROOT / "stages").glob("*.py")]:
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
                long_functions.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long_functions, f"functions over 60 lines: {long_functions}"
    stages = {p.name: n for p in (ROOT / "stages").glob("*.py") if (n := _code_lines(p)) > 40}
    assert not stages, f"stages over 40 code lines (their logic belongs in the library): {stages}"


# signatures another library fixes: TRL's ChunkedLogProbFunction.apply, transformers' attention interface
FIXED_SIGNATURES = {"train/backends/trl_cpu.py:apply", "train/kernels.py:eager_fp32_attention"}


def over_six_parameters(root: Path) -> set[str]:
    """``folder/file.py:function`` for every function under ``root`` that takes more than 6 parameters (``self`` and
    ``cls`` not counted; ``*args`` and ``**kwargs`` each count one)."""
    found = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg)))]
                if len([n for n in names if n not in ("self", "cls")]) > 6:
                    found.add(f"{path.relative_to(root)}:{node.name}")
    return found


def test_no_new_function_takes_more_than_six_parameters(tmp_path):
    found = over_six_parameters(LIB) - FIXED_SIGNATURES
    assert not found, f"over 6 parameters (pass typed settings instead, as ``train(Job, rows, ...)`` does): {found}"
    # the count itself: a seventh parameter is caught, six are not
    (tmp_path / "m.py").write_text(
        "def ok(a, b, c, d, e, f): ...\nclass C:\n    def m(self, a, b, c, d, e, *f): ...\n"
        "def many(a, b, c, d, e, f, *, g=1): ...\ndef kw(a, b, c, d, e, f, **k): ...\n"
    )
    assert over_six_parameters(tmp_path) == {"m.py:many", "m.py:kw"}


# codes that records on disk and their readers already hold in words (a curve arm's status, the verdict's decision)
CODES = {"too few points", "prompting is enough"}


def sentences(path: Path) -> list[str]:
    """String literals and f-strings of three or more words or with Markdown (a backtick, bold) in ``path``, outside
    docstrings, raised errors, console lines (``print``) and ``CODES``."""
    tree = ast.parse(path.read_text())
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            skip.add(id(first.value))
        printed = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
        inner = (
            node.exc if isinstance(node, ast.Raise) else node if isinstance(node, ast.JoinedStr) or printed else None
        )
        if inner is not None:
            skip |= {id(sub) for sub in ast.walk(inner) if sub is not node}
    found = []
    for node in ast.walk(tree):
        if id(node) in skip or not (
            isinstance(node, ast.JoinedStr) or isinstance(node, ast.Constant) and isinstance(node.value, str)
        ):
            continue
        parts = node.values if isinstance(node, ast.JoinedStr) else [node]
        text = "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}" for v in parts)
        words = len(re.findall(r"[A-Za-z]{2,}", text)) >= 3 and " " in text.strip() and text not in CODES
        if words or "`" in text or "**" in text:  # a sentence, or Markdown
            found.append(text)
    return found


def test_decide_builds_no_sentence(tmp_path):
    """decide/ computes and report/ words it: a fact leaves decide as a figure or a code, and the report's words for
    it live in report/ (``bakeoff.report.verdict``, ``.curve``, ``.sizing``, ``.evidence``, ``.tables``)."""
    found = {str(p.relative_to(LIB)): s for p in sorted((LIB / "decide").glob("*.py")) if (s := sentences(p))}
    assert not found, f"sentences built in decide/ (word them in report/): {found}"
    (tmp_path / "m.py").write_text(
        '"""A docstring of words."""\ndef f(x):\n    """Its own words."""\n'
        '    if x:\n        raise ValueError(f"an error says {x} in words")\n'
        '    print(f"[stage] a console line about {x}")\n'
        '    return {"key": "a_code", "why": f"measured on {x} here", "ok": "two words",\n'
        '            "decision": "prompting is enough", "md": f"`{x}`"}\n'
    )
    assert sentences(tmp_path / "m.py") == ["measured on {} here", "`{}`"]


def test_no_class_is_built_inside_a_function():
    """A class that needs a library imported late (transformers, TRL, lm-eval) lives at the top of a module that is
    itself imported late (``train/callbacks.py``, ``train/backends/trl_dpo.py``), not inside a function."""
    built = [
        f"{path.relative_to(LIB)}:{fn.name} builds {c.name}"
        for path in LIB.rglob("*.py")
        for fn in ast.walk(ast.parse(path.read_text()))
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
        for c in ast.walk(fn)
        if isinstance(c, ast.ClassDef)
    ]
    assert not built, f"classes built inside functions: {built}"


def test_the_report_reads_no_record_itself():
    """report/ renders from the ``Decision`` it is given (``Decision.searches``, ``.evaluations``, ``.records``);
    only the champion's packaging reads a prompting run's prompt, to ship it beside the model."""
    readers = sorted(
        str(p.relative_to(LIB))
        for p in (LIB / "report").glob("*.py")
        if re.search(r"runs\.read_json|read_json\(runs\.|read_run\(|read_search\(", p.read_text())
    )
    assert readers == ["report/champion.py"], f"report files that read records themselves: {readers}"


# a technique's name written elsewhere in the library, and why: the quick look trains the LoRA arm; a saved model
# that is no adapter is a "full" checkpoint (export's kind, not the technique)
NAMED_ELSEWHERE = {"lora": {"run/quick.py"}, "full": {"train/techniques/base.py"}}


def test_a_technique_lives_in_its_folder_and_its_settings():
    """Adding a technique touches three files: its training code (``train/techniques/<name>.py``), the registry
    beside it (``train/techniques/__init__.py``) and its settings (``core/techniques.py``: options, checks and
    ``FACTS``, which every other room reads instead of the technique's name)."""
    from bakeoff.core.techniques import FACTS, OPTIONS
    from bakeoff.train.techniques import technique_names

    assert set(FACTS) == set(OPTIONS) == set(technique_names())
    named: dict[str, set[str]] = {t: set() for t in FACTS}
    for path in LIB.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in named:
                named[node.value].add(str(path.relative_to(LIB)))
    for t, files in named.items():
        assert files == {"core/techniques.py", f"train/techniques/{t}.py", *NAMED_ELSEWHERE.get(t, ())}, (
            f"{t} is named in {sorted(files)}: read bakeoff.core.techniques.FACTS there instead"
        )


def _code_lines(path: Path) -> int:
    """Lines of a file that are neither blank, comments nor docstrings."""
    tree = ast.parse(path.read_text())
    doc = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and ast.get_docstring(node):
            d = node.body[0]
            doc |= set(range(d.lineno, d.end_lineno + 1))
    return sum(
        1
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and i not in doc
    )


# values a user must replace rather than defaults: the shipped task's files and the example price and card catalog
NOT_DEFAULTS = {
    "task.name",
    "task.train",
    "task.prefs",
    "cost.usd_per_1k_prompt_tokens",
    "cost.train_tokens",
    "sizing.target",
    "sizing.targets",
    "sizing.gpus",
    "tune.share",
    # the shipped project searches (4 trials per arm); a params.yaml without `tune.trials` does not
    "tune.trials",
}


def test_dataclass_defaults_are_params_yaml():
    from bakeoff.core import sections

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    classes = {
        "model": sections.ModelConfig,
        "task": sections.TaskConfig,
        "train_defaults": sections.TrainConfig,
        "eval": sections.EvalConfig,
        "tracking": sections.TrackingConfig,
        "verdict": sections.VerdictConfig,
        "cost": sections.CostConfig,
        "sizing": sections.SizingConfig,
        "tune": sections.TuneConfig,
    }
    differ, undocumented = [], []
    for section, cls in classes.items():
        for f in fields(cls):
            key = f"{section}.{f.name}"
            if f.name not in params[section]:
                undocumented.append(key)
                continue
            default = f.default if f.default is not MISSING else f.default_factory()
            if key not in NOT_DEFAULTS and default != params[section][f.name]:
                differ.append(f"{key}: {default!r} in sections.py, {params[section][f.name]!r} in params.yaml")
    assert not differ, "defaults written twice disagree: " + "; ".join(differ)
    assert not undocumented, f"knobs params.yaml does not show: {undocumented}"


def test_old_sizing_names_still_work_with_a_warning(tmp_path):
    text = (ROOT / "params.yaml").read_text().replace("target_seq_len:", "seq_len:")
    (tmp_path / "params.yaml").write_text(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.strip().startswith("seq_len:"))
    code = "from bakeoff.core.config import load_params; print(load_params('params.yaml').sizing.target_seq_len)"
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "1024"
    assert f"params.yaml:{line}: sizing.seq_len is deprecated, rename it sizing.target_seq_len" in r.stderr


def test_the_architecture_page_lists_every_folder_and_file_of_the_library():
    page = (ROOT / "docs" / "architecture.md").read_text()
    tree = page[page.index("```\nsrc/bakeoff/") + 4 : page.rindex("```")]
    listed, stack = set(), []
    for line in tree.splitlines()[1:]:
        indent = (len(line) - len(line.lstrip())) // 2
        entry = line.split()[0]
        stack[indent - 1 :] = [entry.rstrip("/")]
        listed.add("/".join(stack) + ("/" if entry.endswith("/") else ""))
    real = {str(p.relative_to(LIB)) for p in LIB.rglob("*.py") if not docstring_only(p)}
    real |= {str(p.relative_to(LIB)) + "/" for p in LIB.rglob("*") if p.is_dir() and (p / "__init__.py").exists()}
    # techniques/ and backends/ are one line each: their files are named on it
    folded = {d for d in listed if d.endswith("/") and not any(x != d and x.startswith(d) for x in listed)}
    real = {r for r in real if not any(r.startswith(d) and r != d for d in folded)}
    assert listed == real, (
        f"docs/architecture.md lists {sorted(listed - real)} that the tree lacks, and omits {sorted(real - listed)}"
    )
    for d in folded:
        line = next(x for x in tree.splitlines() if x.strip().startswith(d.rsplit("/", 2)[-2] + "/"))
        names = {p.name for p in (LIB / d).glob("*.py") if p.name != "__init__.py"}
        assert all(n in line for n in names), f"docs/architecture.md: {d} does not name {sorted(names)}"


PATH_IN_DOCS = re.compile(r"(?<![\w./-])((?:src|stages|tests|benchmarks|docs|configs)/[\w./-]*[\w/])")
MODULE_IN_DOCS = re.compile(r"python -m (bakeoff(?:\.\w+)+)")


def test_no_path_in_the_readme_or_docs_points_at_a_file_that_does_not_exist():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "README.md"]
    stale = []
    for page in [p for p in pages if p.exists()]:
        text = page.read_text()
        for m in PATH_IN_DOCS.finditer(text):
            # a DVC-tracked file (its .dvc beside it) exists once DVC or its maker restores it
            if not (ROOT / m.group(1)).exists() and not (ROOT / f"{m.group(1)}.dvc").exists():
                stale.append(f"{page.relative_to(ROOT)}: {m.group(1)}")
        for m in MODULE_IN_DOCS.finditer(text):
            if module_file(m.group(1)) is None:
                stale.append(f"{page.relative_to(ROOT)}: python -m {m.group(1)}")
    assert not stale, "paths that do not exist: " + "; ".join(stale)


def test_params_yaml_teaches_in_one_line_a_key_and_docs_params_holds_the_rest():
    lines = (ROOT / "params.yaml").read_text().splitlines()
    continued = [
        i
        for i, line in enumerate(lines[1:], 2)
        if re.match(r"^\s{20,}#", line) and not lines[i - 2].lstrip().startswith("#")
    ]
    assert not continued, f"params.yaml: a comment continued onto its own line at lines {continued} (docs/params.md)"
    assert all(len(line) <= 120 for line in lines), "params.yaml: a line over 120 characters"
    documented = set(re.findall(r'<a id="([\w.]+)"></a>', (ROOT / "docs" / "params.md").read_text()))
    params = yaml.safe_load("\n".join(lines))
    keys = {f"{s}.{k}" for s, body in params.items() if isinstance(body, dict) for k in body}
    for k in ("model.dtype", "task.metric", "train_defaults.early_stopping_patience", "tune.pruner", "eval.lm_eval"):
        assert k in documented, f"docs/params.md has no section for {k}"
    extra = documented - keys - {"baselines.big", "baselines.rag", "variants.lora_rag", "variants.raft"}  # commented
    assert not extra, f"docs/params.md documents keys params.yaml lacks: {extra}"


def test_every_bakeoff_module_and_subcommand_the_makefile_runs_exists():
    """`make mlflow-ui` once imported names from the package top after they moved: every ``-m bakeoff.x`` in the
    Makefile names a module under src/, and every ``bin/bakeoff <sub>`` a subcommand of the installed command."""
    from bakeoff.run.cli import _parser

    text = (ROOT / "Makefile").read_text()
    runs, subs = re.findall(r"-m (bakeoff(?:\.\w+)+)", text), re.findall(r"bin/bakeoff (\w+)", text)
    assert runs and subs, "the Makefile's bakeoff commands were not found: the pattern is stale"
    for name in runs:
        assert module_file(name), f"Makefile: `-m {name}`: no such module under src/"
    known = _parser()._subparsers._group_actions[0].choices
    assert {"repro", "quick", "ui"} <= set(subs) <= set(known), f"Makefile: bakeoff {set(subs) - set(known)}"


def test_every_committed_search_record_loads_as_a_typed_search_and_keeps_every_key():
    """Every tuned.json the committed run wrote (the git-tracked copies in reports/records/; runs/ itself is DVC's)
    loads as a ``Search``: every key a field or kept in ``extra``, none lost; a missing record is an empty search."""
    import json

    from bakeoff.core.records import Search, Trial

    committed = sorted((ROOT / "reports" / "records").glob("*/tuned.json"))
    assert committed
    for path in committed:
        raw = json.loads(path.read_text())
        s = Search.from_json(raw)
        named = {f for f in Search.__dataclass_fields__ if f != "extra"}
        assert set(raw) == (set(raw) & named) | set(s.extra), path
        assert s.values == raw.get("values", {}) and len(s.trials) == len(raw.get("trials") or [])
        for t, r in zip(s.trials, raw.get("trials") or []):
            assert (t.number, t.value, t.tokens_seen) == (r.get("number"), r.get("value"), r.get("tokens_seen"))
            assert set(r) == ({f for f in Trial.__dataclass_fields__ if f != "extra"} & set(r)) | set(t.extra)
        for w, r in zip(s.widened, raw.get("widened") or []):
            assert (w.param, w.from_, w.to) == (r["param"], r["from"], r["to"])
    empty = Search.from_json(None)
    assert empty == Search() and not empty.searched and not empty.stopped and empty.spent() == []
    assert Search.from_json({"status": "oom", "trials": []}).stopped
    adopted = Search.from_json(
        {"trials": [{"number": 0, "tokens_seen": 5}, {"number": 1, "tokens_seen": 7}], "adopt": {"trial": 0}}
    )
    assert [t.number for t in adopted.spent()] == [1]


def test_every_params_argument_is_typed_params():
    """A function that takes the run's settings says so (``params: Params``, ``bakeoff.core.sections``): a newcomer
    reads what it is without tracing the call. One exception, because ``core/sections.py`` imports its module:
    ``core/spaces.py``'s ``as_run``."""
    untyped = []
    for path in LIB.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                untyped += [
                    f"{path.relative_to(LIB)}:{node.name}"
                    for a in node.args.args + node.args.kwonlyargs
                    if a.arg == "params" and a.annotation is None
                ]
    assert untyped == ["core/spaces.py:as_run"], f"untyped params: {untyped}"

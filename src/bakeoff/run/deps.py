"""Each stage's code deps in dvc.yaml, from the import graph: the library files its script loads, a folder where it
loads every file of it, so an edit reruns the stages that load what it touched and no other.

    python -m bakeoff.run.deps            # every stage whose deps differ from its imports; exit 1 if any
    python -m bakeoff.run.deps --write    # dvc.yaml's deps rewritten: real inputs first, then the script and its code

Reads the sources only (``ast``): nothing is imported, no torch. ``tests/test_layout.py`` fails when dvc.yaml is not
what ``--write`` writes.
"""

from __future__ import annotations

import argparse
import ast
import functools
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src"
LIB = SRC / "bakeoff"
WIDTH = 120


def module_file(name: str) -> Path | None:
    """``bakeoff.a.b`` → src/bakeoff/a/b.py or src/bakeoff/a/b/__init__.py (None: not a bakeoff module)."""
    base = SRC.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.exists():
            return path
    return None


@functools.cache
def imported(path: Path) -> frozenset[str]:
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
    return frozenset(out)


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


@functools.cache
def docstring_only(path: Path) -> bool:
    """A package's ``__init__.py`` that holds only its docstring: importing it changes nothing a stage computes."""
    body = ast.parse(path.read_text()).body
    return path.name == "__init__.py" and all(
        isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body
    )


def code_files(folder: Path) -> set[Path]:
    return {f for f in folder.rglob("*.py") if "__pycache__" not in f.parts and not docstring_only(f)}


def cover(used: set[Path], folder: Path = LIB) -> list[Path]:
    """The fewest paths that hold exactly the ``used`` files of ``folder``: the folder itself where every code file
    under it is used, else its used files and the covers of its subfolders."""
    mine = code_files(folder)
    if mine and mine <= used:
        return [folder]
    out = [f for f in sorted(folder.glob("*.py")) if f in used]
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()):
        if code_files(sub) & used:
            out += cover(used, sub)
    return out


def code_deps(script: Path) -> list[str]:
    """A stage's code deps: its script, then the library paths that cover what it loads (relative to the root)."""
    used = {f for f in closure(script) if not docstring_only(f)}
    return [str(p.relative_to(ROOT)) for p in [script, *cover(used)]]


def stages(spec: dict) -> dict[str, tuple[Path, list[str]]]:
    """dvc.yaml's stages in order: name → (the script its cmd runs, its deps as written)."""
    out = {}
    for name, stage in spec["stages"].items():
        body = stage.get("do", stage)
        script = next(w for w in body["cmd"].split() if w.startswith("stages/"))
        out[name] = (ROOT / script, list(body["deps"]))
    return out


def wanted(deps: list[str], script: Path) -> list[str]:
    """``deps`` with its code replaced by what the script loads: real inputs first, as written, then the code."""
    return [d for d in deps if not d.startswith(("src/", "stages/"))] + code_deps(script)


def flow(items: list[str], indent: int) -> str:
    """``[a, b, ...]`` as dvc.yaml writes it: wrapped at WIDTH, continuation lines under the first item."""
    quoted = [f'"{x}"' if "${" in x else x for x in items]
    lines, line = [], "["
    for i, word in enumerate(quoted):
        piece = word + ("]" if i == len(quoted) - 1 else ",")
        if len(line) > 1 and indent + len(line) + 1 + len(piece) > WIDTH:
            lines.append(line)
            line = " " * (indent + 1) + piece
            continue
        line += ("" if line.endswith("[") else " ") + piece
    lines.append(line)
    return "\n".join(lines)


DEPS = re.compile(r"^( *)deps: \[.*?\]", re.MULTILINE | re.DOTALL)
STAGE = re.compile(r"^  ([A-Za-z0-9_]+):\s*$", re.MULTILINE)


def rewritten(text: str) -> str:
    """dvc.yaml's text with every stage's deps as ``wanted`` says (comments and everything else kept). A stage that
    takes another's body by a YAML alias (``do: *evaluate``) shares its deps, written once there."""
    found = stages(yaml.safe_load(text))
    heads = [(m.start(), m.group(1)) for m in STAGE.finditer(text)]
    out, at = [], 0
    for m in DEPS.finditer(text):
        name = [n for start, n in heads if start < m.start()][-1]
        if name not in found:
            raise SystemExit(f"dvc.yaml: a deps list under {name!r}, which is not a stage")
        script, deps = found[name]
        head = f"{m.group(1)}deps: "
        out += [text[at : m.start()], head + flow(wanted(deps, script), len(head))]
        at = m.end()
    return "".join(out) + text[at:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite dvc.yaml's deps from the import graph")
    ap.add_argument("--file", default=str(ROOT / "dvc.yaml"))
    args = ap.parse_args()
    path = Path(args.file)
    text = path.read_text()
    new = rewritten(text)
    if args.write:
        path.write_text(new)
        print(f"{path}: deps {'rewritten' if new != text else 'already as the imports say'}")
        return
    now, then = stages(yaml.safe_load(text)), stages(yaml.safe_load(new))
    stale = [n for n in now if now[n][1] != then[n][1]]
    for n in stale:
        print(f"{n}: deps {now[n][1]} → {then[n][1]}")
    if stale:
        sys.exit(f"{len(stale)} stages' deps are not their imports: python -m bakeoff.run.deps --write")
    print("every stage's deps are its imports")


if __name__ == "__main__":
    main()

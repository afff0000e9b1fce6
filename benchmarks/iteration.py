"""Iteration speed: a no-op `dvc repro` when everything is cached, and what reruns after one edit.

    python benchmarks/iteration.py                      # after a complete `dvc repro`
    python benchmarks/iteration.py --edit variants.qlora.double_quant=false

1. Times `dvc repro` with nothing changed (target ≤ 15 s) and checks that no stage ran.
2. Changes one value of one variant in params.yaml (comments kept), asks `dvc repro --dry` which stages changed,
   adds every stage downstream of them in DVC's own stage graph (a retrained model changes what depends on it;
   a dry run cannot know that yet), restores params.yaml byte for byte, and asserts the list is exactly that
   variant's train and evaluate stages (and those of variants derived from it) plus `compare`.
Writes reports/bench/iteration.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from targets import Targets
from targets import add_argument as add_target_argument


def dvc(*args: str) -> tuple[str, float]:
    here = Path(sys.executable).parent / "dvc"  # the environment's dvc, whether or not it is on PATH
    t0 = time.perf_counter()
    r = subprocess.run(
        [str(here) if here.exists() else "dvc", *args], cwd=ROOT, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"dvc {' '.join(args)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout + r.stderr, wall


def ran(output: str) -> list[str]:
    return sorted(line.split("'")[1] for line in output.splitlines() if line.startswith("Running stage"))


def downstream(stages: list[str]) -> set[str]:
    """Every stage that depends, directly or not, on one of ``stages`` (DVC's graph: stage → its deps)."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(ROOT)) as repo:
        graph = repo.index.graph
        by_name = {s.addressing: s for s in graph.nodes}
        return {a.addressing for name in stages if name in by_name for a in nx.ancestors(graph, by_name[name])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--edit", default="variants.qlora.double_quant=false", help="dotted.key=value to change")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "iteration.json"))
    add_target_argument(ap)
    args = ap.parse_args()
    targets = Targets.from_args(args.target)
    from ruamel.yaml import YAML

    from bakeoff.core.config import load_params

    out, noop_s = dvc("repro")
    noop_ran = ran(out)
    if noop_ran:  # a stale workspace is a finding, not something to time away
        print(f"`dvc repro` was not a no-op: it ran {', '.join(noop_ran)} (run `make repro` first)", flush=True)

    key, value = args.edit.split("=", 1)
    path = key.split(".")
    params_file = ROOT / "params.yaml"
    original = params_file.read_bytes()
    yaml = YAML()
    doc = yaml.load(original)
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = yaml.load(value)
    try:
        with open(params_file, "w") as f:
            yaml.dump(doc, f)
        dry, _ = dvc("repro", "--dry")
    finally:
        params_file.write_bytes(original)
    would = sorted(set(ran(dry)) | downstream(ran(dry)))
    name = path[1]
    params = load_params(params_file)
    children = [n for n, v in params.variants.items() if v.parent == name]
    expect = sorted(
        [f"train@{name}", f"evaluate@{name}", "compare"]
        + [f"train_from@{c}" for c in children]
        + [f"evaluate_from@{c}" for c in children]
    )
    result = {
        "noop_repro_s": round(noop_s, 2),
        "noop_stages_run": noop_ran,
        "edit": args.edit,
        "stages_rerun": would,
        "expected": expect,
        "exact": would == expect,
    }
    o = Path(args.out)
    o.parent.mkdir(parents=True, exist_ok=True)
    o.write_text(json.dumps(result, indent=2))
    print("\n## Iteration\n")
    print(f"| measure | value | target |\n|---|---|---|\n| no-op `dvc repro` | {noop_s:.1f} s | ≤ 15 s |")
    print(f"| stages rerun after `{args.edit}` | {', '.join(would)} | exactly {', '.join(expect)} |")
    print(f"\nwrote {o}")
    targets.equal("noop_stages_run", len(noop_ran), 0)
    targets.at_most("noop_repro_s", round(noop_s, 2), 15.0)
    targets.equal("stages_rerun_exact", would == expect, True)
    targets.exit()
    assert not noop_ran, f"a no-op repro ran {noop_ran}"
    assert would == expect, f"after {args.edit}: {would} would run, expected exactly {expect}"


if __name__ == "__main__":
    main()

"""The shipped CLINC150 task (data/raw/clinc150: 150 intents) through the pipeline at the current code, against the
hand-written reference (benchmarks/reference_clinc150.py).

    .venv/bin/python benchmarks/clinc150.py                # about 40 min on 2 CPU cores; reports/bench/clinc150.json
    .venv/bin/python benchmarks/clinc150.py --reference    # the reference first (about 25 min more)

A workspace of its own (bench/clinc150/, ignored by git; DVC's cache shared with the project) with the project's
dvc.yaml, stages and code and params.yaml's settings but the task below: the README's CLINC150 params (your
baselines, one LoRA, 300 steps of 8 rows, the searches as params.yaml sets them, no derived variants) and the export
without its served re-score. `python -m bakeoff.run.clock` runs it (`dvc repro` with a clock). The record names the
commit and the machine. Target: the pipeline's LoRA within 3 points of the reference's test accuracy, or above it
(when reports/bench/reference_clinc150.json exists); exits 1 on a miss.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "src"))
from targets import Targets
from targets import add_argument as add_target_argument

DEST = ROOT / "bench" / "clinc150"
TASK = {
    "name": "clinc150",
    "train": "data/raw/clinc150/train.csv",
    "test": "data/raw/clinc150/test.csv",
    "prefs": None,
    "columns": {"prompt": "text", "completion": "intent"},
    "labels": "auto",
    "metric": "accuracy",
    "max_new_tokens": "auto",
}
LORA = {"technique": "lora", "r": 16, "alpha": 32, "dropout": 0.0, "targets": "all-linear"}


def workspace(dest: Path = DEST) -> Path:
    """bench/clinc150/ with the project's pipeline and code and the CLINC150 params."""
    import yaml

    from bakeoff.run.quick import _copy

    dest.mkdir(parents=True, exist_ok=True)
    for part in ("dvc.yaml", "stages", "src", "data"):
        _copy(ROOT / part, dest / part)
    (dest / "reports" / "curve").mkdir(parents=True, exist_ok=True)  # compare reads the curve's points there
    (dest / "reports" / "curve" / ".gitkeep").touch()
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["task"] = {**raw["task"], **TASK}
    raw["train_defaults"].update(max_steps=300, effective_batch=8, micro_batch=8)
    raw["variants"], raw["derived"] = {"lora": dict(LORA)}, {}
    raw["tune"] = {**raw["tune"], "share": {}}
    raw["export"] = {**raw["export"], "serve": False, "variants": None}
    raw["tracking"] = {**(raw.get("tracking") or {}), "experiment": "clinc150 (benchmark)"}
    (dest / "params.yaml").write_text(
        "# benchmarks/clinc150.py wrote this from ../../params.yaml\n" + yaml.safe_dump(raw, sort_keys=False)
    )
    if not (dest / ".dvc").exists():
        subprocess.run(["dvc", "init", "--no-scm", "--quiet"], cwd=dest, check=True)
    if (ROOT / ".dvc").exists():
        subprocess.run(["dvc", "config", "--local", "cache.dir", str(ROOT / ".dvc" / "cache")], cwd=dest, check=True)
    return dest


def record(dest: Path, reference: dict | None) -> dict:
    """What the run found, from its own records: each arm's test figures, the search, the verdict."""

    def read(*p):
        f = dest.joinpath(*p)
        return json.loads(f.read_text()) if f.exists() else {}

    from bakeoff.core.runs import device_name, git_commit

    ev, tr, tuned = (
        read("runs", "lora", "eval.json"),
        read("runs", "lora", "train.json"),
        read("runs", "lora", "tuned.json"),
    )
    m, t = ev.get("metrics") or {}, tr.get("metrics") or {}
    out = {
        "what": "the shipped CLINC150 task through `python -m bakeoff.run.clock` (benchmarks/clinc150.py)",
        "code": git_commit(),
        "machine": device_name(),
        "clock": read("reports", "clock.json").get("runs", [{}])[-1:],
        "lora": {
            "status": ev.get("status"),
            "test_accuracy": m.get("quality"),
            "val_accuracy": m.get("val_quality"),
            "chosen": tuned.get("values"),
            "beat_recipe": tuned.get("beat_recipe"),
            "widened": tuned.get("widened"),
            "trials": [
                {k: x.get(k) for k in ("number", "values", "state", "value", "tokens_seen", "wall_s")}
                for x in tuned.get("trials") or []
            ],
            "adopted_from_trial": t.get("adopted_from_trial"),
            "train_s": t.get("train_wall_s"),
            "convergence": t.get("convergence"),
        },
    }
    for name in ("zero_shot", "prompt_search"):
        b = read("runs", name, "eval.json").get("metrics") or {}
        out[name] = {
            "test_generation": b.get("quality"),
            "test_label_choice": b.get("quality_label_choice"),
            "chosen": read("runs", name, "tuned.json").get("values"),
        }
    metrics = read("reports", "metrics.json")
    out["verdict"] = metrics.get("verdict") or {}
    out["reference"] = reference
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reference", action="store_true", help="run benchmarks/reference_clinc150.py first")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "clinc150.json"))
    add_target_argument(ap)
    args = ap.parse_args()
    targets = Targets.from_args(args.target)
    ref_path = ROOT / "reports" / "bench" / "reference_clinc150.json"
    if args.reference:
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "reference_clinc150.py")], check=True)
    dest = workspace()
    rc = subprocess.run([sys.executable, "-m", "bakeoff.run.clock"], cwd=dest, check=False).returncode
    reference = json.loads(ref_path.read_text()) if ref_path.exists() else None
    rec = record(dest, reference)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    got = rec["lora"]["test_accuracy"]
    print(
        f"clinc150: lora {got}, prompt_search {rec['prompt_search']}, verdict {rec['verdict'].get('decision')}"
        + (f"; the reference {reference['test_accuracy']}" if reference else "; no reference run")
    )
    targets.equal("pipeline_ran", rc, 0)
    if reference and got is not None:
        targets.at_least("lora_minus_reference", round(got - reference["test_accuracy"], 4), -0.03)
    rec["targets"] = targets.results
    Path(args.out).write_text(json.dumps(rec, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")
    targets.exit()


if __name__ == "__main__":
    main()

"""Shot selection on the shipped 77-label banking task (data/raw/intents.jsonl): k shots chosen by TF-IDF
(``nearest``), by embeddings (``nearest_dense``) and by both fused (``hybrid``), each a baseline stage of the
pipeline at the current code, scored on the same test items and compared paired.

    .venv/bin/python benchmarks/retrieval_shots.py              # 3 shots; about 15 min on 2 CPU cores
    .venv/bin/python benchmarks/retrieval_shots.py --shots 8

A workspace of its own (bench/retrieval_shots/, ignored by git) with the project's dvc.yaml, stages and code, the
task docs/tasks.md gives for intents, no search (the shots as written), and only the baseline stages reproduced.
Each figure is the test split's accuracy, by free generation and by label choice (the most likely of the 77 labels);
a difference is paired over the same items (bootstrap 95% interval, exact McNemar p). Writes
reports/bench/retrieval_shots.json with the commit and the machine. Target: dense shots not below TF-IDF's by label
choice (the interval's upper end ≥ 0); exits 1 on a miss.
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

DEST = ROOT / "bench" / "retrieval_shots"
TASK = {
    "name": "intents",
    "train": "data/raw/intents.jsonl",
    "prefs": None,
    "metric": "accuracy",
    "labels": "data/raw/intents_labels.txt",
    "test_size": 150,
    "max_new_tokens": "auto",
}
SELECTIONS = {"tfidf": "nearest", "dense": "nearest_dense", "hybrid": "hybrid"}


def workspace(shots: int, dest: Path = DEST) -> Path:
    import yaml

    from bakeoff.run.quick import _copy

    dest.mkdir(parents=True, exist_ok=True)
    for part in ("dvc.yaml", "stages", "src", "data"):
        _copy(ROOT / part, dest / part)
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["task"] = {**raw["task"], **TASK}
    raw["baselines"] = {name: {"shots": shots, "selection": sel} for name, sel in SELECTIONS.items()}
    raw["variants"] = {"lora": {"technique": "lora"}}
    raw["derived"] = {}
    raw["tune"] = {**raw["tune"], "trials": 0, "share": {}}
    raw["eval"] = {**raw["eval"], "lm_eval": "off", "probe": False, "latency_requests": 0}
    raw["curve"] = {**raw["curve"], "arms": ["lora"], "fractions": [0.5]}
    raw["tracking"] = {**(raw.get("tracking") or {}), "experiment": "retrieval shots (benchmark)"}
    (dest / "params.yaml").write_text(
        "# benchmarks/retrieval_shots.py wrote this from ../../params.yaml\n" + yaml.safe_dump(raw, sort_keys=False)
    )
    if not (dest / ".dvc").exists():
        subprocess.run(["dvc", "init", "--no-scm", "--quiet"], cwd=dest, check=True)
    return dest


def rows(dest: Path, name: str) -> list[dict]:
    """An arm's test predictions, by item."""
    lines = (dest / "runs" / name / "predictions.jsonl").read_text().splitlines()
    return sorted((json.loads(x) for x in lines if x.strip()), key=lambda r: r["id"])


def paired(dest: Path, name: str, other: str, key: str) -> dict:
    """``name`` against ``other`` on the same test items (``key``: each row's primary-metric item, ``score``, or its
    label choice's, ``choice_score``): the difference, its bootstrap 95% interval, the exact McNemar p."""
    from bakeoff.decide.statistics import bootstrap_ci, mcnemar_exact

    a, b = ([float(r[key]) for r in rows(dest, n)] for n in (name, other))
    if not a or len(a) != len(b):
        return {"difference": None, "ci95": [None, None], "why": f"{len(a)} items against {len(b)}"}
    diff, lo, hi = bootstrap_ci(a, baseline=b)
    only_a, only_b = sum(x > y for x, y in zip(a, b)), sum(y > x for x, y in zip(a, b))
    return {
        "difference": round(diff, 4),
        "ci95": [round(lo, 4), round(hi, 4)],
        "mcnemar_p": round(mcnemar_exact(only_a, only_b), 4),
        f"only_{name}_right": only_a,
        f"only_{other}_right": only_b,
    }


def compare(dest: Path) -> dict:
    """Each selection's test accuracy and each against TF-IDF's, paired over the same items."""
    from bakeoff.core.runs import device_name, git_commit

    out = {"what": __doc__.split("\n")[0], "code": git_commit(), "machine": device_name(), "arms": {}}
    for name, selection in SELECTIONS.items():
        ev = json.loads((dest / "runs" / name / "eval.json").read_text())
        out["arms"][name] = {
            "selection": selection,
            "status": ev.get("status"),
            **{k: (ev.get("metrics") or {}).get(k) for k in ("quality", "quality_label_choice", "n_test")},
        }
        if name != "tfidf":
            for how, key in (("generation", "score"), ("label_choice", "choice_score")):
                out["arms"][name][f"{how}_minus_tfidf"] = paired(dest, name, "tfidf", key)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shots", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "retrieval_shots.json"))
    add_target_argument(ap)
    args = ap.parse_args()
    targets = Targets.from_args(args.target)
    dest = workspace(args.shots)
    stages = [f"baseline@{name}" for name in SELECTIONS]
    rc = subprocess.run(["dvc", "repro", "--quiet", *stages], cwd=dest, check=False).returncode
    targets.equal("baselines_ran", rc, 0)
    rec = {**compare(dest), "shots": args.shots} if rc == 0 else {"shots": args.shots}
    for name, arm in (rec.get("arms") or {}).items():
        print(
            f"{name:7s} {arm['selection']:14s} generation {arm['quality']}  label choice {arm['quality_label_choice']}"
            + "".join(
                f"  {how} vs tfidf {arm[f'{how}_minus_tfidf']['difference']:+.3f} "
                f"{arm[f'{how}_minus_tfidf']['ci95']} p={arm[f'{how}_minus_tfidf']['mcnemar_p']}"
                for how in ("generation", "label_choice")
                if f"{how}_minus_tfidf" in arm
            )
        )
    dense = (rec.get("arms") or {}).get("dense", {}).get("label_choice_minus_tfidf")
    if dense:
        targets.at_least("dense_label_choice_minus_tfidf_ci_high", dense["ci95"][1], 0.0)
    rec["targets"] = targets.results
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rec, indent=2, default=str) + "\n")
    print(f"wrote {args.out} ({rec.get('machine')}, {rec.get('code')})")
    targets.exit()


if __name__ == "__main__":
    main()

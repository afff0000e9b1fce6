"""The shipped knowledge task (data/raw/handbook.jsonl, its corpus data/raw/handbook/) through the pipeline at the
current code: zero-shot, the searched few-shot prompt (TF-IDF shots), a retrieval-augmented prompt (its passages and
their length searched on validation), LoRA, LoRA asked with passages at test time (lora_rag) and RAFT (raft: trained
on passages with distractors), with the verdict and the verdict among the four families.

    .venv/bin/python benchmarks/handbook.py     # about 30 min on 2 CPU cores; reports/bench/handbook.json

A workspace of its own (bench/handbook/, ignored by git) with the project's dvc.yaml, stages and code and
params.yaml's settings but the task below; `python -m bakeoff.run.clock` runs it. No curve, no export. The record
names the commit and the machine, each arm's test figures, the RAG arm's recall@k and its paired difference against
zero-shot and the searched prompt, and RAFT's against LoRA, LoRA + retrieval and RAG (bootstrap 95% interval, exact
McNemar p); recall@4 at each chunk size searched. Targets: RAG above zero-shot and the prompt (the interval's lower
end > 0), recall@k and recall@4 ≥ 0.8, and the winning family one that retrieves; exits 1 on a miss.
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
from retrieval_shots import paired
from targets import Targets
from targets import add_argument as add_target_argument

DEST = ROOT / "bench" / "handbook"
TASK = {
    "name": "handbook",
    "train": "data/raw/handbook.jsonl",
    "corpus": "data/raw/handbook",
    "prefs": None,
    "metric": "exact_match",
    "test_size": 48,
    "val_size": 24,
    "max_new_tokens": 16,
    "system_prompt": "Answer with the value only: a name, a time, a code word or a number.",
}
BASELINES = {
    "zero_shot": {"shots": 0},
    "prompt_search": {"shots": 3, "search": {"shots": [1, 3, 8], "selection": ["fixed", "nearest"]}},
    "rag": {
        "shots": 3,
        "selection": "nearest",
        "passages": 2,
        "search": {"passages": [1, 2, 4], "chunk_words": [20, 60, 120]},
    },
}
ASKED = {"passages": 2, "chunk_words": 60, "max_seq_len": 384}  # fine-tunes with retrieval: 2 passages of 60 words
ARMS = ("zero_shot", "prompt_search", "rag", "lora", "lora_rag", "raft")


def workspace(dest: Path = DEST) -> Path:
    import yaml

    from bakeoff.run.quick import _copy

    dest.mkdir(parents=True, exist_ok=True)
    for part in ("dvc.yaml", "stages", "src", "data"):
        _copy(ROOT / part, dest / part)
    (dest / "reports" / "curve").mkdir(parents=True, exist_ok=True)
    (dest / "reports" / "curve" / ".gitkeep").touch()
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["task"] = {**raw["task"], **TASK}
    raw["baselines"] = BASELINES
    lora = raw["variants"]["lora"]
    # lora_rag: LoRA on the plain prompts, asked with passages at test time; raft: trained on RAFT's rows (the gold
    # passage among distractors in 80% of them). Both take lora's searched values (tune.share): one search of LoRA.
    raw["variants"] = {"lora": lora, "lora_rag": {**lora, **ASKED}, "raft": {**lora, **ASKED, "raft": 0.8}}
    raw["derived"] = {}
    raw["tune"] = {**raw["tune"], "share": {"lora_rag": "lora", "raft": "lora"}}
    raw["curve"] = {**raw["curve"], "fractions": []}
    raw["export"] = {**raw["export"], "gguf": None, "serve": False}
    raw["eval"] = {**raw["eval"], "lm_eval": "off", "lm_eval_tasks": []}
    raw["tracking"] = {**(raw.get("tracking") or {}), "experiment": "handbook (benchmark)"}
    (dest / "params.yaml").write_text(
        "# benchmarks/handbook.py wrote this from ../../params.yaml\n" + yaml.safe_dump(raw, sort_keys=False)
    )
    if not (dest / ".dvc").exists():
        subprocess.run(["dvc", "init", "--no-scm", "--quiet"], cwd=dest, check=True)
    return dest


def record(dest: Path) -> dict:
    from bakeoff.core.runs import device_name, git_commit

    def read(*p):
        f = dest.joinpath(*p)
        return json.loads(f.read_text()) if f.exists() else {}

    out = {"what": __doc__.split("\n")[0], "code": git_commit(), "machine": device_name(), "arms": {}}
    for name in ARMS:
        ev = read("runs", name, "eval.json")
        m = ev.get("metrics") or {}
        keep = ("quality", "val_quality", "retrieval_recall", "retrieval_k", "prompt_tokens_per_request")
        out["arms"][name] = {
            "status": ev.get("status"),
            "chosen": read("runs", name, "tuned.json").get("values"),
            **{k: m[k] for k in keep if k in m},
        }
    for arm, others in (("rag", ("zero_shot", "prompt_search", "lora")), ("raft", ("lora", "lora_rag", "rag"))):
        if out["arms"][arm]["status"] == "ok":
            for other in (o for o in others if out["arms"][o]["status"] == "ok"):
                out["arms"][arm][f"minus_{other}"] = paired(dest, arm, other, "score")
    out["recall_at_4"] = recall_at(dest, 4, BASELINES["rag"]["search"]["chunk_words"])
    ran = [r for r in read("reports", "clock.json").get("runs", []) if r.get("stages_ran")]
    out["clock"] = [max(ran[-3:], key=lambda r: r["stages_ran"])] if ran else []  # the run that ran the arms
    metrics = read("reports", "metrics.json")
    out["verdict"], out["families"] = metrics.get("verdict") or {}, metrics.get("families") or {}
    return out


def recall_at(dest: Path, k: int, sizes: list[int]) -> dict:
    """recall@k of the test questions' passages (hybrid retrieval, as the RAG arm retrieves) at each chunk size."""
    from bakeoff.data.corpus import Passages, prepared, recall
    from bakeoff.data.examples import load_examples

    test = load_examples(dest / "data" / "prepared" / "test.jsonl")
    out = {}
    for words in sizes:
        find = Passages(prepared(dest / "data" / "prepared"), k, words, "all-minilm-l6-v2")
        for e in test:
            find(e)
        out[str(words)] = recall(test, find.found)[0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "handbook.json"))
    add_target_argument(ap)
    args = ap.parse_args()
    targets = Targets.from_args(args.target)
    dest = workspace()
    rc = subprocess.run([sys.executable, "-m", "bakeoff.run.clock"], cwd=dest, check=False).returncode
    targets.equal("pipeline_ran", rc, 0)
    rec = record(dest)
    for name, arm in rec["arms"].items():
        print(f"{name:14s} {arm}")
    rag = rec["arms"]["rag"]
    for other in ("zero_shot", "prompt_search"):
        targets.at_least(f"rag_minus_{other}_ci_low", rag[f"minus_{other}"]["ci95"][0], 1e-9)
    targets.at_least("rag_recall", rag.get("retrieval_recall") or 0.0, 0.8)
    targets.at_least("recall_at_4", min(rec["recall_at_4"].values()), 0.8)
    targets.equal("family_retrieves", rec["families"].get("winner") in ("rag", "finetune_rag"), True)
    rec["targets"] = targets.results
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(rec, indent=2, default=str) + "\n")
    print(f"wrote {args.out} ({rec['machine']}, {rec['code']})")
    targets.exit()


if __name__ == "__main__":
    main()

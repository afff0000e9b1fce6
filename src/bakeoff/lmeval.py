"""The bridge to lm-evaluation-harness: the test split as a local lm-eval task, scored by ``simple_evaluate``.

    task = write_task(test, tok, "runs/lora/lm_eval", max_new_tokens=48)
    out = run_task(task, {"pretrained": "models/base", "peft": "models/variants/lora"})

The task is a YAML file and a JSONL file beside it. Each prompt is rendered by bakeoff in the base model's
chat template (so lm-eval sees exactly the tokens bakeoff's own evaluation sees), generation is greedy up to
the end-of-turn token, and lm-eval's own ``exact_match`` scores it with case, punctuation and whitespace
ignored: the same rule as bakeoff's ``loose_match``, which it is checked against. Standard lm-eval tasks (a forgetting check) run where their data is reachable and are recorded as
``skipped`` with the reason where it is not.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import yaml

from bakeoff.data import Example
from bakeoff.prompts import render_prompt

TASK = "bakeoff_test"


def write_task(test: list[Example], tok, out_dir: str | Path, max_new_tokens: int, to_prompt=None,
               name: str = TASK) -> Path:
    """Write ``<out_dir>/<name>.yaml`` and ``<name>.jsonl``; return the folder (lm-eval's include path)."""
    to_prompt = to_prompt or (lambda e: e.messages)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"{name}.jsonl"
    with open(data, "w") as f:
        for e in test:
            f.write(json.dumps({"id": e.id, "prompt": render_prompt(tok, to_prompt(e)),
                                "completion": e.completion}, ensure_ascii=False) + "\n")
    stop = [tok.eos_token] if tok.eos_token else []
    spec = {
        "task": name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{prompt}}",
        "doc_to_target": "{{completion}}",
        "target_delimiter": "",
        "generation_kwargs": {"until": stop, "do_sample": False, "max_gen_toks": max_new_tokens},
        "metric_list": [{"metric": "exact_match", "aggregation": "mean", "higher_is_better": True,
                         "ignore_case": True, "ignore_punctuation": True, "regexes_to_ignore": [r"\s+"]}],
        "metadata": {"version": 1.0, "source": "bakeoff: the task's test split, prompts in the chat template"},
    }
    (out / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return out


def _model(model, tok, batch_size: int, dtype: str = "float32"):
    """An lm-eval model: ``model`` is lm-eval's ``hf`` model_args (a dict, loaded in ``dtype``) or an already loaded
    model (used as it is)."""
    import torch
    from lm_eval.models.huggingface import HFLM

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(model, dict):
        return HFLM(**model, tokenizer=tok, batch_size=batch_size, device=device, dtype=dtype)
    return HFLM(pretrained=model, tokenizer=tok, batch_size=batch_size)


def run_task(task_dir: str | Path, model, tok, batch_size: int = 16, name: str = TASK, dtype: str = "float32") -> dict:
    """Score the local task; returns lm-eval's exact match and its per-example scores in doc order."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    manager = TaskManager(include_path=str(task_dir), include_defaults=False)
    res = simple_evaluate(model=_model(model, tok, batch_size, dtype), tasks=[name], task_manager=manager,
                          bootstrap_iters=0, log_samples=True, verbosity="WARNING")
    samples = sorted(res["samples"][name], key=lambda s: s["doc_id"])
    return {"exact_match": float(res["results"][name]["exact_match,none"]),
            "per_example": [float(s["exact_match"]) for s in samples],
            "predictions": [s["filtered_resps"][0] for s in samples]}


def agreement(ours: list[float], theirs: list[float]) -> dict:
    """How far lm-eval's per-example exact match is from bakeoff's on the same examples."""
    differ = sum(a != b for a, b in zip(ours, theirs))
    return {"lm_eval_exact_match": round(sum(theirs) / max(len(theirs), 1), 4), "lm_eval_disagree": differ}


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the dataset hub (``HF_ENDPOINT``, default huggingface.co) answers a TCP connection."""
    import os
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def run_standard(tasks: list[str], model, tok, batch_size: int = 16, limit: int | None = 100,
                 dtype: str = "float32") -> dict:
    """Standard lm-eval tasks, each ``{"status": "ok", <metric>: value}`` or ``{"status": "skipped",
    "reason": ...}`` (its data is not reachable, as offline). With no hub in reach, only datasets already in the
    local cache can load: the datasets library is put in offline mode so a missing one fails at once."""
    import os

    from lm_eval import simple_evaluate

    if tasks and not hub_reachable():
        import datasets.config
        import huggingface_hub.constants

        os.environ["HF_DATASETS_OFFLINE"] = os.environ["HF_HUB_OFFLINE"] = "1"
        datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True  # read at import time
    out = {}
    lm = _model(model, tok, batch_size, dtype) if tasks else None
    for task in tasks:
        try:
            res = simple_evaluate(model=lm, tasks=[task], limit=limit, bootstrap_iters=0, verbosity="WARNING")
            scores = {k.split(",")[0]: float(v) for k, v in res["results"][task].items()
                      if isinstance(v, (int, float)) and "stderr" not in k}
            out[task] = {"status": "ok", **scores}
        except Exception as e:  # noqa: BLE001 — any failure to reach or build the task is a skip, not a crash
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            out[task] = {"status": "skipped", "reason": f"{type(e).__name__}: {reason}"}
    return out

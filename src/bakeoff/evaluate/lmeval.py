"""The bridge to lm-evaluation-harness: the test split as a local lm-eval task, scored by ``simple_evaluate``.

    task = write_task(test, tok, "runs/lora/lm_eval", max_new_tokens=48)
    out = run_task(task, {"pretrained": "models/base", "peft": "models/variants/lora"})   # lm-eval generates
    out = run_task(task, replay({prompt: answer, ...}))                                    # lm-eval scores ours

The task is a YAML file and a JSONL file beside it. Each prompt is rendered by bakeoff in the base model's
chat template (so lm-eval sees exactly the tokens bakeoff's own evaluation sees), generation is greedy up to
the end-of-turn token, and lm-eval's own ``exact_match`` scores it with case, punctuation and whitespace
ignored: the same rule as bakeoff's ``loose_match``, which it is checked against. By default (``eval.lm_eval:
reuse``) lm-eval scores the answers bakeoff already generated (``replay``): it builds each request from its own task
file, and a request whose prompt bakeoff did not generate for is an error, so the check still covers the prompts
and the metric without generating the split twice; ``generate`` has lm-eval's own HF model generate them again.
Standard lm-eval tasks (a forgetting check) run where their data is reachable and are recorded as
``skipped`` with the reason where it is not.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import yaml

from bakeoff.data.examples import Example
from bakeoff.data.prompts import render_prompt

TASK = "bakeoff_test"


def write_task(
    test: list[Example], tok, out_dir: str | Path, max_new_tokens: int, to_prompt=None, name: str = TASK
) -> Path:
    """Write ``<out_dir>/<name>.yaml`` and ``<name>.jsonl``; return the folder (lm-eval's include path)."""
    to_prompt = to_prompt or (lambda e: e.messages)
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    data = out / f"{name}.jsonl"
    with open(data, "w") as f:
        f.writelines(
            json.dumps(
                {"id": e.id, "prompt": render_prompt(tok, to_prompt(e)), "completion": e.completion}, ensure_ascii=False
            )
            + "\n"
            for e in test
        )
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
        "metric_list": [
            {
                "metric": "exact_match",
                "aggregation": "mean",
                "higher_is_better": True,
                "ignore_case": True,
                "ignore_punctuation": True,
                "regexes_to_ignore": [r"\s+"],
            }
        ],
        "metadata": {"version": 1.0, "source": "bakeoff: the task's test split, prompts in the chat template"},
    }
    (out / f"{name}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return out


def replay(answers: dict[str, str]):
    """An lm-eval model that answers each ``generate_until`` request with bakeoff's answer to the same prompt
    (``answers``: rendered prompt → answer; ``bakeoff.evaluate.replay.Replay``). lm-eval still builds the requests
    from its task file, filters and scores them; only the generation is reused."""
    from bakeoff.evaluate.replay import Replay

    return Replay(answers)


def _model(model, tok, batch_size: int, dtype: str = "float32"):
    """An lm-eval model: ``model`` is lm-eval's ``hf`` model_args (a dict, loaded in ``dtype``), an lm-eval model
    (``replay``: used as it is) or an already loaded transformers model."""
    import torch
    from lm_eval.api.model import LM
    from lm_eval.models.huggingface import HFLM

    if isinstance(model, LM):
        return quiet(model)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(model, dict):
        return quiet(HFLM(**model, tokenizer=tok, batch_size=batch_size, device=device, dtype=dtype))
    return quiet(HFLM(pretrained=model, tokenizer=tok, batch_size=batch_size))


def quiet(lm):
    """In piped output (``bakeoff.piped``), ``lm`` with lm-eval's own bars off ("Tokenizing inputs", "Running
    loglikelihood requests"): lm-eval hands tqdm an explicit ``disable``, which overrides TQDM_DISABLE."""
    import functools

    from bakeoff import piped

    if piped():
        for name in ("loglikelihood", "loglikelihood_rolling", "generate_until"):
            setattr(lm, name, functools.partial(getattr(lm, name), disable_tqdm=True))
    return lm


def run_task(task_dir: str | Path, model, tok, batch_size: int = 16, name: str = TASK, dtype: str = "float32") -> dict:
    """Score the local task; returns lm-eval's exact match and its per-example scores in doc order."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    manager = TaskManager(include_path=str(task_dir), include_defaults=False)
    res = simple_evaluate(
        model=_model(model, tok, batch_size, dtype),
        tasks=[name],
        task_manager=manager,
        bootstrap_iters=0,
        log_samples=True,
        verbosity="WARNING",
    )
    samples = sorted(res["samples"][name], key=lambda s: s["doc_id"])
    return {
        "exact_match": float(res["results"][name]["exact_match,none"]),
        "per_example": [float(s["exact_match"]) for s in samples],
        "predictions": [s["filtered_resps"][0] for s in samples],
    }


PROBE = "bakeoff_general"
PROBE_DIR = Path("data") / "probe"  # the project's own copy (a DVC dependency), read from the project's root


def probe_dir() -> Path:
    """``data/probe`` of the project the stage runs in, or the one bakeoff ships when it has none."""
    return (
        PROBE_DIR if (PROBE_DIR / "general.jsonl").exists() else Path(__file__).resolve().parents[3] / "data" / "probe"
    )


def write_probe_task(out_dir: str | Path, questions: str | Path | None = None) -> Path:
    """The general-ability probe (``data/probe/make_probe.py``, CC0) as a local lm-eval ``multiple_choice`` task:
    ``<out_dir>/bakeoff_general.yaml``; returns the folder (lm-eval's include path)."""
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    spec = {
        "task": PROBE,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(Path(questions or probe_dir() / "general.jsonl").resolve())}},
        "test_split": "test",
        "output_type": "multiple_choice",
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_choice": "{{choices}}",
        "doc_to_target": "{{answer}}",
        "target_delimiter": " ",
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}],
        "metadata": {"version": 1.0, "source": "bakeoff data/probe/make_probe.py", "license": "CC0-1.0"},
    }
    (out / f"{PROBE}.yaml").write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True))
    return out


def run_probe(
    model, tok, work_dir: str | Path, batch_size: int = 16, dtype: str = "float32", limit: int | None = None
) -> dict:
    """The general-ability probe on ``model`` (loaded, or lm-eval ``hf`` model_args): ``probe_acc``, the share of
    its questions whose right choice is the most likely, ``n_probe`` and ``probe_wall_s``."""
    import time

    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    logging.getLogger("lm_eval").setLevel(logging.WARNING)
    t0 = time.perf_counter()
    manager = TaskManager(include_path=str(write_probe_task(work_dir)), include_defaults=False)
    res = simple_evaluate(
        model=_model(model, tok, batch_size, dtype),
        tasks=[PROBE],
        task_manager=manager,
        bootstrap_iters=0,
        limit=limit,
        verbosity="WARNING",
    )
    n = res.get("n-samples", {}).get(PROBE, {}).get("effective")
    return {
        "probe_acc": round(float(res["results"][PROBE]["acc,none"]), 4),
        **({"n_probe": n} if n else {}),
        "probe_wall_s": round(time.perf_counter() - t0, 2),
    }


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


def run_standard(
    tasks: list[str], model, tok, batch_size: int = 16, limit: int | None = 100, dtype: str = "float32"
) -> dict:
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
            scores = {
                k.split(",")[0]: float(v)
                for k, v in res["results"][task].items()
                if isinstance(v, (int, float)) and "stderr" not in k
            }
            out[task] = {"status": "ok", **scores}
        except Exception as e:  # a task's failure is that task's: skipped offline, else failed
            reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            out[task] = {"status": "skipped" if unavailable(e) else "failed", "reason": f"{type(e).__name__}: {reason}"}
    return out


# what a task whose data cannot be had raises: the hub offline or unreachable, a dataset or task not found
_UNAVAILABLE = (
    "OfflineModeIsEnabled",
    "ConnectionError",
    "ConnectTimeout",
    "LocalEntryNotFoundError",
    "DatasetNotFoundError",
    "FileNotFoundError",
    "HFValidationError",
)


def unavailable(e: BaseException) -> bool:
    """Whether ``e`` (or an exception it came from) says the task or its data is not available here, as offline,
    rather than that something broke."""
    seen = 0
    while e is not None and seen < 10:
        text = str(e).lower()
        if (
            type(e).__name__ in _UNAVAILABLE
            or "offline" in text
            or "task not found" in text
            or "tasks not found" in text
        ):
            return True
        e, seen = e.__cause__ or e.__context__, seen + 1
    return False

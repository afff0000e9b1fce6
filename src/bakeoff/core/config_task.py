"""params.yaml's task and evaluation: the task's files, columns, template and preference pairs, and the evaluation's
settings, built and checked; each error names the file, the line and the key."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bakeoff.core.schema import (
    Source,
    build,
    check,
    suggest,
)
from bakeoff.core.scoring import METRICS
from bakeoff.core.sections import (
    EvalConfig,
    TaskConfig,
)


def task_config(raw, src: Source) -> TaskConfig:
    task = build(TaskConfig, raw, "task", src)
    check(
        task.format in ("auto", "jsonl", "csv", "parquet"),
        src,
        "task.format",
        f"must be auto, jsonl, csv or parquet; got {task.format!r}",
    )
    check(
        task.metric in METRICS,
        src,
        "task.metric",
        f"unknown metric {task.metric!r}" + suggest(task.metric, list(METRICS)),
    )
    check(
        task.max_new_tokens == "auto" or (isinstance(task.max_new_tokens, int) and task.max_new_tokens > 0),
        src,
        "task.max_new_tokens",
        f"must be a positive number of tokens or auto, got {task.max_new_tokens!r}",
    )
    for k, allowed in (
        ("overlong", ("truncate", "drop")),
        ("duplicates", ("drop", "keep", "error")),
        ("leakage", ("drop", "keep", "error")),
    ):
        check(
            getattr(task, k) in allowed,
            src,
            f"task.{k}",
            f"must be one of {', '.join(allowed)}; got {getattr(task, k)!r}",
        )
    for key, size, own in (("val_size", task.val_size, task.val), ("test_size", task.test_size, task.test)):
        number = isinstance(size, (int, float)) and not isinstance(size, bool)
        auto = " or auto" if key == "val_size" else ""
        empty = "nothing to choose winners on" if key == "val_size" else "nothing to score"
        check(
            own or size == "auto" and auto or number and 0 < size and (size < 1 or size == int(size)),
            src,
            f"task.{key}",
            f"must be a fraction in (0, 1) or a whole count ≥ 1{auto}; got {size!r} (an empty "
            f"{key[:-5]} split would leave {empty})",
        )
    check(
        task.labels is None
        or (isinstance(task.labels, str) and task.labels.strip() != "")
        or (isinstance(task.labels, list) and task.labels and all(isinstance(x, str) for x in task.labels)),
        src,
        "task.labels",
        f"must be a list of strings, auto, a file of labels (one a line) or null; got {task.labels!r}",
    )
    check_template(task, src)
    check_prefs(task, src)
    return task


SHIPPED = {"train": "data/raw/tickets.jsonl", "prefs": "data/raw/prefs.jsonl"}  # the default task's own files


def check_prefs(task: TaskConfig, src: Source) -> None:
    """The shipped preference pairs belong to the shipped tickets task: with another train file, DPO would learn
    another task's preferences in silence."""

    def norm(p):
        return Path(p).as_posix().removeprefix("./") if isinstance(p, str) else p

    check(
        not (norm(task.prefs) == SHIPPED["prefs"] and norm(task.train) != SHIPPED["train"]),
        src,
        "task.prefs",
        f"is the shipped tickets task's preference pairs ({SHIPPED['prefs']}), but task.train is {task.train}: "
        "dpo would train on another task's pairs. Set task.prefs: null (dpo is then skipped) or point it at "
        "your own pairs (their columns: task.prefs_columns)",
    )


ANSWER_FIELDS = ("completion", "output", "chosen", "rejected")  # the answer's columns in the formats bakeoff reads


def check_template(task: TaskConfig, src: Source) -> None:
    """``task.prompt_template``: well formed (a literal brace doubled), and naming no answer column, which would copy
    each row's reference answer into its own prompt (every arm then scores on a leak)."""
    import string

    if task.prompt_template is None:
        return
    check(
        isinstance(task.prompt_template, str),
        src,
        "task.prompt_template",
        f"must be a string such as 'Classify: {{prompt}}'; got {task.prompt_template!r}",
    )
    try:
        names = {
            f.split(".")[0].split("[")[0]
            for _, f, _, _ in string.Formatter().parse(task.prompt_template)
            if f is not None
        }
    except ValueError as e:
        raise src.error(
            "task.prompt_template",
            f"is not a valid template ({e}): fields are {{column}}, and a literal brace is written {{{{ or }}}}",
        ) from None
    columns = task.columns if isinstance(task.columns, dict) else {}
    answers = {*ANSWER_FIELDS, *(columns.get(k) for k in ANSWER_FIELDS if columns.get(k))}
    leak = sorted(n for n in names if n in answers)
    check(
        not leak,
        src,
        "task.prompt_template",
        f"names {', '.join(repr(x) for x in leak)}, the answer's column: every prompt would carry its own "
        "reference answer and every arm would score on the leak; name only input columns ({prompt} and others)",
    )


def eval_config(raw, src: Source) -> EvalConfig:
    ev = build(EvalConfig, raw, "eval", src)
    check(ev.batch_size > 0, src, "eval.batch_size", "must be > 0")
    check(
        ev.dtype in ("auto", "fp32", "bf16", "fp16"),
        src,
        "eval.dtype",
        f"must be one of auto, fp32, bf16, fp16; got {ev.dtype!r}",
    )
    check(ev.latency_requests >= 0, src, "eval.latency_requests", "must be ≥ 0")
    check(ev.bootstrap_resamples >= 100, src, "eval.bootstrap_resamples", "must be ≥ 100")
    check(
        isinstance(ev.lm_eval_tasks, list) and all(isinstance(x, str) for x in ev.lm_eval_tasks),
        src,
        "eval.lm_eval_tasks",
        f"must be a list of lm-eval task names, got {ev.lm_eval_tasks!r}",
    )
    mode = {True: "reuse", False: "off"}[ev.lm_eval] if isinstance(ev.lm_eval, bool) else ev.lm_eval
    check(
        mode in ("reuse", "generate", "off"), src, "eval.lm_eval", f"must be reuse, generate or off; got {ev.lm_eval!r}"
    )
    return replace(ev, lm_eval=mode)

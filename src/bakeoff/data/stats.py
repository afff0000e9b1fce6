"""What the data stage records of the task's splits (data/prepared/stats.json): its closed label set where it has one,
the generation budget (``task.max_new_tokens``, auto: the longest reference answer and a margin) and token counts."""

from __future__ import annotations

import sys
from pathlib import Path

from bakeoff.data.examples import DataError, Example


def closed_labels(
    train: list[Example], configured: list[str] | str | None, metric: str, most: int = 50
) -> list[str] | None:
    """The label set for accuracy / macro-F1 and label choice: ``task.labels`` as a list; ``auto``: the distinct train
    answers, any number (a warning above ``most`` names what label choice will cost); a file path: one label a
    line; None: for those metrics, the distinct train answers when there are at most ``most``."""
    answers = sorted({e.completion.strip() for e in train})
    if isinstance(configured, list):
        return list(configured)
    if configured == "auto":
        if len(answers) > most:
            warn(
                f"task.labels: auto found {len(answers)} distinct answers; label choice scores each of them for "
                f"every test item ({len(answers)} continuations per prompt), which lengthens evaluation"
            )
        return answers
    if isinstance(configured, str):
        path = Path(configured)
        if not path.is_file():
            raise DataError(
                f"task.labels: {configured}: file not found (one label a line; keep it under data/raw/ "
                "so DVC tracks it)"
            )
        labels = [line.strip() for line in path.read_text(encoding="utf-8-sig").splitlines() if line.strip()]
        if not labels:
            raise DataError(f"{configured}: no labels (one label a line)")
        return labels
    if metric not in ("accuracy", "macro_f1"):
        return None
    if len(answers) > most:
        raise DataError(
            f"task.metric {metric!r} needs a closed label set, but the train split has "
            f"{len(answers)} distinct answers: set task.labels: auto (all of them), a file of labels, "
            "or use exact_match"
        )
    return answers


ANSWER_MARGIN = 8  # tokens added to the longest reference answer by max_new_tokens: auto


def answer_tokens(tok, ex: Example) -> int:
    """Tokens the model must generate for this answer: the answer and its end-of-turn token."""
    return len(tok(ex.completion, add_special_tokens=False)["input_ids"]) + 1


def generation_budget(tok, splits: dict[str, list[Example]], configured: int | str) -> dict:
    """``max_new_tokens`` resolved (``auto``: the longest reference answer of train and test plus a margin) and,
    when a fixed budget is shorter than a reference answer, a warning naming the longest rows: those answers are
    cut and scored wrong."""
    longest = {}
    for name in ("train", "test"):
        rows = splits.get(name) or []
        lengths = [(answer_tokens(tok, ex), ex) for ex in rows]
        n, ex = max(lengths, key=lambda x: x[0]) if lengths else (0, None)
        longest[name] = {"tokens": n, "source": ex.source if ex else None}
    need = max(v["tokens"] for v in longest.values())
    budget = need + ANSWER_MARGIN if configured == "auto" else int(configured)
    out = {"max_new_tokens": budget, "longest_answer": longest, "truncates": budget < need}
    if out["truncates"]:
        where = "; ".join(f"{k}: {v['tokens']} tokens ({v['source']})" for k, v in longest.items() if v["source"])
        out["warning"] = (
            f"task.max_new_tokens {budget} is below the longest reference answer ({where}, end-of-turn "
            f"included): answers that long are cut and scored wrong; set task.max_new_tokens: auto "
            f"or at least {need}"
        )
        warn(out["warning"])
    return out


def token_stats(tok, examples: list[Example]) -> dict:
    """Token lengths of prompt + completion in the chat template, as the trainer sees them."""
    lengths = sorted(row_tokens(tok, ex) for ex in examples)
    n = len(lengths)
    return {
        "n": n,
        "min": lengths[0],
        "mean": round(sum(lengths) / n, 1),
        "p50": lengths[n // 2],
        "p95": lengths[min(n - 1, int(0.95 * n))],
        "max": lengths[-1],
    }


def warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def row_tokens(tok, ex: Example) -> int:
    """Tokens of prompt + answer in the chat template, as the trainer sees the row."""
    ids = tok.apply_chat_template(ex.messages + [{"role": "assistant", "content": ex.completion}], tokenize=True)
    if hasattr(ids, "input_ids") or isinstance(ids, dict):
        ids = ids["input_ids"]
    return len(ids)

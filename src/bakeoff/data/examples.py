"""Readers, validation and splitting (the data stage's checks: ``bakeoff.data.prepare``; prompts and shots:
``bakeoff.data.prompts``).

Supervised rows, any of (the shape is detected from the first row, and said):
    {"prompt": "...", "completion": "..."}                                  JSONL
    {"messages": [{"role": "user", ...}, ..., {"role": "assistant", ...}]}  JSONL (last assistant turn = target)
    {"instruction": "...", "input": "...", "output": "..."}                 Alpaca (input optional)
    {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}   ShareGPT (human/gpt/system)
    a CSV or Parquet table whose columns ``task.columns`` maps, e.g. {prompt: text, completion: label}
Preference rows: {"prompt": "...", "chosen": "...", "rejected": "..."} (same column mapping).

Every row becomes an ``Example``: the prompt as chat messages and the completion as text. Errors name the
file and line (``data/raw/x.jsonl:17: missing 'completion' ...``) instead of a traceback.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from bakeoff.data.formats import DataError, iter_raw

SFT_FIELDS = ("prompt", "completion")
PREF_FIELDS = ("prompt", "chosen", "rejected")


@dataclass
class Example:
    messages: list[dict]  # the prompt, as chat messages (system/user/assistant turns before the target)
    completion: str  # the target answer
    source: str = ""  # file:line, kept for error messages and per-example outputs
    id: int = 0
    doc: str = ""  # the corpus document that holds the answer, where the task names one (retrieval's recall)

    def to_json(self) -> dict:  # a task without gold documents writes the rows it always wrote
        return {k: v for k, v in asdict(self).items() if k != "doc" or self.doc}


@dataclass
class Pair:
    messages: list[dict]
    chosen: str
    rejected: str
    source: str = ""
    id: int = 0

    def to_json(self) -> dict:
        return asdict(self)


def _text(value, where: str, key: str) -> str:
    if value is None or (isinstance(value, float) and value != value):  # None or NaN
        raise DataError(f"{where}: '{key}' is empty")
    if not isinstance(value, (str, int, float)):
        raise DataError(f"{where}: '{key}' must be text, got {type(value).__name__}")
    text = str(value)
    if not text.strip():
        raise DataError(f"{where}: '{key}' is empty")
    return text


def _missing(where: str, row: dict, need: tuple[str, ...], columns: dict, key: str = "task.columns") -> DataError:
    found = ", ".join(map(str, row)) or "none"
    missing = [k for k in need if columns.get(k, k) not in row]
    hint = ""
    others = [c for c in row if c not in columns.values()]
    if len(others) >= len(missing):
        guess = dict(zip(missing, others))
        hint = f"; map your columns in params.yaml, e.g. {key}: {json.dumps(guess)}"
    if key == "task.prefs_columns":
        hint += "; no preference pairs for this task? set task.prefs: null (dpo is then skipped)"
    return DataError(f"{where}: missing {', '.join(repr(m) for m in missing)} (found columns: {found}){hint}")


def _prompt_messages(prompt: str, row: dict, template: str | None, system: str | None, where: str) -> list[dict]:
    if template:
        try:
            prompt = template.format(**{**row, "prompt": prompt})
        except (KeyError, IndexError) as e:
            raise DataError(f"{where}: task.prompt_template names {e} which this row does not have") from None
        except ValueError as e:  # a lone brace: checked with params, kept here for templates built elsewhere
            raise DataError(
                f"{where}: task.prompt_template is not a valid template ({e}); write a literal brace as {{{{ or }}}}"
            ) from None
    msgs = [{"role": "system", "content": system}] if system else []
    return msgs + [{"role": "user", "content": prompt}]


def _from_messages(row: dict, where: str, system: str | None) -> tuple[list[dict], str]:
    msgs = row["messages"]
    if not isinstance(msgs, list) or not msgs:
        raise DataError(f"{where}: 'messages' must be a non-empty list of {{role, content}}")
    for j, m in enumerate(msgs):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise DataError(f"{where}: messages[{j}] must have 'role' and 'content'")
        if m["role"] not in ("system", "user", "assistant"):
            raise DataError(f"{where}: messages[{j}].role is {m['role']!r}; use system, user or assistant")
    if msgs[-1]["role"] != "assistant":
        raise DataError(f"{where}: the last message must be the assistant's answer (the training target)")
    prompt = [{"role": m["role"], "content": str(m["content"])} for m in msgs[:-1]]
    if not any(m["role"] == "user" for m in prompt):
        raise DataError(f"{where}: no user message before the assistant's answer")
    if system and prompt[0]["role"] != "system":
        prompt = [{"role": "system", "content": system}] + prompt
    return prompt, _text(msgs[-1]["content"], where, "messages[-1].content")


SHAPES = {
    "messages": "chat messages (messages: role/content)",
    "sharegpt": "ShareGPT (conversations: from/value)",
    "alpaca": "Alpaca (instruction, input, output)",
    "prompt": "prompt/completion",
}
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant", "system": "system"}


def row_shapes(row: dict, columns: dict) -> list[str]:
    """The row shapes ``row`` could be read as (more than one: ambiguous; a column mapping means prompt/completion)."""
    if "prompt" in columns or "completion" in columns:
        return ["prompt"]
    found = [
        k
        for k, ok in (
            ("messages", "messages" in row),
            ("sharegpt", "conversations" in row),
            ("alpaca", "instruction" in row and "output" in row),
            ("prompt", all(k in row for k in SFT_FIELDS)),
        )
        if ok
    ]
    return found or ["prompt"]


def _from_sharegpt(row: dict, where: str, system: str | None) -> tuple[list[dict], str]:
    turns = row["conversations"]
    if not isinstance(turns, list) or not turns:
        raise DataError(f"{where}: 'conversations' must be a non-empty list of {{from, value}}")
    msgs = []
    for j, t in enumerate(turns):
        if not isinstance(t, dict) or "from" not in t or "value" not in t:
            raise DataError(f"{where}: conversations[{j}] must have 'from' and 'value'")
        if t["from"] not in SHAREGPT_ROLES:
            raise DataError(f"{where}: conversations[{j}].from is {t['from']!r}; use human, gpt or system")
        msgs.append({"role": SHAREGPT_ROLES[t["from"]], "content": t["value"]})
    if row.get("system") and msgs[0]["role"] != "system":
        msgs.insert(0, {"role": "system", "content": row["system"]})
    return _from_messages({"messages": msgs}, where, system)


def _from_alpaca(row: dict, where: str, template: str | None, system: str | None) -> tuple[list[dict], str]:
    if "instruction" not in row or "output" not in row:
        raise _missing(where, row, ("instruction", "output"), {})
    prompt = _text(row.get("instruction"), where, "instruction")
    extra = row.get("input")
    if extra is not None and not isinstance(extra, str):
        raise DataError(f"{where}: 'input' must be text, got {type(extra).__name__}")
    prompt += f"\n\n{extra}" if extra and extra.strip() else ""
    messages = _prompt_messages(prompt, row, template, system or row.get("system") or None, where)
    return messages, _text(row.get("output"), where, "output")


def read_examples(
    path: str | Path,
    fmt: str = "auto",
    columns: dict | None = None,
    template: str | None = None,
    system: str | None = None,
) -> list[Example]:
    """Read supervised rows into Examples; raise DataError naming the first bad row. The row shape (SHAPES) is
    detected from the first row and said once; every row is then read as that shape."""
    columns = columns or {}
    out, shape = [], None
    for where, row in iter_raw(path, fmt):
        if shape is None:
            shapes = row_shapes(row, columns)
            if len(shapes) > 1:
                raise DataError(
                    f"{where}: this row could be read as {' or as '.join(SHAPES[s] for s in shapes)}; "
                    "keep the columns of one shape, or name the prompt and answer columns in "
                    'task.columns (e.g. {"prompt": "instruction", "completion": "output"})'
                )
            shape = shapes[0]
            print(f"[data] {path}: read as {SHAPES[shape]}", flush=True)
        if shape == "sharegpt":
            if "conversations" not in row:
                raise DataError(f"{where}: missing 'conversations' (the file's first row is ShareGPT)")
            messages, completion = _from_sharegpt(row, where, system)
        elif shape == "alpaca":
            messages, completion = _from_alpaca(row, where, template, system)
        elif shape == "messages" and "messages" in row:
            messages, completion = _from_messages(row, where, system)
        else:
            if any(columns.get(k, k) not in row for k in SFT_FIELDS):
                raise _missing(where, row, SFT_FIELDS, columns)
            prompt = _text(row[columns.get("prompt", "prompt")], where, columns.get("prompt", "prompt"))
            completion = _text(
                row[columns.get("completion", "completion")], where, columns.get("completion", "completion")
            )
            messages = _prompt_messages(prompt, row, template, system, where)
        doc = row.get(columns.get("doc", "doc"))
        doc = str(doc) if doc is not None and doc == doc else ""  # absent or NaN: none named
        out.append(Example(messages=messages, completion=completion.strip(), source=where, id=len(out), doc=doc))
    if not out:
        raise DataError(f"{path}: no rows")
    return out


def read_pairs(
    path: str | Path,
    fmt: str = "auto",
    columns: dict | None = None,
    template: str | None = None,
    system: str | None = None,
) -> list[Pair]:
    """Read preference rows (prompt, chosen, rejected) into Pairs; ``columns``: the pairs' own mapping
    (``task.prefs_columns``), never the task's."""
    columns = columns or {}
    out = []
    for where, row in iter_raw(path, fmt):
        if any(columns.get(k, k) not in row for k in PREF_FIELDS):
            raise _missing(where, row, PREF_FIELDS, columns, "task.prefs_columns")
        prompt, chosen, rejected = (_text(row[columns.get(k, k)], where, columns.get(k, k)) for k in PREF_FIELDS)
        if chosen.strip() == rejected.strip():
            raise DataError(f"{where}: 'chosen' and 'rejected' are the same text; a preference pair needs two answers")
        out.append(
            Pair(
                messages=_prompt_messages(prompt, row, template, system, where),
                chosen=chosen.strip(),
                rejected=rejected.strip(),
                source=where,
                id=len(out),
            )
        )
    if not out:
        raise DataError(f"{path}: no rows")
    return out


def write_jsonl(path: str | Path, rows) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.writelines(json.dumps(r.to_json() if hasattr(r, "to_json") else r, ensure_ascii=False) + "\n" for r in rows)


def load_examples(path: str | Path) -> list[Example]:
    with open(path) as f:
        return [Example(**json.loads(line)) for line in f if line.strip()]


def load_pairs(path: str | Path) -> list[Pair]:
    with open(path) as f:
        return [Pair(**json.loads(line)) for line in f if line.strip()]


def file_hash(*paths: str | Path) -> str:
    h = hashlib.sha256()
    for p in paths:
        if p:
            h.update(Path(p).read_bytes())
    return h.hexdigest()[:16]

"""Readers, validation, splitting, data checks and token statistics (prompts and shots: ``bakeoff.prompts``).

Supervised rows, any of:
    {"prompt": "...", "completion": "..."}                                  JSONL
    {"messages": [{"role": "user", ...}, ..., {"role": "assistant", ...}]}  JSONL (last assistant turn = target)
    a CSV or Parquet table whose columns ``task.columns`` maps, e.g. {prompt: text, completion: label}
Preference rows: {"prompt": "...", "chosen": "...", "rejected": "..."} (same column mapping).

Every row becomes an ``Example``: the prompt as chat messages and the completion as text. Errors name the
file and line (``data/raw/x.jsonl:17: missing 'completion' ...``) instead of a traceback.
"""

from __future__ import annotations

import csv
import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from bakeoff.errors import UserError

SFT_FIELDS = ("prompt", "completion")
PREF_FIELDS = ("prompt", "chosen", "rejected")


class DataError(UserError):
    """Input data that cannot be used; the message names the file and line."""


@dataclass
class Example:
    messages: list[dict]  # the prompt, as chat messages (system/user/assistant turns before the target)
    completion: str  # the target answer
    source: str = ""  # file:line, kept for error messages and per-example outputs
    id: int = 0

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Pair:
    messages: list[dict]
    chosen: str
    rejected: str
    source: str = ""
    id: int = 0

    def to_json(self) -> dict:
        return asdict(self)


def detect_format(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        return "jsonl"
    if suffix in (".csv", ".tsv"):
        return "csv"
    if suffix == ".parquet":
        return "parquet"
    raise DataError(f"{path}: cannot tell the format from the suffix {suffix!r}; set task.format "
                    f"(jsonl, csv or parquet)")


def iter_raw(path: str | Path, fmt: str = "auto") -> Iterator[tuple[str, dict]]:
    """Yield (``file:line``, row) for every row of a JSONL, CSV or Parquet file."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"{path}: file not found (check task.train / task.test / task.prefs in params.yaml)")
    fmt = detect_format(path, fmt)
    if fmt == "jsonl":
        with open(path, "rb") as f:
            for i, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise DataError(f"{path}:{i}: not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 4]!r})") from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{i}: not valid JSON ({e.msg} at column {e.colno})") from None
                if not isinstance(row, dict):
                    raise DataError(f"{path}:{i}: expected a JSON object, got {type(row).__name__}")
                yield f"{path}:{i}", row
    elif fmt == "csv":
        try:
            with open(path, newline="", encoding="utf-8") as f:
                dialect = "excel-tab" if path.suffix.lower() == ".tsv" else "excel"
                reader = csv.DictReader(f, dialect=dialect)
                for i, row in enumerate(reader, start=2):  # line 1 is the header
                    yield f"{path}:{reader.line_num or i}", row
        except UnicodeDecodeError as e:
            raise DataError(f"{path}: not UTF-8 text (byte offset {e.start})") from None
    elif fmt == "parquet":
        import pandas as pd

        frame = pd.read_parquet(path)
        for i, row in enumerate(frame.to_dict(orient="records"), start=1):
            yield f"{path}:row {i}", row
    else:
        raise DataError(f"{path}: unknown format {fmt!r} (use jsonl, csv or parquet)")


def _text(value, where: str, key: str) -> str:
    if value is None or (isinstance(value, float) and value != value):  # None or NaN
        raise DataError(f"{where}: '{key}' is empty")
    if not isinstance(value, (str, int, float)):
        raise DataError(f"{where}: '{key}' must be text, got {type(value).__name__}")
    text = str(value)
    if not text.strip():
        raise DataError(f"{where}: '{key}' is empty")
    return text


def _missing(where: str, row: dict, need: tuple[str, ...], columns: dict) -> DataError:
    found = ", ".join(map(str, row)) or "none"
    missing = [k for k in need if columns.get(k, k) not in row]
    hint = ""
    others = [c for c in row if c not in columns.values()]
    if len(others) >= len(missing):
        guess = dict(zip(missing, others))
        hint = f"; map your columns in params.yaml, e.g. task.columns: {json.dumps(guess)}"
    return DataError(f"{where}: missing {', '.join(repr(m) for m in missing)} (found columns: {found}){hint}")


def _prompt_messages(prompt: str, row: dict, template: str | None, system: str | None, where: str) -> list[dict]:
    if template:
        try:
            prompt = template.format(**{**row, "prompt": prompt})
        except (KeyError, IndexError) as e:
            raise DataError(f"{where}: task.prompt_template names {e} which this row does not have") from None
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
    prompt = [dict(role=m["role"], content=str(m["content"])) for m in msgs[:-1]]
    if not any(m["role"] == "user" for m in prompt):
        raise DataError(f"{where}: no user message before the assistant's answer")
    if system and prompt[0]["role"] != "system":
        prompt = [{"role": "system", "content": system}] + prompt
    return prompt, _text(msgs[-1]["content"], where, "messages[-1].content")


def read_examples(path: str | Path, fmt: str = "auto", columns: dict | None = None,
                  template: str | None = None, system: str | None = None) -> list[Example]:
    """Read supervised rows into Examples; raise DataError naming the first bad row."""
    columns = columns or {}
    out = []
    for where, row in iter_raw(path, fmt):
        if "messages" in row and columns.get("messages", "messages") in row and "prompt" not in columns:
            messages, completion = _from_messages(row, where, system)
        else:
            if any(columns.get(k, k) not in row for k in SFT_FIELDS):
                raise _missing(where, row, SFT_FIELDS, columns)
            prompt = _text(row[columns.get("prompt", "prompt")], where, columns.get("prompt", "prompt"))
            completion = _text(row[columns.get("completion", "completion")], where, columns.get("completion", "completion"))
            messages = _prompt_messages(prompt, row, template, system, where)
        out.append(Example(messages=messages, completion=completion.strip(), source=where, id=len(out)))
    if not out:
        raise DataError(f"{path}: no rows")
    return out


def read_pairs(path: str | Path, fmt: str = "auto", columns: dict | None = None,
               template: str | None = None, system: str | None = None) -> list[Pair]:
    """Read preference rows (prompt, chosen, rejected) into Pairs."""
    columns = columns or {}
    out = []
    for where, row in iter_raw(path, fmt):
        if any(columns.get(k, k) not in row for k in PREF_FIELDS):
            raise _missing(where, row, PREF_FIELDS, columns)
        prompt, chosen, rejected = (_text(row[columns.get(k, k)], where, columns.get(k, k)) for k in PREF_FIELDS)
        if chosen.strip() == rejected.strip():
            raise DataError(f"{where}: 'chosen' and 'rejected' are the same text; a preference pair needs two answers")
        out.append(Pair(messages=_prompt_messages(prompt, row, template, system, where), chosen=chosen.strip(),
                        rejected=rejected.strip(), source=where, id=len(out)))
    if not out:
        raise DataError(f"{path}: no rows")
    return out


# ---------------------------------------------------------------- splitting

def _count(size: float, n: int) -> int:
    return int(round(size * n)) if size < 1 else int(size)


def split(items: list, val_size: float, test_size: float, seed: int) -> dict[str, list]:
    """Seeded shuffle, then test, val and train slices (sizes: a fraction < 1 or a count)."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    n_test, n_val = _count(test_size, len(items)), _count(val_size, len(items))
    if n_test + n_val >= len(items):
        raise DataError(f"task.val_size + task.test_size ({n_val} + {n_test}) leave no training rows "
                        f"out of {len(items)}")
    pick = [items[i] for i in order]
    return {"test": pick[:n_test], "val": pick[n_test:n_test + n_val], "train": pick[n_test + n_val:]}


def write_jsonl(path: str | Path, rows) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r.to_json() if hasattr(r, "to_json") else r, ensure_ascii=False) + "\n")


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


def closed_labels(train: list[Example], configured: list[str] | None, metric: str,
                  most: int = 50) -> list[str] | None:
    """The label set for accuracy / macro-F1: ``task.labels``, else (for those metrics) the distinct train
    answers when there are at most ``most`` of them."""
    if configured:
        return list(configured)
    if metric not in ("accuracy", "macro_f1"):
        return None
    answers = sorted({e.completion.strip() for e in train})
    if len(answers) > most:
        raise DataError(f"task.metric {metric!r} needs a closed label set, but the train split has "
                        f"{len(answers)} distinct answers: list them in task.labels or use exact_match")
    return answers


def token_stats(tok, examples: list[Example]) -> dict:
    """Token lengths of prompt + completion in the chat template, as the trainer sees them."""
    lengths = sorted(row_tokens(tok, ex) for ex in examples)
    n = len(lengths)
    return {"n": n, "min": lengths[0], "mean": round(sum(lengths) / n, 1), "p50": lengths[n // 2],
            "p95": lengths[min(n - 1, int(0.95 * n))], "max": lengths[-1]}


# ---------------------------------------------------------------- checks

def _prompt_key(ex: Example) -> str:
    return json.dumps([" ".join(m["content"].split()) for m in ex.messages if m["role"] != "system"])


def _row_key(ex: Example) -> str:
    return _prompt_key(ex) + "\u0000" + " ".join(ex.completion.split())


def _warn(msg: str) -> None:
    import sys

    print(f"warning: {msg}", file=sys.stderr)


def drop_duplicates(rows: list[Example], policy: str) -> tuple[list[Example], dict]:
    """Rows with the same prompt and answer (whitespace aside) as an earlier row: dropped, kept or an error."""
    first: dict[str, Example] = {}
    keep, dups = [], []
    for ex in rows:
        k = _row_key(ex)
        if k in first:
            dups.append(f"{ex.source} repeats {first[k].source}")
            if policy == "error":
                raise DataError(f"{ex.source}: the same prompt and answer as {first[k].source} "
                                "(task.duplicates: error; set drop or keep)")
            if policy == "drop":
                continue
        else:
            first[k] = ex
        keep.append(ex)
    if dups:
        _warn(f"{len(dups)} duplicate row(s), {'dropped' if policy == 'drop' else 'kept'} (task.duplicates): "
              + "; ".join(dups[:3]) + (" ..." if len(dups) > 3 else ""))
    return keep, {"count": len(dups), "policy": policy, "examples": dups[:10]}


def drop_leakage(train: list[Example], held_out: dict[str, list[Example]], policy: str) -> tuple[list[Example], dict]:
    """Training rows whose prompt is also in val or test (the model would be scored on what it trained on)."""
    seen = {_prompt_key(e): (name, e) for name, rows in held_out.items() for e in rows}
    keep, leaks = [], []
    for ex in train:
        hit = seen.get(_prompt_key(ex))
        if hit:
            leaks.append(f"{ex.source} is also in {hit[0]} ({hit[1].source})")
            if policy == "error":
                raise DataError(f"{ex.source}: the same prompt is in the {hit[0]} split ({hit[1].source}): "
                                "test results would be inflated (task.leakage: error; set drop or keep)")
            if policy == "drop":
                continue
        keep.append(ex)
    if leaks:
        _warn(f"{len(leaks)} training row(s) leak into val/test, {'dropped from train' if policy == 'drop' else 'kept'} "
              "(task.leakage): " + "; ".join(leaks[:3]) + (" ..." if len(leaks) > 3 else ""))
    return keep, {"count": len(leaks), "policy": policy, "examples": leaks[:10]}


def row_tokens(tok, ex: Example) -> int:
    """Tokens of prompt + answer in the chat template, as the trainer sees the row."""
    ids = tok.apply_chat_template(ex.messages + [{"role": "assistant", "content": ex.completion}], tokenize=True)
    if hasattr(ids, "input_ids") or isinstance(ids, dict):
        ids = ids["input_ids"]
    return len(ids)


def handle_overlong(tok, rows: list[Example], max_len: int, policy: str) -> tuple[list[Example], dict]:
    """Rows longer than ``max_len`` tokens: counted, then kept for the trainer to truncate, or dropped."""
    long = [(ex, n) for ex in rows if (n := row_tokens(tok, ex)) > max_len]
    if long:
        _warn(f"{len(long)} training row(s) exceed max_seq_len {max_len} tokens, "
              f"{'dropped' if policy == 'drop' else 'truncated when training'} (task.overlong): "
              + "; ".join(f"{ex.source} ({n} tokens)" for ex, n in long[:3]) + (" ..." if len(long) > 3 else ""))
    ids = {id(ex) for ex, _ in long}
    keep = [ex for ex in rows if id(ex) not in ids] if policy == "drop" else rows
    return keep, {"count": len(long), "policy": policy, "max_seq_len": max_len,
                  "examples": [f"{ex.source} ({n} tokens)" for ex, n in long[:10]]}


def prepare(params, out_dir: str | Path, tokenizer) -> dict:
    """Read, validate, check and split the task's raw files into ``out_dir``; return the stats record.

    Checks, each reported in stats.json and on stderr, with what params say to do: duplicate rows
    (``task.duplicates``), training prompts that are also in val or test (``task.leakage``), and rows longer than
    ``train_defaults.max_seq_len`` (``task.overlong``).
    """
    t = params.task
    out_dir = Path(out_dir)
    kw = dict(fmt=t.format, columns=t.columns, template=t.prompt_template, system=t.system_prompt)
    checks = {}
    train, checks["duplicates"] = drop_duplicates(read_examples(t.train, **kw), t.duplicates)
    splits = {"train": train}
    if t.test:
        splits["test"] = read_examples(t.test, **kw)
    if t.val:
        splits["val"] = read_examples(t.val, **kw)
    if not t.test or not t.val:
        carved = split(train, 0 if t.val else t.val_size, 0 if t.test else t.test_size, t.seed)
        splits = {**carved, **{k: v for k, v in splits.items() if k != "train"}}
    splits["train"], checks["leakage"] = drop_leakage(splits["train"], {k: splits[k] for k in ("val", "test")},
                                                      t.leakage)
    splits["train"], checks["overlong"] = handle_overlong(tokenizer, splits["train"],
                                                          params.train_defaults.max_seq_len, t.overlong)
    if not splits["train"]:
        raise DataError(f"{t.train}: no training rows left after the checks ({json.dumps(checks)[:300]})")
    for name in ("train", "val", "test"):
        for i, ex in enumerate(splits[name]):
            ex.id = i
        write_jsonl(out_dir / f"{name}.jsonl", splits[name])
    stats = {"splits": {k: len(v) for k, v in splits.items()},
             "data_hash": file_hash(t.train, t.val, t.test, t.prefs),
             "tokens": {k: token_stats(tokenizer, v) for k, v in splits.items()},
             "labels": closed_labels(splits["train"], t.labels, t.metric),
             "checks": checks}
    if t.prefs:
        pairs = read_pairs(t.prefs, **kw)
        p = split(pairs, 0, t.test_size, t.seed)
        for name in ("train", "test"):
            write_jsonl(out_dir / f"prefs_{name}.jsonl", p[name])
        stats["splits"].update({"prefs_train": len(p["train"]), "prefs_test": len(p["test"])})
    (out_dir / "stats.json").write_text(json.dumps(stats, indent=2))
    return stats

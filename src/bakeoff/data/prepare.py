"""The `data` stage's work: check the task's rows, settle the label set and the generation budget, split, and write
data/prepared/ with stats.json.

Checks, each reported in stats.json and on stderr (``warning: ...``) with what params say to do: duplicate rows
(``task.duplicates``), training prompts that are also in val or test (``task.leakage``), rows longer than
``train_defaults.max_seq_len`` (``task.overlong``), and a ``task.max_new_tokens`` shorter than a reference answer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.data.examples import DataError, Example, file_hash, read_examples, read_pairs, write_jsonl
from bakeoff.data.splits import split
from bakeoff.data.stats import closed_labels, generation_budget, row_tokens, token_stats, warn

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


# ---------------------------------------------------------------- checks


def _prompt_key(ex: Example) -> str:
    return json.dumps([" ".join(m["content"].split()) for m in ex.messages if m["role"] != "system"])


def _row_key(ex: Example) -> str:
    return _prompt_key(ex) + "\u0000" + " ".join(ex.completion.split())


def drop_duplicates(rows: list[Example], policy: str) -> tuple[list[Example], dict]:
    """Rows with the same prompt and answer (whitespace aside) as an earlier row: dropped, kept or an error."""
    first: dict[str, Example] = {}
    keep, dups = [], []
    for ex in rows:
        k = _row_key(ex)
        if k in first:
            dups.append(f"{ex.source} repeats {first[k].source}")
            if policy == "error":
                raise DataError(
                    f"{ex.source}: the same prompt and answer as {first[k].source} "
                    "(task.duplicates: error; set drop or keep)"
                )
            if policy == "drop":
                continue
        else:
            first[k] = ex
        keep.append(ex)
    if dups:
        warn(
            f"{len(dups)} duplicate row(s), {'dropped' if policy == 'drop' else 'kept'} (task.duplicates): "
            + "; ".join(dups[:3])
            + (" ..." if len(dups) > 3 else "")
        )
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
                raise DataError(
                    f"{ex.source}: the same prompt is in the {hit[0]} split ({hit[1].source}): "
                    "test results would be inflated (task.leakage: error; set drop or keep)"
                )
            if policy == "drop":
                continue
        keep.append(ex)
    if leaks:
        warn(
            f"{len(leaks)} training row(s) leak into val/test, "
            f"{'dropped from train' if policy == 'drop' else 'kept'} "
            "(task.leakage): " + "; ".join(leaks[:3]) + (" ..." if len(leaks) > 3 else "")
        )
    return keep, {"count": len(leaks), "policy": policy, "examples": leaks[:10]}


def handle_overlong(tok, rows: list[Example], max_len: int, policy: str) -> tuple[list[Example], dict]:
    """Rows longer than ``max_len`` tokens: counted, then kept for the trainer to truncate, or dropped."""
    long = [(ex, n) for ex in rows if (n := row_tokens(tok, ex)) > max_len]
    if long:
        warn(
            f"{len(long)} training row(s) exceed max_seq_len {max_len} tokens, "
            f"{'dropped' if policy == 'drop' else 'truncated when training'} (task.overlong): "
            + "; ".join(f"{ex.source} ({n} tokens)" for ex, n in long[:3])
            + (" ..." if len(long) > 3 else "")
        )
    ids = {id(ex) for ex, _ in long}
    keep = [ex for ex in rows if id(ex) not in ids] if policy == "drop" else rows
    return keep, {
        "count": len(long),
        "policy": policy,
        "max_seq_len": max_len,
        "examples": [f"{ex.source} ({n} tokens)" for ex, n in long[:10]],
    }


def overlong(tok, splits: dict, checks: dict, max_len: int, policy: str) -> None:
    """Rows over the training window in every split (``task.overlong``): train's by ``handle_overlong``, val's and
    test's prompts by ``fit_prompts``, so evaluation meets no prompt longer than the window; counted in ``checks``."""
    splits["train"], checks["overlong"] = handle_overlong(tok, splits["train"], max_len, policy)
    for name in ("val", "test"):
        splits[name], checks[f"overlong_{name}"] = fit_prompts(tok, splits[name], max_len, policy, name)
        if not splits[name]:
            raise DataError(
                f"task.overlong: every {name} row's prompt exceeds train_defaults.max_seq_len "
                f"({max_len} tokens) and was dropped: raise max_seq_len"
            )


def prompt_length(tok, messages: list[dict]) -> int:
    """Tokens of a prompt in the chat template, as generation feeds it (with the assistant's opening)."""
    ids = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    if hasattr(ids, "input_ids") or isinstance(ids, dict):
        ids = ids["input_ids"]
    return len(ids)


def fit_prompts(tok, rows: list[Example], max_len: int, policy: str, split: str) -> tuple[list[Example], dict]:
    """Val or test rows whose prompt alone exceeds ``max_len`` tokens (the training window): with ``truncate``, the
    last user turn cut from the left (its end, where the question usually is, kept) until the prompt fits; with
    ``drop``, the row left out. Either way counted and said, so no arm is evaluated on a prompt longer than the
    window every variant trained on (one 200,000-token test row would otherwise reach every arm)."""
    out, long = [], []
    for ex in rows:
        n = prompt_length(tok, ex.messages)
        if n <= max_len:
            out.append(ex)
            continue
        long.append(f"{ex.source} ({n} tokens)")
        if policy == "drop":
            continue
        ids = tok(ex.messages[-1]["content"], add_special_tokens=False)["input_ids"]
        cut = n - max_len
        while cut < len(ids):  # decoding can shift a token either way: recount, cut a little more if needed
            ex.messages[-1] = {**ex.messages[-1], "content": tok.decode(ids[cut:])}
            if prompt_length(tok, ex.messages) <= max_len:
                break
            cut += 8
        if cut < len(ids):
            out.append(ex)  # else the rest of the prompt alone (a system prompt) overflows: left out, counted
    if long:
        warn(
            f"{len(long)} {split} row(s) have a prompt over max_seq_len {max_len} tokens, "
            f"{'dropped' if policy == 'drop' else 'cut from the left to fit'} (task.overlong): "
            + "; ".join(long[:3])
            + (" ..." if len(long) > 3 else "")
        )
    return out, {"count": len(long), "policy": policy, "max_seq_len": max_len, "kept": len(out), "examples": long[:10]}


SMALL_TRAIN = 50  # fewer training rows than this: a fine-tune (and the curve's shares) learns from very little


def remarks(t, splits: dict, labels) -> dict[str, str]:
    """What passes the checks but a buyer should hear: a task file DVC does not track (outside data/raw/, editing it
    reruns nothing), a single answer (a constant scores 100%), a very small train split."""
    out = {}
    files = {k: getattr(t, k) for k in ("train", "val", "test", "prefs") if getattr(t, k)}
    outside = [
        f"task.{k} ({v})" for k, v in files.items() if not Path(v).resolve().is_relative_to(Path("data/raw").resolve())
    ]
    if outside:
        out["untracked_files"] = (
            f"{', '.join(outside)} lie outside data/raw/, which dvc.yaml tracks: editing them "
            "reruns nothing; move them under data/raw/"
        )
    answers = {ex.completion.strip() for ex in splits["train"]}
    if len(answers) == 1 or (isinstance(labels, list) and len(labels) == 1):
        out["one_answer"] = (
            f"every training row has the same answer ({next(iter(answers))!r}): a constant scores "
            "100% on a test split like it, so no comparison here says anything"
        )
    if len(splits["train"]) < SMALL_TRAIN:
        out["small_train"] = (
            f"{len(splits['train'])} training rows: under {SMALL_TRAIN}, a fine-tune learns from "
            "very little and the data-value curve's shares from less; expect wide intervals"
        )
    return out


def small_val(n_val: int, labels) -> str | None:
    """A warning when the validation split is too small for the label set to judge a search or early stopping: under
    two rows per label most labels are never seen there."""
    n_labels = len(labels) if isinstance(labels, list) else 0
    if n_labels and n_val < 2 * n_labels:
        return (
            f"the validation split has {n_val} rows for {n_labels} labels (under 2 a label): searches and early "
            f"stopping judge on few of them; set task.val_size to {2 * n_labels} or more if train can spare it"
        )
    return None


def prepare_pairs(t, kw: dict, out_dir: Path, stats: dict) -> None:
    """The task's preference pairs (``t.prefs``, in their own columns) split and written beside the rows, their
    counts in ``stats``; too few to spare a val split: DPO trains unsearched, and ``stats`` says so."""
    pairs = read_pairs(t.prefs, **{**kw, "columns": t.prefs_columns})  # the pairs' own columns
    try:  # val pairs judge DPO's search, early stopping and convergence, as val rows do for the others
        p = split(pairs, t.val_size, t.test_size, t.seed, f"preference pairs of {t.prefs}")
    except DataError:  # too few pairs to spare a val split: DPO trains unsearched, judged on its training loss
        try:
            p = split(pairs, None, t.test_size, t.seed, f"preference pairs of {t.prefs}")
        except DataError as e:
            raise DataError(f"{t.prefs}: {len(pairs)} preference pairs: {e}") from None
        stats["checks"]["prefs_val"] = f"{len(pairs)} pairs leave none for a val split: DPO is not searched"
    for name in ("train", "val", "test"):
        write_jsonl(out_dir / f"prefs_{name}.jsonl", p[name])
    stats["splits"].update({f"prefs_{name}": len(p[name]) for name in ("train", "val", "test")})


def prepare_corpus(path: str, splits: dict, out_dir: Path) -> tuple[dict, str | None]:
    """task.corpus read and checked (``bakeoff.data.corpus``) into corpus.jsonl: (its figures for stats.json, a
    warning where rows name documents the corpus lacks, whose recall cannot be met)."""
    from bakeoff.data.corpus import read_corpus

    docs = read_corpus(path)
    write_jsonl(out_dir / "corpus.jsonl", docs)
    named = [e for rows in splits.values() for e in rows if e.doc]
    unknown = sorted({e.doc for e in named} - {d.id for d in docs})
    said = f"{len(unknown)} documents named by rows are not in task.corpus ({path}), e.g. {unknown[:3]}"
    words = sum(len(d.text.split()) for d in docs)
    return {"docs": len(docs), "words": words, "rows_naming_a_doc": len(named)}, said if unknown else None


def prepare(params: Params, out_dir: str | Path, tokenizer) -> dict:
    """Read, validate, check and split the task's raw files into ``out_dir``; return the stats record."""
    t = params.task
    out_dir = Path(out_dir)
    kw = {"fmt": t.format, "columns": t.columns, "template": t.prompt_template, "system": t.system_prompt}
    checks = {}
    train, checks["duplicates"] = drop_duplicates(read_examples(t.train, **kw), t.duplicates)
    splits = {"train": train}
    if t.test:
        splits["test"] = read_examples(t.test, **kw)
    if t.val:
        splits["val"] = read_examples(t.val, **kw)
    if not t.test or not t.val:
        carved = split(
            train, None if t.val else t.val_size, None if t.test else t.test_size, t.seed, f"rows of {t.train}"
        )
        splits = {**carved, **{k: v for k, v in splits.items() if k != "train"}}
    splits["train"], checks["leakage"] = drop_leakage(
        splits["train"], {k: splits[k] for k in ("val", "test")}, t.leakage
    )
    overlong(tokenizer, splits, checks, params.train_defaults.max_seq_len, t.overlong)
    if not splits["train"]:
        raise DataError(f"{t.train}: no training rows left after the checks ({json.dumps(checks)[:300]})")
    for name in ("train", "val", "test"):
        for i, ex in enumerate(splits[name]):
            ex.id = i
        write_jsonl(out_dir / f"{name}.jsonl", splits[name])
    stats = {
        "splits": {k: len(v) for k, v in splits.items()},
        "data_hash": None,
        "tokens": {k: token_stats(tokenizer, v) for k, v in splits.items()},
        "labels": closed_labels(splits["train"], t.labels, t.metric),
        "generation": generation_budget(tokenizer, splits, t.max_new_tokens),
        "checks": checks,
    }
    corpus, corpus_said = prepare_corpus(t.corpus, splits, out_dir) if t.corpus else (None, None)
    if corpus:
        stats.update(corpus=corpus)
    for key, said in {
        "val_labels": small_val(len(splits["val"]), stats["labels"]),
        "corpus": corpus_said,
        **remarks(t, splits, stats["labels"]),
    }.items():
        if said:
            checks[key] = said
            warn(said)
    if t.prefs:
        prepare_pairs(t, kw, out_dir, stats)
    # what a run trains and is chosen on: the raw files and the splits carved from them (val_size, seed, the checks
    # change those), so a search or a resumable checkpoint made on other splits is never taken for this one
    carved = ["train", "val"] + (["prefs_train", "prefs_val"] if t.prefs else []) + (["corpus"] if t.corpus else [])
    stats["data_hash"] = file_hash(t.train, t.val, t.test, t.prefs, *(out_dir / f"{f}.jsonl" for f in carved))
    (out_dir / "stats.json").write_text(json.dumps(stats, indent=2))
    return stats

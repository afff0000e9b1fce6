"""A task's documents (``task.corpus``) for retrieval-augmented prompts: read, cut into passages, searched.

A corpus is a folder of ``.txt`` / ``.md`` files (a document each, its id the path inside the folder) or a JSONL
file of ``{"id": ..., "text": ...}`` rows. The data stage checks it and writes it to data/prepared/corpus.jsonl; a
baseline with ``passages: k`` then puts the k passages that BM25 and the embeddings rank highest (fused by
reciprocal rank, ``bakeoff.data.retrieval.Index``) before each item's question. The query is the item's prompt only.

    docs = read_corpus("data/raw/handbook")
    find = Passages(docs, k=4, chunk_words=120, embedder="all-minilm-l6-v2")
    with_passages(example.messages, find(example))
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from bakeoff.data.examples import DataError, Example
from bakeoff.data.retrieval import Index, prompt_text

SUFFIXES = (".txt", ".md")
LEAD = "Answer the question from these passages."


@dataclass(frozen=True)
class Document:
    id: str  # its path inside the corpus folder, or its JSONL row's id
    text: str

    def to_json(self) -> dict:
        return {"id": self.id, "text": self.text}


@dataclass(frozen=True)
class Passage:
    doc: str  # the document's id
    text: str


def read_corpus(path: str | Path) -> list[Document]:
    """The documents of a folder of text files or a JSONL file; a DataError names the file (and line)."""
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix.lower() in SUFFIXES)
        docs = [Document(str(f.relative_to(p)), f.read_text(encoding="utf-8", errors="replace")) for f in files]
    elif p.is_file() and p.suffix.lower() == ".jsonl":
        docs = []
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise DataError(f"{p}:{n}: not JSON ({e})") from None
            if not isinstance(row, dict) or not isinstance(row.get("text"), str):
                found = sorted(row)[:6] if isinstance(row, dict) else type(row).__name__
                raise DataError(f"{p}:{n}: a corpus row needs 'text' (and an 'id'); found {found}")
            docs.append(Document(str(row.get("id", n)), row["text"]))  # other keys (a title, a URL) are left
    elif p.exists():
        raise DataError(f"task.corpus: {p} is neither a folder of {'/'.join(SUFFIXES)} files nor a .jsonl file")
    else:
        raise DataError(f"task.corpus: {p} does not exist")
    docs = [d for d in docs if d.text.strip()]
    if not docs:
        raise DataError(f"task.corpus: {p} holds no document with text")
    return docs


def prepared(data_dir: str | Path) -> list[Document] | None:
    """The corpus the data stage wrote (``data_dir``/corpus.jsonl), or None where the task has none."""
    f = Path(data_dir) / "corpus.jsonl"
    return [Document(**json.loads(x)) for x in f.read_text().splitlines() if x.strip()] if f.exists() else None


def chunk(docs: list[Document], words: int) -> list[Passage]:
    """Each document cut into passages of at most ``words`` words, whole paragraphs where they fit."""
    out = []
    for d in docs:
        current: list[str] = []
        for para in (x.split() for x in d.text.split("\n\n")):
            while len(para) > words:  # a paragraph longer than a passage: cut it
                if current:
                    out.append(Passage(d.id, " ".join(current)))
                    current = []
                out.append(Passage(d.id, " ".join(para[:words])))
                para = para[words:]
            if current and len(current) + len(para) > words:
                out.append(Passage(d.id, " ".join(current)))
                current = []
            current += para
        if current:
            out.append(Passage(d.id, " ".join(current)))
    return out


class Passages:
    """An example → the k passages of the corpus most relevant to its prompt, best first."""

    def __init__(self, docs: list[Document], k: int, chunk_words: int, embedder: str):
        self.k, self.passages = k, chunk(docs, chunk_words)
        self.index = Index([p.text for p in self.passages], embedder, lexical=True)
        self.found: dict[tuple, list[str]] = {}  # (source, id) of an example → the documents its passages came from

    def __call__(self, ex: Example) -> list[Passage]:
        got = [self.passages[i] for i in self.index.search(prompt_text(ex), self.k)]
        self.found[(ex.source, ex.id)] = [p.doc for p in got]
        return got

    def ranked(self, ex: Example) -> list[Passage]:
        """Every passage, the most relevant to the example's prompt first (RAFT's distractors are read from it)."""
        return [self.passages[i] for i in self.index.search(prompt_text(ex), self.index.n)]


def with_passages(messages: list[dict], passages: list[Passage]) -> list[dict]:
    """The messages with the passages (best first) numbered before the last user turn's question, the best last,
    nearest the question."""
    if not passages:
        return messages
    block = "\n\n".join(f"[{i}] {p.text}" for i, p in enumerate(reversed(passages), 1))  # the best last
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    out = [dict(m) for m in messages]
    out[last]["content"] = f"{LEAD}\n\n{block}\n\nQuestion: {messages[last]['content']}"
    return out


def recall_figures(examples: list[Example], find: Passages) -> dict:
    """A run asked with passages: ``retrieval_k``, and where examples name their gold document, ``retrieval_recall``
    (recall@k over the examples asked so far, ``recall``) and ``recall_items`` (how many named one)."""
    share, named = recall(examples, find.found)
    return {"retrieval_k": find.k, **({"retrieval_recall": share, "recall_items": named} if named else {})}


def recall(examples: list[Example], found: dict[tuple, list[str]]) -> tuple[float | None, int]:
    """(share of the examples naming their gold document whose passages include it, how many name one)."""
    named = [e for e in examples if e.doc and (e.source, e.id) in found]
    if not named:
        return None, 0
    return round(sum(e.doc in found[(e.source, e.id)] for e in named) / len(named), 4), len(named)

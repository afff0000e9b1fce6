"""A fine-tuned variant with retrieval (``passages: k`` on a variant): asked with the k passages of task.corpus that
retrieval ranks highest, as the RAG baseline is asked (``bakeoff.data.corpus``), on validation (its search, its early
stopping) and on test. What it trains on:

- ``raft: null`` (the default): the plain prompts, so retrieval is added at test time only (fine-tune + RAG);
- ``raft: p``: RAFT (Zhang et al. 2024, "RAFT: Adapting Language Model to Domain Specific RAG"): every training prompt
  carries k passages. For a share ``p`` of the rows that name their gold document (a ``doc`` column), one of them is
  the gold document's best passage, in a random place among k−1 distractors; the other rows carry k distractors and
  no gold passage. A distractor is a passage of another document, the highest ranked first (hard negatives), so the
  model learns to find the answer among passages that look like it, and to answer when retrieval missed. Rows that
  name no gold document carry what retrieval finds.

    use = VariantPassages.of(v, prepared(data_dir), "all-minilm-l6-v2")   # None for a variant without passages
    rows = use.training(rows, seed=0)                                       # RAFT's rows, or the plain ones
    test = use.asked(test)                                                  # the prompts as it is asked them

The query is the prompt only (``retrieval.prompt_text``), never the answer; the gold document is read only from the
training rows, never at validation or test.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from bakeoff.core.runs import Skipped
from bakeoff.data.corpus import Document, Passages, recall_figures, with_passages
from bakeoff.data.examples import Example


def no_corpus(name: str) -> str:
    return (
        f"no task.corpus: variant {name!r} is asked with passages of the task's documents "
        "(set task.corpus to a folder of .txt/.md files or a JSONL of {id, text})"
    )


@dataclass
class VariantPassages:
    """A variant's retrieval: its passages finder, and whether (and how) it trains on passages."""

    find: Passages
    raft: float | None

    @classmethod
    def of(cls, v, corpus: list[Document] | None, embedder: str) -> VariantPassages | None:
        """None for a variant without ``passages``; raises ``Skipped`` where the task has no corpus (the arm's status
        says why, and the run goes on)."""
        if not getattr(v, "passages", 0):
            return None
        if not corpus:
            raise Skipped(no_corpus(v.name))
        return cls(Passages(corpus, v.passages, v.chunk_words, embedder), v.raft)

    def asked(self, examples: list[Example]) -> list[Example]:
        """The examples as the variant is asked them: each with its k retrieved passages, the best last."""
        return [replace(e, messages=with_passages(e.messages, self.find(e))) for e in examples]

    def training(self, rows: list[Example], seed: int) -> list[Example]:
        """The rows it trains on: RAFT's (``raft: p``), or the plain prompts (``raft: null``)."""
        if self.raft is None:
            return rows
        return raft_rows(rows, self.find, self.raft, seed)

    def recall(self, examples: list[Example]) -> dict:
        """The retrieval figures of the examples asked so far (``corpus.recall_figures``)."""
        return recall_figures(examples, self.find)


def raft_rows(rows: list[Example], find: Passages, oracle: float, seed: int) -> list[Example]:
    """RAFT's training rows (the module's docstring): k passages each, the gold one in a share ``oracle`` of the rows
    that name their document, in a place drawn at random; the rest of the k the highest-ranked passages of other
    documents."""
    rng, k, out = random.Random(seed), find.k, []
    for e in rows:
        ranked = find.ranked(e)
        if not e.doc:
            got = ranked[:k]
        else:
            gold = next((p for p in ranked if p.doc == e.doc), None)
            distractors = [p for p in ranked if p.doc != e.doc]
            if gold is not None and rng.random() < oracle:
                got = distractors[: k - 1]
                got.insert(rng.randrange(len(got) + 1), gold)
            else:
                got = distractors[:k]
        out.append(replace(e, messages=with_passages(e.messages, got)))
    return out


class TooLong(ValueError):
    """Rows with their passages longer than the variant's max_seq_len: the trainer would cut their answers off. The
    arm's ``failed`` status, with what to change; not a stop of the pipeline (not a ``UserError``)."""


def variant_rows(technique, v, data_dir, embedder: str, base_dir=None) -> tuple[list, list | None]:
    """Variant ``v``'s training and validation rows as it trains on them: ``technique``'s rows, with RAFT's passages
    on the training rows and the retrieved ones on the validation rows where ``v`` has ``passages``. With
    ``base_dir`` (its tokenizer), a row that no longer fits ``max_seq_len`` raises ``TooLong``."""
    from bakeoff.data.corpus import prepared

    rows, val = technique.load_rows(data_dir), technique.val_rows(data_dir)
    use = VariantPassages.of(v, prepared(data_dir), embedder)
    if use is None:
        return rows, val
    rows, val = use.training(rows, v.train.seed), (use.asked(val) if val else val)
    if base_dir is not None:
        check_fits(rows + (val or []), base_dir, v)
    return rows, val


def check_fits(rows: list[Example], base_dir, v) -> None:
    """Every row, prompt and passages and answer in the chat template, within ``v.train.max_seq_len`` tokens."""
    from bakeoff.core.models import load_tokenizer
    from bakeoff.data.stats import row_tokens

    tok = load_tokenizer(base_dir)
    longest = max((row_tokens(tok, e) for e in rows), default=0)
    if longest > v.train.max_seq_len:
        raise TooLong(
            f"variants.{v.name}: a row with its {v.passages} passages is {longest} tokens, over max_seq_len "
            f"{v.train.max_seq_len}, so training would cut its answer off: set variants.{v.name}.max_seq_len: "
            f"{longest} or more, or fewer passages / a smaller chunk_words ({v.chunk_words})"
        )

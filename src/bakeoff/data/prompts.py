"""Prompts: chat rendering in the base model's template, prompt/answer encoding, and few-shot selection.

Every baseline, variant, log-probability and lm-eval task sees prompts rendered here, so they see the same tokens.
Shots come as earlier chat turns: the same seeded k for every item (``fixed``) or the k training examples most
similar to each item: ``nearest`` (TF-IDF), ``nearest_dense`` (an embedding model) or ``hybrid`` (BM25 and the
embeddings fused; ``bakeoff.data.retrieval``).
"""

from __future__ import annotations

import random

from bakeoff.data.examples import DataError, Example
from bakeoff.data.retrieval import SHIPPED_EMBEDDER, prompt_text


def render_prompt(tok, messages: list[dict]) -> str:
    """The chat prompt as text, ending where the assistant's answer begins."""
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def encode(tok, text: str) -> list[int]:
    """Token ids of already rendered text (the template has placed any special tokens)."""
    return tok(text, add_special_tokens=False)["input_ids"]


def prompt_and_full(tok, msgs: list[dict], completion: str) -> tuple[list[int], int]:
    """Token ids of prompt + completion (end-of-turn included) in the chat template, and the prompt's length."""
    prompt = render_prompt(tok, msgs)
    full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": completion}], tokenize=False)
    p_ids, f_ids = encode(tok, prompt), encode(tok, full)
    if f_ids[: len(p_ids)] != p_ids:  # the template rendered the prompt differently: fall back to concat
        f_ids = p_ids + encode(tok, full[len(prompt) :])
    return f_ids, len(p_ids)


def few_shot_messages(ex: Example, shots: list[Example], instruction: str | None = None) -> list[dict]:
    """The example's prompt preceded by solved examples as earlier chat turns (system prompt kept first;
    a baseline's ``instruction`` is appended to it, or becomes it)."""
    system = [dict(m) for m in ex.messages if m["role"] == "system"]
    if instruction:
        if system:
            system[0]["content"] = f"{system[0]['content']}\n\n{instruction}"
        else:
            system = [{"role": "system", "content": instruction}]
    turns = []
    for s in shots:
        turns += [m for m in s.messages if m["role"] != "system"]
        turns.append({"role": "assistant", "content": s.completion})
    return system + turns + [m for m in ex.messages if m["role"] != "system"]


def fixed_shots(train: list[Example], k: int, seed: int) -> list[Example]:
    """k training examples chosen once by seed: the same shots for every test item."""
    if k == 0:
        return []
    if k > len(train):
        raise DataError(f"few-shot asks for {k} examples but the train split has {len(train)}")
    rng = random.Random(seed)
    return rng.sample(train, k)


class NearestShots:
    """The k training examples most similar to a test prompt: TF-IDF over word uni- and bigrams, cosine
    similarity, ties broken by train order. Deterministic; the most similar shot comes last, nearest the
    question."""

    def __init__(self, train: list[Example], k: int):
        from sklearn.feature_extraction.text import TfidfVectorizer

        if k > len(train):
            raise DataError(f"few-shot asks for {k} examples but the train split has {len(train)}")
        self.train, self.k = train, k
        self.vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)
        self.matrix = self.vectorizer.fit_transform([prompt_text(e) for e in train]) if k else None

    def __call__(self, ex: Example) -> list[Example]:
        if not self.k:
            return []
        import numpy as np

        sims = (self.matrix @ self.vectorizer.transform([prompt_text(ex)]).T).toarray().ravel()
        order = np.lexsort((np.arange(len(sims)), -sims))[: self.k]  # highest first; ties: lower index
        return [self.train[i] for i in order[::-1]]


SIMILAR = {"nearest": "TF-IDF", "nearest_dense": "embeddings", "hybrid": "BM25 and embeddings fused"}  # per item


def shot_picker(train: list[Example], k: int, selection: str, seed: int, embedder: str = SHIPPED_EMBEDDER):
    """Example → its shots: the same seeded k for every item (``fixed``) or the k most similar (``SIMILAR``'s
    selections; ``embedder``: ``retrieval.embedder``, for the two that embed)."""
    if selection == "nearest":
        return NearestShots(train, k)
    if selection in ("nearest_dense", "hybrid"):
        from bakeoff.data.retrieval import DenseShots, HybridShots

        return (DenseShots if selection == "nearest_dense" else HybridShots)(train, k, embedder)
    shots = fixed_shots(train, k, seed)
    return lambda ex: shots


class Prompter:
    """Example → the messages a prompting baseline sends: its shots (``shot_picker``), its instruction and, with
    ``passages: k``, the k passages of the task's corpus most relevant to the item (``bakeoff.data.corpus``), each
    shot's question with its own k passages too.
    ``b``: anything with shots, selection, instruction, passages and chunk_words (a baseline, or one with a search's
    values); ``corpus``: data/prepared/corpus.jsonl's documents (None: the task has none, and a baseline that asks
    for passages is ``skipped``)."""

    def __init__(self, b, train: list[Example], seed: int, embedder: str, corpus: list | None = None):
        self.b, self.pick, self.passages = b, shot_picker(train, b.shots, b.selection, seed, embedder), None
        if getattr(b, "passages", 0):
            from bakeoff.core.runs import Skipped
            from bakeoff.data.corpus import Passages

            if not corpus:
                raise Skipped(
                    "no task.corpus: this baseline retrieves passages from the task's documents "
                    "(set task.corpus to a folder of .txt/.md files or a JSONL of {id, text})"
                )
            self.passages = Passages(corpus, b.passages, b.chunk_words, embedder)

    def __call__(self, ex: Example) -> list[dict]:
        from dataclasses import replace

        from bakeoff.data.corpus import with_passages

        if not self.passages:
            return few_shot_messages(ex, self.pick(ex), self.b.instruction)
        # each shot with its own passages, so the shots show how an answer is read out of them
        shots = [replace(s, messages=with_passages(s.messages, self.passages(s))) for s in self.pick(ex)]
        return with_passages(few_shot_messages(ex, shots, self.b.instruction), self.passages(ex))

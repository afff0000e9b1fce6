"""Prompts: chat rendering in the base model's template, prompt/answer encoding, and few-shot selection.

Every baseline, variant, log-probability and lm-eval task sees prompts rendered here, so they see the same tokens.
Shots come as earlier chat turns: the same seeded k for every item (``fixed``) or the k training examples most
similar to each item (``nearest``, TF-IDF).
"""

from __future__ import annotations

import random

from bakeoff.data.examples import DataError, Example


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


def _prompt_text(ex: Example) -> str:
    return "\n".join(m["content"] for m in ex.messages if m["role"] != "system")


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
        self.matrix = self.vectorizer.fit_transform([_prompt_text(e) for e in train]) if k else None

    def __call__(self, ex: Example) -> list[Example]:
        if not self.k:
            return []
        import numpy as np

        sims = (self.matrix @ self.vectorizer.transform([_prompt_text(ex)]).T).toarray().ravel()
        order = np.lexsort((np.arange(len(sims)), -sims))[: self.k]  # highest first; ties: lower index
        return [self.train[i] for i in order[::-1]]


def shot_picker(train: list[Example], k: int, selection: str, seed: int):
    """Example → its shots: the same seeded k for every item (``fixed``) or the k nearest (``nearest``)."""
    if selection == "nearest":
        return NearestShots(train, k)
    shots = fixed_shots(train, k, seed)
    return lambda ex: shots

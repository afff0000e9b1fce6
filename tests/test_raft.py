"""A fine-tuned variant with retrieval (bakeoff.data.raft): RAFT's training rows (the gold passage among
distractors, in the share asked for), fine-tune + RAG at test time, the checks on params.yaml, and the skipped path.
The shipped handbook and its corpus, the shipped embedder (the real model, not a stub)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bakeoff.core.config import load_params
from bakeoff.core.errors import UserError
from bakeoff.core.runs import Skipped
from bakeoff.core.schema import ParamsError
from bakeoff.core.sections import VariantConfig
from bakeoff.data.corpus import LEAD, Passages, read_corpus
from bakeoff.data.examples import read_examples
from bakeoff.data.raft import VariantPassages, raft_rows

ROOT = Path(__file__).parents[1]
EMBEDDER = "all-minilm-l6-v2"


@pytest.fixture(scope="module")
def handbook():
    rows = read_examples(ROOT / "data" / "raw" / "handbook.jsonl")[:48]
    find = Passages(read_corpus(ROOT / "data" / "raw" / "handbook"), 3, 60, EMBEDDER)
    return rows, find


def carried(e, find) -> list[str]:
    """The documents of the passages an example's prompt carries, in the order they stand."""
    by_text = {p.text: p.doc for p in find.passages}
    user = e.messages[-1]["content"]
    assert user.startswith(LEAD)
    block = user[len(LEAD) : user.index("\n\nQuestion: ")].strip()
    return [by_text[part.split("] ", 1)[1]] for part in block.split("\n\n")]


def test_raft_rows_hold_the_gold_passage_among_distractors_in_the_share_asked(handbook):
    rows, find = handbook
    every = raft_rows(rows, find, 1.0, seed=0)
    for e, r in zip(rows, every):
        docs = carried(r, find)
        assert len(docs) == 3 and docs.count(e.doc) == 1  # the gold passage once, two distractors
        assert r.completion == e.completion and r.messages[-1]["content"].endswith(
            "Question: " + e.messages[-1]["content"]
        )
    assert len({carried(r, find).index(e.doc) for e, r in zip(rows, every)}) == 3  # its place drawn, not always last
    none = raft_rows(rows, find, 0.0, seed=0)
    assert all(e.doc not in carried(r, find) and len(carried(r, find)) == 3 for e, r in zip(rows, none))
    # distractors are the other documents' passages retrieval ranks highest (hard negatives), in that order
    first = rows[0]
    hard = [p.doc for p in find.ranked(first) if p.doc != first.doc][:3]
    assert sorted(carried(none[0], find)) == sorted(hard)
    half = raft_rows(rows, find, 0.5, seed=0)
    share = sum(e.doc in carried(r, find) for e, r in zip(rows, half)) / len(rows)
    assert 0.3 <= share <= 0.7 and half == raft_rows(rows, find, 0.5, seed=0)  # seeded: the same rows each run
    assert rows[0].messages[-1]["content"] == first.messages[-1]["content"]  # the examples themselves unchanged


def test_a_variant_is_asked_what_retrieval_finds_and_never_reads_the_gold_document_or_the_answer(handbook):
    from dataclasses import replace

    rows, _ = handbook
    corpus = read_corpus(ROOT / "data" / "raw" / "handbook")
    v = VariantConfig(name="lora_rag", technique="lora", train=_train(), passages=2, chunk_words=60)
    use = VariantPassages.of(v, corpus, EMBEDDER)
    asked = use.asked(rows)
    blind = use.asked([replace(e, doc="elsewhere.md", completion="???") for e in rows])
    assert [e.messages for e in asked] == [e.messages for e in blind]  # neither the gold page nor the answer is read
    got = use.recall(rows)
    assert got["retrieval_k"] == 2 and got["recall_items"] == len(rows)
    assert got["retrieval_recall"] >= 0.8  # recall@2 on the handbook's questions
    assert use.training(rows, seed=0) is rows  # raft: null trains on the plain prompts (retrieval at test time only)
    raft = VariantPassages.of(replace(v, raft=0.8), corpus, EMBEDDER)
    assert all(LEAD in r.messages[-1]["content"] for r in raft.training(rows, seed=0))
    assert VariantPassages.of(replace(v, passages=0), corpus, EMBEDDER) is None
    with pytest.raises(Skipped, match="no task.corpus: variant 'lora_rag'"):
        VariantPassages.of(v, None, EMBEDDER)


def test_variant_rows_give_raft_rows_to_train_and_asked_rows_to_validate(tmp_path, handbook):
    import json

    from bakeoff.data.examples import write_jsonl
    from bakeoff.data.raft import variant_rows
    from bakeoff.train.techniques import get_technique

    rows, _ = handbook
    write_jsonl(tmp_path / "train.jsonl", rows[:30])
    write_jsonl(tmp_path / "val.jsonl", rows[30:])
    corpus = read_corpus(ROOT / "data" / "raw" / "handbook")
    lora = get_technique("lora")
    v = VariantConfig(name="raft", technique="lora", train=_train(), passages=2, raft=1.0)
    with pytest.raises(Skipped, match="no task.corpus"):
        variant_rows(lora, v, tmp_path, EMBEDDER)
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d.to_json()) + "\n" for d in corpus))
    train, val = variant_rows(lora, v, tmp_path, EMBEDDER)
    assert len(train) == 30 and len(val) == 18
    assert all(LEAD in e.messages[-1]["content"] for e in train + val)
    plain = VariantConfig(name="lora", technique="lora", train=_train())
    assert variant_rows(lora, plain, tmp_path, EMBEDDER)[0] == rows[:30]  # no passages: the rows as written


def test_rows_whose_passages_pass_max_seq_len_end_the_arm_with_what_to_change(tmp_path, tokenizer_dir, handbook):
    import json
    from dataclasses import replace

    from bakeoff.data.examples import write_jsonl
    from bakeoff.data.raft import TooLong, variant_rows
    from bakeoff.train.techniques import get_technique

    rows, _ = handbook
    write_jsonl(tmp_path / "train.jsonl", rows[:30])
    corpus = read_corpus(ROOT / "data" / "raw" / "handbook")
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d.to_json()) + "\n" for d in corpus))
    short = VariantConfig(name="raft", technique="lora", train=replace(_train(), max_seq_len=64), passages=2, raft=1.0)
    with pytest.raises(TooLong, match=r"variants\.raft: a row with its 2 passages is \d+ tokens, over max_seq_len 64"):
        variant_rows(get_technique("lora"), short, tmp_path, EMBEDDER, tokenizer_dir)
    assert not isinstance(TooLong("x"), UserError)  # the arm's failure, not the pipeline's stop
    fits = replace(short, train=replace(_train(), max_seq_len=1024))
    assert len(variant_rows(get_technique("lora"), fits, tmp_path, EMBEDDER, tokenizer_dir)[0]) == 30


def _train():
    from bakeoff.core.sections import TrainConfig

    return TrainConfig()


def test_params_take_passages_and_raft_on_a_variant_and_name_the_key_when_wrong(tmp_path):
    base = (ROOT / "params.yaml").read_text()
    path = tmp_path / "params.yaml"

    def load(variant: str):
        path.write_text(base.replace("\nvariants:", f"\nvariants:\n  extra: {variant}", 1))
        return load_params(path)

    v = load("{technique: lora, passages: 2, raft: 0.8}").variant("extra")
    assert (v.passages, v.chunk_words, v.raft) == (2, 120, 0.8)
    assert load("{technique: lora, passages: 4, chunk_words: 60}").variant("extra").raft is None
    for bad, where in (
        ("{technique: lora, raft: 0.8}", r"variants\.extra\.passages: raft and chunk_words need passages"),
        ("{technique: lora, passages: 2, raft: 1.5}", r"variants\.extra\.raft: is the share of rows"),
        ("{technique: lora, passages: -1}", r"variants\.extra\.passages: must be a whole number"),
        ("{technique: lora, passages: 2, chunk_words: 5}", r"variants\.extra\.chunk_words: must be a whole number"),
        ("{technique: lora, pasages: 2}", r"variants\.extra\.pasages: unknown option .*did you mean 'passages'"),
    ):
        with pytest.raises(ParamsError, match=where):
            load(bad)
    assert load("{technique: lora}").variant("extra").passages == 0

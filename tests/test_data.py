"""Readers and validation: every bad row is named by file and line; formats map onto one Example."""

import json

import pandas as pd
import pytest
from conftest import write_jsonl

from bakeoff.data.examples import DataError, read_examples, read_pairs
from bakeoff.data.prompts import few_shot_messages, fixed_shots
from bakeoff.data.splits import split

GOOD = {"prompt": "Is the sky blue?", "completion": "yes"}


def test_prompt_completion_jsonl(tmp_path):
    exs = read_examples(write_jsonl(tmp_path / "t.jsonl", [GOOD, GOOD]))
    assert len(exs) == 2
    assert exs[0].messages == [{"role": "user", "content": "Is the sky blue?"}]
    assert exs[0].completion == "yes"
    assert exs[1].source.endswith("t.jsonl:2")


def test_messages_jsonl_keeps_turns_and_takes_last_assistant(tmp_path):
    row = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
        ]
    }
    (ex,) = read_examples(write_jsonl(tmp_path / "m.jsonl", [row]))
    assert [m["role"] for m in ex.messages] == ["system", "user"]
    assert ex.completion == "4"


def test_malformed_json_names_file_and_line(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, GOOD, '{"prompt": "x", "completion": '])
    with pytest.raises(DataError, match=r"bad\.jsonl:3: not valid JSON"):
        read_examples(path)


def test_missing_column_names_line_and_suggests_mapping(tmp_path):
    path = write_jsonl(tmp_path / "cols.jsonl", [{"text": "great film", "label": "positive"}])
    with pytest.raises(DataError) as e:
        read_examples(path)
    msg = str(e.value)
    assert "cols.jsonl:1" in msg and "'prompt'" in msg and "'completion'" in msg
    assert 'task.columns: {"prompt": "text", "completion": "label"}' in msg


def test_empty_completion_names_line(tmp_path):
    path = write_jsonl(tmp_path / "e.jsonl", [GOOD, {"prompt": "q", "completion": "  "}])
    with pytest.raises(DataError, match=r"e\.jsonl:2: 'completion' is empty"):
        read_examples(path)


def test_not_utf8_names_line(tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + b'{"prompt": "caf\xe9", "completion": "x"}\n')
    with pytest.raises(DataError, match=r"latin\.jsonl:2: not UTF-8"):
        read_examples(path)


def test_csv_with_column_mapping_and_template(tmp_path):
    path = tmp_path / "reviews.csv"
    path.write_text('text,label\ngreat film,positive\n"dull, long",negative\n')
    exs = read_examples(path, columns={"prompt": "text", "completion": "label"}, template="Sentiment of: {prompt}")
    assert [e.completion for e in exs] == ["positive", "negative"]
    assert exs[1].messages[-1]["content"] == "Sentiment of: dull, long"
    assert exs[1].source.endswith("reviews.csv:3")


def test_csv_missing_value_names_line(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text("text,label\ngood,positive\nbad,\n")
    with pytest.raises(DataError, match=r"r\.csv:3: 'label' is empty"):
        read_examples(path, columns={"prompt": "text", "completion": "label"})


def test_parquet(tmp_path):
    path = tmp_path / "t.parquet"
    pd.DataFrame({"q": ["a?", "b?"], "a": ["A", "B"]}).to_parquet(path)
    exs = read_examples(path, columns={"prompt": "q", "completion": "a"})
    assert [e.completion for e in exs] == ["A", "B"]


def test_system_prompt_comes_first(tmp_path):
    (ex,) = read_examples(write_jsonl(tmp_path / "t.jsonl", [GOOD]), system="You label tickets.")
    assert ex.messages[0] == {"role": "system", "content": "You label tickets."}


def test_pairs_and_identical_pair_rejected(tmp_path):
    ok = {"prompt": "p", "chosen": "a", "rejected": "b"}
    assert read_pairs(write_jsonl(tmp_path / "p.jsonl", [ok]))[0].rejected == "b"
    same = write_jsonl(tmp_path / "s.jsonl", [ok, {"prompt": "p", "chosen": "a", "rejected": "a"}])
    with pytest.raises(DataError, match=r"s\.jsonl:2: 'chosen' and 'rejected' are the same"):
        read_pairs(same)


def test_split_is_seeded_disjoint_and_sized():
    items = list(range(100))
    a, b = split(items, 10, 0.2, seed=3), split(items, 10, 0.2, seed=3)
    assert a == b
    assert (len(a["train"]), len(a["val"]), len(a["test"])) == (70, 10, 20)
    assert sorted(a["train"] + a["val"] + a["test"]) == items
    assert split(items, 10, 0.2, seed=4)["test"] != a["test"]


def test_split_refuses_to_leave_no_training_rows():
    with pytest.raises(DataError, match="no training rows"):
        split(list(range(10)), 5, 5, seed=0)


def test_few_shot_turns_precede_the_question(tmp_path):
    rows = [{"prompt": f"q{i}", "completion": f"a{i}"} for i in range(5)]
    exs = read_examples(write_jsonl(tmp_path / "t.jsonl", rows), system="S")
    shots = fixed_shots(exs[:4], 2, seed=0)
    msgs = few_shot_messages(exs[4], shots)
    assert msgs[0] == {"role": "system", "content": "S"}
    assert [m["role"] for m in msgs[1:]] == ["user", "assistant", "user", "assistant", "user"]
    assert msgs[2]["content"] == shots[0].completion and msgs[-1]["content"] == "q4"
    assert fixed_shots(exs[:4], 2, seed=0) == shots  # the same shots for every test item


def test_the_shipped_clinc150_sample_reads_through_columns_with_its_150_intents():
    """data/raw/clinc150: CLINC150's own queries (CC BY 3.0, LICENSE shipped), 8 train and 1 test a label."""
    from collections import Counter
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "data/raw/clinc150"
    cols = {"prompt": "text", "completion": "intent"}
    train, test = read_examples(root / "train.csv", columns=cols), read_examples(root / "test.csv", columns=cols)
    assert (len(train), len(test)) == (1200, 150)
    assert set(Counter(e.completion for e in train).values()) == {8} and len({e.completion for e in test}) == 150
    assert {e.completion for e in test} == {e.completion for e in train}
    assert "Attribution 3.0" in (root / "LICENSE").read_text()


def test_val_size_auto_grows_with_the_data_and_a_small_val_split_for_many_labels_is_warned():
    from bakeoff.data.prepare import small_val
    from bakeoff.data.splits import auto_val

    assert [auto_val(n) for n in (60, 460, 1200, 9000)] == [30, 46, 120, 400]  # half at most, floor 40, cap 400
    assert [len(split(list(range(1350)), "auto", 150, 0)[k]) for k in ("test", "val", "train")] == [150, 120, 1080]
    assert small_val(40, [f"l{i}" for i in range(77)]).startswith("the validation split has 40 rows for 77 labels")
    assert "task.val_size to 154" in small_val(40, [f"l{i}" for i in range(77)])
    assert small_val(120, [f"l{i}" for i in range(50)]) is None and small_val(10, None) is None

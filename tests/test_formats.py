"""The row shapes people have (Alpaca, ShareGPT, OpenAI chat with a system turn) read to the same examples as their
prompt/completion twins; a bad row names its file and line; the detected shape is said; an ambiguous file is
refused with advice."""

import json

import pytest

from bakeoff.data.examples import DataError, read_examples


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


TWIN = [
    {"prompt": "Translate: chat", "completion": "cat"},
    {"prompt": "Translate: chien\n\nOne word.", "completion": "dog"},
]


def same(a, b):
    return [(e.messages, e.completion) for e in a] == [(e.messages, e.completion) for e in b]


def test_alpaca_reads_as_its_prompt_completion_twin_and_says_so(tmp_path, capsys):
    twin = read_examples(write(tmp_path / "twin.jsonl", TWIN))
    alpaca = write(
        tmp_path / "alpaca.jsonl",
        [
            {"instruction": "Translate: chat", "input": "", "output": "cat"},
            {"instruction": "Translate: chien", "input": "One word.", "output": "dog"},
        ],
    )
    assert same(read_examples(alpaca), twin)
    assert f"{alpaca}: read as Alpaca (instruction, input, output)" in capsys.readouterr().out
    bad = write(tmp_path / "bad.jsonl", [{"instruction": "a", "output": "b"}, {"instruction": "c", "answer": "d"}])
    with pytest.raises(DataError, match=rf"{bad}:2: missing 'output'"):
        read_examples(bad)


def test_sharegpt_and_openai_chat_with_a_system_turn_read_as_their_twin(tmp_path, capsys):
    sys_twin = read_examples(write(tmp_path / "twin.jsonl", TWIN), system="Be brief.")
    share = write(
        tmp_path / "share.jsonl",
        [
            {
                "conversations": [
                    {"from": "system", "value": "Be brief."},
                    {"from": "human", "value": r["prompt"]},
                    {"from": "gpt", "value": r["completion"]},
                ]
            }
            for r in TWIN
        ],
    )
    chat = write(
        tmp_path / "chat.jsonl",
        [
            {
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": r["prompt"]},
                    {"role": "assistant", "content": r["completion"]},
                ]
            }
            for r in TWIN
        ],
    )
    assert same(read_examples(share), sys_twin) and same(read_examples(chat), sys_twin)
    out = capsys.readouterr().out
    assert "read as ShareGPT (conversations: from/value)" in out and "read as chat messages" in out
    bad = write(
        tmp_path / "bad.jsonl",
        [
            {"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]},
            {"conversations": [{"from": "robot", "value": "a"}]},
        ],
    )
    with pytest.raises(DataError, match=rf"{bad}:2: conversations\[0\].from is 'robot'; use human, gpt or system"):
        read_examples(bad)
    chat_bad = write(tmp_path / "chat_bad.jsonl", [{"messages": [{"role": "user", "content": "a"}]}])
    with pytest.raises(DataError, match=rf"{chat_bad}:1: the last message must be the assistant's answer"):
        read_examples(chat_bad)


def test_an_ambiguous_file_is_refused_with_advice_and_a_mapping_settles_it(tmp_path):
    both = write(tmp_path / "both.jsonl", [{"prompt": "p", "completion": "c", "instruction": "i", "output": "o"}])
    with pytest.raises(
        DataError,
        match=r"both.jsonl:1: this row could be read as Alpaca .* or as prompt/completion; "
        r".*task.columns",
    ):
        read_examples(both)
    got = read_examples(both, columns={"prompt": "instruction", "completion": "output"})
    assert got[0].messages[-1]["content"] == "i" and got[0].completion == "o"


def test_a_dataset_saved_with_datasets_and_the_hubs_layout_read_through_datasets(tmp_path):
    import datasets

    twin = read_examples(write(tmp_path / "twin.jsonl", TWIN))
    datasets.Dataset.from_list(TWIN).save_to_disk(str(tmp_path / "saved"))
    assert same(read_examples(tmp_path / "saved"), twin)
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(TWIN), "test": datasets.Dataset.from_list(TWIN)}
    ).save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(
        DataError, match=r"dict: holds the splits train, test; point task.train .* at one: its subfolder"
    ):
        read_examples(tmp_path / "dict")
    assert same(read_examples(tmp_path / "dict" / "train"), twin)
    (tmp_path / "hub" / "data").mkdir(parents=True)
    datasets.Dataset.from_list(TWIN).to_parquet(str(tmp_path / "hub" / "data" / "train-00000-of-00001.parquet"))
    assert same(read_examples(tmp_path / "hub"), twin)
    bad = tmp_path / "bad_saved"
    datasets.Dataset.from_list([{"prompt": "a", "completion": "b"}, {"prompt": "c", "completion": None}]).save_to_disk(
        str(bad)
    )
    with pytest.raises(DataError, match=rf"{bad}:row 2: 'completion' is empty"):
        read_examples(bad)

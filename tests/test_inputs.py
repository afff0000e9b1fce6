"""Bad input is a clear error naming its key (or file and line), and a killed arm is a recorded status: split sizes,
templates that leak the answer, the preference file's own columns, overlong val and test prompts, a typo under
`make repro`, a stage process killed by SIGKILL. No models; seconds.

    .venv/bin/python -m pytest tests/test_inputs.py
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bakeoff.core.config import load_params
from bakeoff.core.schema import ParamsError
from bakeoff.data.examples import DataError, read_pairs
from bakeoff.data.splits import split

ROOT = Path(__file__).resolve().parents[1]


def _params(tmp_path: Path, **task) -> Path:
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["task"].update(task)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "task, said",
    [
        ({"test_size": 0}, r"task\.test_size: must be a fraction in \(0, 1\) or a whole count ≥ 1; got 0"),
        ({"test_size": -5}, r"task\.test_size: .*got -5\.0 \(an empty test split would leave nothing to score\)"),
        (
            {"val_size": 0},
            r"task\.val_size: .* or auto; got 0(\.0)? \(an empty val split would leave nothing to choose",
        ),
        ({"test_size": 2.5}, r"task\.test_size"),
        ({"prompt_template": "Classify {prompt} (answer: {completion})"}, r"task\.prompt_template: names 'completion'"),
        (
            {
                "columns": {"prompt": "text", "completion": "label"},
                "prefs": None,
                "train": "data/raw/mine.csv",
                "prompt_template": "{text} => {label}",
            },
            r"task\.prompt_template: names 'label', the answer's column",
        ),
        ({"prompt_template": "Classify { this: {prompt}"}, r"task\.prompt_template: is not a valid template"),
        (
            {"train": "data/raw/mine.csv"},
            r"task\.prefs: is the shipped tickets task's preference pairs .*task\.prefs: null",
        ),
    ],
)
def test_bad_task_params_name_their_key(tmp_path, task, said):
    with pytest.raises(ParamsError, match=said):
        load_params(_params(tmp_path, **task))


def test_a_test_file_of_your_own_needs_no_test_size(tmp_path):
    assert load_params(_params(tmp_path, test="data/raw/t.jsonl", test_size=0)).task.test_size == 0


def test_carved_splits_are_checked_against_the_rows_there_are():
    rows = list(range(50))
    with pytest.raises(DataError, match=r"task\.test_size: 80 gives 80 test rows of the 50 rows of x\.jsonl"):
        split(rows, "auto", 80, 0, "rows of x.jsonl")
    with pytest.raises(DataError, match=r"task\.val_size: 0\.001 gives 0 validation rows of the 50 rows"):
        split(rows, 0.001, 10, 0)
    got = split(rows, None, None, 0)  # both from their own files: nothing carved
    assert (len(got["train"]), len(got["val"]), len(got["test"])) == (50, 0, 0)


def test_the_preference_file_is_read_by_its_own_columns(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text(json.dumps({"question": "2+2?", "good": "4", "bad": "5"}) + "\n")
    pairs = read_pairs(path, columns={"prompt": "question", "chosen": "good", "rejected": "bad"})
    assert pairs[0].chosen == "4" and pairs[0].messages[-1]["content"] == "2+2?"
    with pytest.raises(DataError, match=r"task\.prefs_columns: .*set task\.prefs: null"):
        read_pairs(path, columns={})


def test_overlong_val_and_test_prompts_are_cut_from_the_left_or_dropped_and_counted(tokenizer_dir):
    from transformers import AutoTokenizer

    from bakeoff.data.examples import Example
    from bakeoff.data.prepare import fit_prompts, prompt_length

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    long = Example([{"role": "user", "content": "word " * 5000 + "QUESTION: which team?"}], "billing", "t.jsonl:3")
    short = Example([{"role": "user", "content": "which team?"}], "billing", "t.jsonl:4")
    kept, said = fit_prompts(tok, [long, short], 128, "truncate", "test")
    assert said["count"] == 1 and said["examples"][0].startswith("t.jsonl:3 (") and len(kept) == 2
    assert prompt_length(tok, kept[0].messages) <= 128 and kept[0].messages[-1]["content"].endswith("which team?")
    long = Example([{"role": "user", "content": "word " * 5000}], "billing", "t.jsonl:3")
    kept, said = fit_prompts(tok, [long, short], 128, "drop", "val")
    assert kept == [short] and said["count"] == 1 and said["kept"] == 1


def test_make_repro_checks_params_with_its_own_loader_before_dvc(tmp_path, monkeypatch):
    from bakeoff.run.preflight import params_error

    text = (ROOT / "params.yaml").read_text().replace("\nvariants:", "\nvaraints:", 1)
    (tmp_path / "params.yaml").write_text(text)
    said = params_error(tmp_path / "params.yaml")
    assert "varaints" in said and "variants" in said and "params.yaml:" in said, said


KILLED = """
import os, signal, sys
from bakeoff.core.supervise import supervise
supervise(sys.argv[1], "lora")
print("child pid", os.getpid(), flush=True)
blob = bytearray(64 * 1024 * 1024)  # a peak to record
os.kill(os.getpid(), signal.SIGKILL)  # what the host's out-of-memory killer does
"""


@pytest.mark.parametrize("stage", ["train", "evaluate"])
def test_a_stage_killed_by_sigkill_is_the_arms_oom_status_and_exits_0(tmp_path, stage):
    (tmp_path / "params.yaml").write_text((ROOT / "params.yaml").read_text())
    (tmp_path / "kill.py").write_text(KILLED)
    env = {k: v for k, v in os.environ.items() if k != "BAKEOFF_SUPERVISED"}
    r = subprocess.run(
        [sys.executable, "kill.py", stage],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr  # dvc repro goes on with the other arms
    rec = json.loads((tmp_path / "runs" / "lora" / f"{'train' if stage == 'train' else 'eval'}.json").read_text())
    assert rec["status"] == "oom" and "killed by SIGKILL, likely the host's out-of-memory killer" in rec["error"]
    assert rec["metrics"][f"{stage}_peak_rss_mb"] >= 64
    if stage == "train":
        assert (tmp_path / "models" / "variants" / "lora" / "NOT_TRAINED").exists()  # DVC's output, said why
    else:
        assert (tmp_path / "runs" / "lora" / "predictions.jsonl").read_text() == ""


def test_a_pretty_printed_json_array_is_named_as_such(tmp_path):
    from bakeoff.data.examples import read_examples

    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps([{"prompt": "a", "completion": "b"}], indent=2))
    with pytest.raises(DataError, match=r"rows\.jsonl:1: a JSON array, not JSON Lines .*jq -c"):
        read_examples(path)


def test_the_gguf_converter_never_runs_a_models_own_code_unless_trusted(tmp_path):
    from bakeoff.core.errors import UserError
    from bakeoff.ship.export import own_code, to_gguf

    (tmp_path / "config.json").write_text(json.dumps({"auto_map": {"AutoModel": "modeling_x.X"}}))
    (tmp_path / "tokenization_x.py").write_text("raise SystemExit('ran')\n")
    assert own_code(tmp_path) == ["tokenization_x.py", "config.json: auto_map"]
    with pytest.raises(UserError, match=r"carries code of its own .*set model\.trust_remote_code: true"):
        to_gguf(tmp_path, tmp_path / "m.gguf")


def test_a_one_answer_task_a_small_train_split_and_an_untracked_file_are_remarked(tmp_path):
    from types import SimpleNamespace

    from bakeoff.data.examples import Example
    from bakeoff.data.prepare import remarks

    rows = [Example([{"role": "user", "content": f"q{i}"}], "yes", f"x:{i}") for i in range(20)]
    t = SimpleNamespace(train=str(tmp_path / "mine.jsonl"), val=None, test=None, prefs=None)
    said = remarks(t, {"train": rows}, ["yes"])
    assert "task.train" in said["untracked_files"] and "editing them reruns nothing" in said["untracked_files"]
    assert "a constant scores 100%" in said["one_answer"] and said["small_train"].startswith("20 training rows")
    shipped = SimpleNamespace(train="data/raw/tickets.jsonl", val=None, test=None, prefs="data/raw/prefs.jsonl")
    rows += [Example([{"role": "user", "content": f"r{i}"}], "no", f"y:{i}") for i in range(40)]
    assert remarks(shipped, {"train": rows}, ["yes", "no"]) == {}

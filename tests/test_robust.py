"""Bad input, unsafe params, an unreachable tracking server, and determinism: each with a clear outcome."""

import json
from pathlib import Path

import pytest
from conftest import write_jsonl

from bakeoff.core.config import ParamsError, load_params
from bakeoff.data.examples import DataError, read_examples, read_pairs
from bakeoff.data.prepare import drop_duplicates, drop_leakage, handle_overlong
from bakeoff.data.stats import row_tokens


def _rows(tmp_path, rows, name="d.jsonl"):
    return read_examples(write_jsonl(tmp_path / name, rows))


# ---------------------------------------------------------------- data


def test_duplicates_dropped_and_named(tmp_path, capsys):
    rows = _rows(
        tmp_path,
        [{"prompt": "a", "completion": "x"}, {"prompt": "b", "completion": "y"}, {"prompt": " a ", "completion": "x"}],
    )
    keep, report = drop_duplicates(rows, "drop")
    assert [e.source.rsplit(":", 1)[1] for e in keep] == ["1", "2"]
    assert report["count"] == 1 and report["examples"] == [f"{tmp_path / 'd.jsonl'}:3 repeats {tmp_path / 'd.jsonl'}:1"]
    assert "1 duplicate row(s), dropped (task.duplicates)" in capsys.readouterr().err
    assert len(drop_duplicates(rows, "keep")[0]) == 3
    with pytest.raises(DataError, match=r"d\.jsonl:3: the same prompt and answer as .*d\.jsonl:1"):
        drop_duplicates(rows, "error")


def test_leakage_reported_and_dropped_from_train(tmp_path):
    train = _rows(tmp_path, [{"prompt": "a", "completion": "x"}, {"prompt": "b", "completion": "y"}], "train.jsonl")
    test = _rows(tmp_path, [{"prompt": "b", "completion": "other answer"}], "test.jsonl")
    keep, report = drop_leakage(train, {"test": test, "val": []}, "drop")
    assert [e.messages[-1]["content"] for e in keep] == ["a"]
    assert report["count"] == 1 and "train.jsonl:2 is also in test" in report["examples"][0]
    with pytest.raises(DataError, match=r"train\.jsonl:2: the same prompt is in the test split"):
        drop_leakage(train, {"test": test}, "error")


def test_overlong_rows_counted_then_truncated_or_dropped(tmp_path, tokenizer_dir):
    from bakeoff.core.models import load_tokenizer

    tok = load_tokenizer(tokenizer_dir)
    rows = _rows(tmp_path, [{"prompt": "short", "completion": "x"}, {"prompt": "long " * 80, "completion": "y"}])
    limit = row_tokens(tok, rows[0]) + 5
    kept, report = handle_overlong(tok, rows, limit, "truncate")
    assert len(kept) == 2 and report["count"] == 1 and "d.jsonl:2" in report["examples"][0]
    dropped, report = handle_overlong(tok, rows, limit, "drop")
    assert [e.completion for e in dropped] == ["x"] and report["policy"] == "drop"


def test_prepare_records_every_check(tmp_path, tokenizer_dir, monkeypatch):
    from bakeoff.core.models import load_tokenizer
    from bakeoff.data.prepare import prepare

    monkeypatch.chdir(tmp_path)
    rows = [{"prompt": f"question {i}", "completion": f"answer {i}"} for i in range(30)]
    rows += [
        rows[3],
        {"prompt": "question 7", "completion": "another answer"},
        {"prompt": "x " * 400, "completion": "z"},
    ]
    write_jsonl(tmp_path / "t.jsonl", rows)
    (tmp_path / "params.yaml").write_text(
        "task: {train: t.jsonl, val_size: 4, test_size: 4, overlong: drop}\ntrain_defaults: {max_seq_len: 64}\n"
    )
    stats = prepare(load_params(tmp_path / "params.yaml"), tmp_path / "out", load_tokenizer(tokenizer_dir))
    checks = stats["checks"]
    assert checks["duplicates"]["count"] == 1 and checks["overlong"]["count"] == 1
    assert stats["splits"]["train"] == 33 - 1 - 8 - checks["leakage"]["count"] - 1
    train_prompts = {json.loads(l)["messages"][-1]["content"] for l in (tmp_path / "out" / "train.jsonl").open()}
    test_prompts = {
        json.loads(l)["messages"][-1]["content"]
        for f in ("val", "test")
        for l in (tmp_path / "out" / f"{f}.jsonl").open()
    }
    assert not train_prompts & test_prompts


def test_preference_pairs_get_a_val_split_and_too_few_pairs_train_unsearched(tmp_path, tokenizer_dir, monkeypatch):
    """Val pairs (task.val_size) judge DPO's search like val rows; the test pairs are the ones a split without val
    pairs would hold. With too few pairs to spare a val split, none is carved and stats say DPO is not searched."""
    from bakeoff.core.models import load_tokenizer
    from bakeoff.data.examples import load_pairs
    from bakeoff.data.prepare import prepare
    from bakeoff.data.splits import split

    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "t.jsonl", [{"prompt": f"question {i}", "completion": f"answer {i}"} for i in range(30)])
    pairs = [{"prompt": f"q {i}", "chosen": f"good {i}", "rejected": f"bad {i}"} for i in range(20)]
    write_jsonl(tmp_path / "p.jsonl", pairs)
    (tmp_path / "params.yaml").write_text("task: {train: t.jsonl, prefs: p.jsonl, val_size: 4, test_size: 6}\n")
    stats = prepare(load_params(tmp_path / "params.yaml"), tmp_path / "out", load_tokenizer(tokenizer_dir))
    assert {k: v for k, v in stats["splits"].items() if k.startswith("prefs")} == {
        "prefs_train": 10,
        "prefs_val": 4,
        "prefs_test": 6,
    }
    got = {s: [p.chosen for p in load_pairs(tmp_path / "out" / f"prefs_{s}.jsonl")] for s in ("train", "val", "test")}
    assert got["test"] == [p["chosen"] for p in split(pairs, None, 6, 0)["test"]]
    assert len(set(got["train"]) | set(got["val"]) | set(got["test"])) == 20
    # other splits of the same files: another data hash, so no search or checkpoint of these splits is reused
    (tmp_path / "params.yaml").write_text("task: {train: t.jsonl, prefs: p.jsonl, val_size: 5, test_size: 6}\n")
    other = prepare(load_params(tmp_path / "params.yaml"), tmp_path / "out3", load_tokenizer(tokenizer_dir))
    assert other["data_hash"] != stats["data_hash"]
    (tmp_path / "params.yaml").write_text("task: {train: t.jsonl, prefs: p.jsonl, val_size: 16, test_size: 4}\n")
    stats = prepare(load_params(tmp_path / "params.yaml"), tmp_path / "out2", load_tokenizer(tokenizer_dir))
    assert (stats["splits"]["prefs_val"], stats["splits"]["prefs_train"]) == (0, 16)
    assert "DPO is not searched" in stats["checks"]["prefs_val"]


def test_preference_pair_with_same_answers_named(tmp_path):
    path = write_jsonl(
        tmp_path / "p.jsonl",
        [{"prompt": "q", "chosen": "a", "rejected": "b"}, {"prompt": "q", "chosen": "same", "rejected": " same"}],
    )
    with pytest.raises(DataError, match=r"p\.jsonl:2: 'chosen' and 'rejected' are the same text"):
        read_pairs(path)


# ---------------------------------------------------------------- params


def _params(tmp_path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "text, match",
    [
        (
            "variants:\n  ../../etc:\n    technique: lora\n",
            r"params\.yaml:2: variants\.\.\./\.\./etc: '\.\./\.\./etc' is not a usable run name",
        ),
        ("baselines:\n  /tmp/x: {shots: 0}\n", r"params\.yaml:2: baselines\./tmp/x: '/tmp/x' is not a usable run name"),
        (
            "tracking:\n  uri: sqlite:////tmp/elsewhere.db\n",
            r"params\.yaml:2: tracking\.uri: 'sqlite:////tmp/elsewhere\.db' writes outside",
        ),
        (
            "variants:\n  q:\n    technique: qlora\n    bits: 3\n",
            r"params\.yaml:4: variants\.q\.bits: must be 4 or 8, got 3",
        ),
        (
            "variants:\n  l:\n    technique: lora\n    r: -2\n",
            r"params\.yaml:4: variants\.l\.r: must be a positive integer",
        ),
        ("train_defaults:\n  lr: 0\n", r"params\.yaml:2: train_defaults\.lr: must be > 0"),
        (
            "train_defaults:\n  processes: 3\n",
            r"train_defaults\.effective_batch: must be a positive multiple of micro_batch × processes",
        ),
        ("task:\n  overlong: cut\n", r"params\.yaml:2: task\.overlong: must be one of truncate, drop"),
        (
            "variants:\n  l:\n    technique: lora\n    lora_rank: 8\n",
            r"params\.yaml:4: variants\.l\.lora_rank: unknown option",
        ),
    ],
)
def test_bad_params_name_file_line_and_key(tmp_path, text, match):
    with pytest.raises(ParamsError, match=match):
        load_params(_params(tmp_path, text))


def test_tracking_uri_inside_the_repo_is_fine(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_params(_params(tmp_path, "tracking:\n  uri: sqlite:///runs.db\n")).tracking.uri == "sqlite:///runs.db"


@pytest.mark.parametrize(
    "text, key, home",
    [
        ("tune:\n  storage: postgresql://bob:pl4nted-s3cret@db.example:5432/bakeoff\n", "tune.storage", "PGPASSWORD"),
        ("tracking:\n  uri: https://bob:pl4nted-s3cret@mlflow.example\n", "tracking.uri", "MLFLOW_TRACKING_PASSWORD"),
        ("tracking:\n  uri: https://pl4nted-s3cret@mlflow.example\n", "tracking.uri", "MLFLOW_TRACKING_PASSWORD"),
        (
            "tracking:\n  uri: https://mlflow.example/?token=pl4nted-s3cret\n",
            "tracking.uri",
            "MLFLOW_TRACKING_PASSWORD",
        ),
        ("tune:\n  storage: postgresql://db.example/bakeoff?password=pl4nted-s3cret\n", "tune.storage", "PGPASSWORD"),
        (
            "tune:\n  storage: postgresql://ana@db.example/bakeoff?password=pl4nted-s3cret\n",
            "tune.storage",
            "PGPASSWORD",
        ),
    ],
)
def test_a_password_in_params_is_refused_naming_the_key_without_printing_it(tmp_path, text, key, home):
    """params.yaml is committed and a stage's params go into dvc.lock and the run-cache: a password there is refused,
    the error names the file, line and key, where the password goes instead, and never prints it."""
    with pytest.raises(ParamsError) as e:
        load_params(_params(tmp_path, text))
    msg = str(e.value)
    said = "a password" if "bob:" in text else "a key-like query value" if "?" in text else "user info (token@)"
    assert msg.startswith(f"{tmp_path / 'params.yaml'}:2: {key}: the URL holds {said}"), msg
    assert home in msg and ("bob@" in msg or "bob" not in text) and "pl4nted-s3cret" not in msg, msg


def test_a_url_without_a_password_is_taken_as_it_is(tmp_path):
    p = load_params(_params(tmp_path, "tune:\n  storage: postgresql://bob@db.example:5432/bakeoff\n"))
    assert p.tune.storage == "postgresql://bob@db.example:5432/bakeoff"
    url = "postgresql://bob@db.example:5432/bakeoff?sslmode=require"  # a query that is no secret passes too
    assert load_params(_params(tmp_path, f"tune:\n  storage: {url}\n")).tune.storage == url


def test_unreachable_tracking_server_fails_before_anything_runs(monkeypatch, tmp_path):
    from bakeoff.core import tracking

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")
    params = load_params(_params(tmp_path, "task: {name: t}\n"))
    with (
        pytest.raises(
            tracking.TrackingUnreachable,
            match=r"http://127\.0\.0\.1:9 \(from MLFLOW_TRACKING_URI\) is "
            r"unreachable",
        ),
        tracking.run(params, tracking.RunTags("x", "variant", "lora"), {}),
    ):
        raise AssertionError("the run must not start")


def test_model_folder_with_pickle_weights_only_is_refused(tmp_path, tiny_model_dir):
    import shutil

    import torch

    from bakeoff.core.models import ModelError, resolve_base

    folder = tmp_path / "pickled"
    shutil.copytree(tiny_model_dir, folder)
    from safetensors.torch import load_file

    weights = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save(weights, folder / "pytorch_model.bin")
    with pytest.raises(ModelError, match="no .safetensors weights"):
        resolve_base(str(folder), tmp_path / "out")


# ---------------------------------------------------------------- determinism


def test_same_params_and_seed_give_the_same_run_twice(tiny_model_dir, tickets, tmp_path):
    """Two trainings and evaluations of a tiny LoRA on CPU: the same losses, weights and metrics."""
    from safetensors.torch import load_file

    from bakeoff.core.models import load_tokenizer
    from bakeoff.evaluate.local import EvalPlan, evaluate_examples
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    (tmp_path / "params.yaml").write_text(
        "train_defaults: {max_steps: 4, effective_batch: 4, micro_batch: 2, precision: fp32, logging_steps: 1,"
        " warmup_steps_excluded: 1}\nvariants:\n  lora: {technique: lora, r: 4, alpha: 8}\n"
    )
    v = load_params(tmp_path / "params.yaml").variant("lora")
    rows = read_examples(tickets)
    tech = get_technique("lora")
    outs, metrics = [], []
    for i in range(2):
        out = tmp_path / f"out{i}"
        m = train(Job(tech, v, tiny_model_dir, out, "fp32", tmp_path / f"w{i}"), rows[:24])
        model = tech.load_for_eval(tiny_model_dir, out, v, "fp32")
        ev, _ = evaluate_examples(
            model, load_tokenizer(tiny_model_dir), rows[24:30], rows[30:34], EvalPlan("exact_match", 6, 3)
        )
        outs.append((m["history"], load_file(out / "adapter_model.safetensors")))
        metrics.append({k: ev[k] for k in ("quality", "val_loss", "chrf", "json_valid")})
    assert outs[0][0] == outs[1][0]  # the same loss at every step
    assert all((outs[0][1][k] == outs[1][1][k]).all() for k in outs[0][1])
    assert metrics[0] == metrics[1]

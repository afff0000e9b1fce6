"""The memory model against published figures, its calibration, fitting and the `bakeoff.decide.sizing` command."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.decide.memory import GB, Setup, Shape, calibrate, estimate
from bakeoff.decide.sizing import GPU, Headroom, Priced, fit, smallest_fit
from bakeoff.decide.sizing_record import MfuSource, Sizing

ROOT = Path(__file__).resolve().parents[1]
LLAMA2_7B = Shape("llama-2-7b", 32, 4096, 11008, 32, 32, 32000)
LLAMA3_8B = Shape("llama-3.1-8b", 32, 4096, 14336, 32, 8, 128256)


def test_parameter_counts_match_the_real_models():
    assert LLAMA2_7B.params == pytest.approx(6.74e9, rel=0.005)
    assert LLAMA3_8B.params == pytest.approx(8.03e9, rel=0.005)
    smol = json.loads((ROOT / "tests" / "data" / "smollm2_135m_config.json").read_text())
    assert Shape.from_config("smol", smol).params == 134_515_008  # what the loaded model counts
    # PEFT's print_trainable_parameters for Llama-3-8B, r=16 on every linear layer: 41,943,040
    assert LLAMA3_8B.lora_params(16) == 41_943_040
    assert LLAMA3_8B.lora_params(16, ["q_proj", "v_proj"]) == 32 * 16 * ((4096 + 4096) + (4096 + 1024))


# Published figures: LLaMA-Factory README, 7B (estimates): full (AMP) 120, LoRA 16, QLoRA 4-bit 6 GB;
# for xB: 18x, 2x, x/2. axolotl docs, 7–8B at context 512–2048 and micro-batch 1–2: full 60–80, LoRA 16–24,
# QLoRA 10–14. Both as those configurations run: bf16, AdamW, gradient checkpointing, ~1 GB of CUDA context.
LLAMA_FACTORY_7B = {"full": 120, "lora": 16, "qlora": 6}
RANGE_8B = {"full": (60, 18 * 8), "lora": (16, 24), "qlora": (6, 14)}  # the two tables together


@pytest.mark.parametrize("technique", ["full", "lora", "qlora"])
def test_memory_model_near_llama_factory_for_7b(technique):
    got = estimate(LLAMA2_7B, Setup(technique, "bf16", "adamw_torch", True, 1, 1024), 1 * GB).total / GB
    assert got == pytest.approx(LLAMA_FACTORY_7B[technique], rel=0.15), f"{technique}: {got:.1f} GB"


@pytest.mark.parametrize("technique", ["full", "lora", "qlora"])
@pytest.mark.parametrize("micro_batch, seq", [(1, 1024), (2, 1024), (1, 2048)])
def test_memory_model_within_published_ranges_for_8b(technique, micro_batch, seq):
    got = estimate(LLAMA3_8B, Setup(technique, "bf16", "adamw_torch", True, micro_batch, seq), 1 * GB).total / GB
    lo, hi = RANGE_8B[technique]
    assert lo <= got <= hi, f"{technique}: {got:.1f} GB outside the published {lo}–{hi}"


def test_memory_levers_move_the_estimate_the_right_way():
    base = Setup("lora", micro_batch=4, seq_len=2048)
    e = estimate(LLAMA3_8B, base)
    assert (
        estimate(LLAMA3_8B, Setup("lora", gradient_checkpointing=True, micro_batch=4, seq_len=2048)).activations
        < e.activations / 3
    )
    assert estimate(LLAMA3_8B, Setup("lora", micro_batch=4, seq_len=1024)).activations == pytest.approx(
        e.activations / 2
    )
    full = estimate(LLAMA3_8B, Setup("full"))
    assert estimate(LLAMA3_8B, Setup("full", optimizer="adamw_8bit")).optimizer == pytest.approx(full.optimizer / 4)
    q4 = estimate(LLAMA3_8B, Setup("qlora", double_quant=False)).weights
    assert estimate(LLAMA3_8B, Setup("qlora")).weights < q4 < estimate(LLAMA3_8B, Setup("lora")).weights / 2
    assert estimate(LLAMA3_8B, Setup("dpo")).activations == pytest.approx(
        2 * estimate(LLAMA3_8B, Setup("lora")).activations
    )


def test_calibration_fits_the_overhead_and_reports_each_error():
    overhead, errors = calibrate([(1.0, 3.0), (2.0, 4.5), (4.0, 6.0)])
    assert overhead == 2.0  # median of 2.0, 2.5, 2.0
    assert errors == pytest.approx([0.0, -0.5 / 4.5, 0.0])


def test_fit_picks_the_smallest_card_with_margin_and_prices_it():
    gpus = [GPU("big", 80, 3.0, 900), GPU("small", 24, 1.0, 120), GPU("mid", 40, 2.0, 300)]
    assert smallest_fit(21 * GB, gpus, margin=0.1).name == "small"  # 24 × 0.9 = 21.6 ≥ 21
    assert smallest_fit(22 * GB, gpus, margin=0.1).name == "mid"
    assert smallest_fit(100 * GB, gpus, margin=0.1) is None
    f = fit(LLAMA3_8B, Setup("lora", gradient_checkpointing=True), gpus, Headroom(0.1, 1 * GB), Priced(1e7, 0.5))
    # N = 8,030,261,248 − the 128,256 × 4,096 input embedding = 7,504,924,672; LoRA 4·N + recompute 2·N per token;
    # 1e7 tokens × 6 × N ÷ (120 TFLOP/s × 0.5) = 7,504.9 s = 2.085 h, at $1/h on one card
    assert LLAMA3_8B.params == 8_030_261_248 and LLAMA3_8B.flop_params == 7_504_924_672
    assert f.gpu == "small" and f.hours == 2.085 and f.usd == 2.08
    sharded = fit(LLAMA3_8B, Setup("full"), gpus, Headroom(0.1, 1 * GB), Priced(1e7, 0.5))
    assert sharded.gpu == "big" and sharded.gpus >= 2


def test_size_command_prints_the_table_before_any_training(tmp_path):
    size = [sys.executable, "-m", "bakeoff.run.cli", "size", "--params"]
    r = subprocess.run(
        [*size, str(ROOT / "params.yaml"), "--seq-len", "512"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| llama-3.1-8b | qlora | qlora |" in r.stdout and "smallest GPU" in r.stdout
    bad = tmp_path / "p.yaml"
    bad.write_text((ROOT / "params.yaml").read_text().replace("target: llama-3.1-8b", "target: llama-8b"))
    r = subprocess.run([*size, str(bad)], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2 and "sizing.target" in r.stderr and "llama-8b" in r.stderr
    r = subprocess.run(
        [*size, str(ROOT / "params.yaml"), "--model", "llama-3.1-8b"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 2 and "--model and --technique together" in r.stderr and "Traceback" not in r.stderr


def test_a_labelled_loss_holds_the_answers_logits_not_every_tokens():
    """The pipeline's labelled loss computes the head at the answer's tokens alone: the logits term shrinks by
    10 bytes × (tokens − answer tokens) × vocabulary per row, and nothing else moves."""
    every = estimate(LLAMA3_8B, Setup("lora", micro_batch=2, seq_len=1024), 0)
    labelled = estimate(LLAMA3_8B, Setup("lora", micro_batch=2, seq_len=1024, label_tokens=33), 0)
    assert every.activations - labelled.activations == 2 * (1024 - 33) * LLAMA3_8B.vocab * 10
    assert (every.weights, every.optimizer) == (labelled.weights, labelled.optimizer)
    longer = estimate(LLAMA3_8B, Setup("lora", micro_batch=2, seq_len=16, label_tokens=33), 0)  # never past the row
    assert longer.activations == estimate(LLAMA3_8B, Setup("lora", micro_batch=2, seq_len=16), 0).activations


def test_a_variant_takes_the_answer_length_only_where_its_loss_is_labelled():
    from dataclasses import replace

    from bakeoff.core.config import load_params

    p = load_params(ROOT / "params.yaml")
    lora, dpo = p.variants["lora"], p.variants["dpo"]
    got = Setup.from_variant(lora, "bf16", answer_tokens=24)
    assert (got.label_tokens, got.chunked_logits) == (24, False)
    # the answer's length unknown (no data stage yet): every token's logits, never none
    unknown = Setup.from_variant(lora, "bf16")
    assert (unknown.label_tokens, unknown.chunked_logits) == (None, False)
    # a run's record says what its loss did: a labelled-loss variant whose run fell back to every token's logits
    fell_back = Setup.from_variant(lora, "bf16", answer_tokens=24, labelled=False)
    assert (fell_back.label_tokens, fell_back.chunked_logits) == (None, True)
    # DPO and every-token SFT: TRL's fused head on a CUDA GPU holds no logits; on a CPU the model's own loss holds all
    every = replace(lora, train=replace(lora.train, loss_logits="all"))
    two = replace(lora, train=replace(lora.train, processes=2))
    for v, parent in ((dpo, lora), (every, None), (two, None)):
        on_gpu = Setup.from_variant(v, "bf16", parent=parent, answer_tokens=24)
        on_cpu = Setup.from_variant(v, "bf16", parent=parent, answer_tokens=24, cuda=False)
        assert (on_gpu.label_tokens, on_gpu.chunked_logits) == (None, True), v.name
        assert (on_cpu.label_tokens, on_cpu.chunked_logits) == (None, False), v.name
        assert (
            estimate(LLAMA3_8B, on_cpu).activations - estimate(LLAMA3_8B, on_gpu).activations
            == on_cpu.micro_batch * (2 if v.technique == "dpo" else 1) * on_cpu.seq_len * LLAMA3_8B.vocab * 10
        )


def test_the_committed_gpu_check_is_what_todays_memory_model_predicts():
    """reports/bench/gpu.json's predictions are this memory model's (rescored without the GPU), and within the check's
    10% of every CUDA peak."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import copy

    import gpu_record

    committed = json.loads((ROOT / "reports" / "bench" / "gpu.json").read_text())
    again = gpu_record.rescore(copy.deepcopy(committed))
    rows = {
        (part, name): r
        for part in ("8b", "mfu", "unsloth")
        for name, r in again[part]["rows"].items()
        if r.get("measured_gb")
    }
    assert len(rows) == 9
    for key, r in rows.items():
        assert r["predicted_gb"] == committed[key[0]]["rows"][key[1]]["predicted_gb"], key
        assert abs(r["error_vs_model"]) <= 0.10, (key, r["error_vs_model"])


def test_time_estimates_take_each_techniques_utilisation_at_the_targets_shape():
    """With the committed GPU check, an 8B target is timed at the check's 8B rows (full 18.6%, LoRA 12.7%, measured at
    1 × 1024 tokens), a 1B target at its 1B rows; DPO, never measured, at sizing.mfu and labelled assumed; with
    ``mfu_from: params`` every technique at sizing.mfu. The pessimistic end is half of each unless set."""
    from dataclasses import replace

    from bakeoff.core.config import load_params
    from bakeoff.decide.sizing import measured_speeds, table, train_hours
    from bakeoff.report.sizing import card_words, speed_words

    p = load_params(ROOT / "params.yaml")
    speeds = measured_speeds(str(ROOT / "reports" / "bench" / "gpu.json"))
    fits = {(f.target, f.variant): f for f in table(p, {n: 1e7 for n in p.variants}, speeds=speeds)}
    cards = {g["name"]: GPU(**g) for g in p.sizing.gpus}
    for variant, mfu, row in (
        ("full", 0.186, "8b full"),
        ("lora", 0.127, "8b lora"),
        ("qlora", 0.108, "8b qlora + checkpointing"),
        ("dpo", 0.127, None),
    ):
        f, v = fits[("llama-3.1-8b", variant)], p.variants[variant]
        assert f.mfu == pytest.approx(mfu, abs=0.001), variant
        assert f.mfu_source["row"] == row and f.mfu_source["how"] == ("measured" if row else "assumed"), variant
        assert f.mfu_source["how"] == "assumed" or "7.5B parameters, 1 × 1024 tokens" in speed_words(
            MfuSource.from_dict(f.mfu_source)
        )
        want = train_hours(
            LLAMA3_8B, v.technique, 1e7, cards[f.gpu], f.mfu_source["mfu"], bool(v.train.gradient_checkpointing)
        )
        assert f.hours == pytest.approx(want / f.gpus, abs=0.001), variant
        assert f.hours_high == pytest.approx(f.hours * 2, rel=0.01), variant
    assert "DPO was never measured; LoRA's figure at this size" in speed_words(
        MfuSource.from_dict(fits[("llama-3.1-8b", "dpo")].mfu_source)
    )
    assert "assumed the same on H100-80GB" in card_words(MfuSource.from_dict(fits[("llama-3.1-8b", "lora")].mfu_source))
    assert fits[("llama-3.2-1b", "full")].mfu_source["row"] == "mfu full"  # the 1B rows for a 1B target
    assert "unscaled" in speed_words(
        MfuSource.from_dict(fits[("llama-3.1-70b", "lora")].mfu_source)
    )  # 70B from the 8B row, said so
    # the 8B estimate at the 8B rows costs 1.3-1.7x what the 1B rows' figures gave
    old = {
        (f.target, f.variant): f
        for f in table(
            replace(p, sizing=replace(p.sizing, mfu_from="params")), {n: 1e7 for n in p.variants}, speeds=speeds
        )
    }
    for variant in ("full", "lora"):
        ratio = fits[("llama-3.1-8b", variant)].cheapest_usd / old[("llama-3.1-8b", variant)].cheapest_usd
        assert 1.3 < ratio < 1.75, (variant, ratio)
        assert old[("llama-3.1-8b", variant)].mfu_source["how"] == "assumed"


@pytest.mark.parametrize(
    "mfu, key",
    [
        ("{full: 0.3, lorra: 0.2}", r"sizing\.mfu\.lorra: unknown technique"),
        ("{full: 0.3}", r"sizing\.mfu: names no figure for lora, qlora, dpo"),
        ("{full: 0.3, default: 1.5}", r"sizing\.mfu\.default: must be a number in"),
        ("fast", r"sizing\.mfu"),
    ],
)
def test_a_bad_utilisation_names_its_key(tmp_path, mfu, key):
    from bakeoff.core.config import load_params
    from bakeoff.core.schema import ParamsError

    text = (ROOT / "params.yaml").read_text()
    bad = tmp_path / "params.yaml"
    bad.write_text(text.replace("mfu: {full: 0.32, lora: 0.17, qlora: 0.11}", f"mfu: {mfu}"))
    with pytest.raises(ParamsError, match=key):
        load_params(bad)


def test_the_report_says_where_each_figure_comes_from_and_the_memory_models_out_of_sample_error(tmp_path):
    """The sizing section names the card and commit of the CUDA context while params.yaml holds it ("assumed" once
    changed by hand), each technique's utilisation at the target with its row or "assumed", and the memory model's
    error in sample (revised on the check's peaks) beside out of sample (as it stood when they were measured)."""
    from dataclasses import replace

    from bakeoff.core.config import load_params
    from bakeoff.decide.sizing import measured_on, measured_speeds, table
    from bakeoff.report.sizing import sizing_lines

    p = load_params(ROOT / "params.yaml")
    record = str(ROOT / "reports" / "bench" / "gpu.json")
    got = measured_on(p, record)
    assert got["device"] == "NVIDIA H200" and got["commit"] and got["overhead"]
    assert (got["within_10"], got["peaks"]) == (9, 9)
    assert (got["out_of_sample"]["within_10"], got["out_of_sample"]["peaks"]) == (3, 9)
    fits = [f.__dict__ for f in table(p, {n: 1e7 for n in p.variants}, speeds=measured_speeds(record))]
    sized = {"calibration": {"rows": [], "measured_on": "CUDA peak reserved"}, "fits": fits, "gpu_check": got}
    text = "\n".join(sizing_lines(p, Sizing.from_dict(sized)))
    assert (
        f"(`sizing.cuda_overhead_gb`, measured on an NVIDIA H200 by benchmarks/gpu_check.py at {got['commit']})" in text
    )
    assert (
        "| full | 18.6% to 9.3% | measured on an NVIDIA H200 (gpu_check.py, 8b full: 7.5B parameters, 1 × 1024 "
        "tokens) |" in text
    ), text
    assert (
        "| lora | 12.7% to 6.4% | measured on an NVIDIA H200 (gpu_check.py, 8b lora: 7.5B parameters, 1 × 1024 "
        "tokens); assumed the same on H100-80GB |" in text
    ), text
    assert "| dpo | 12.7% to 6.4% | assumed: DPO was never measured; LoRA's figure at this size" in text
    assert "within 10% of 9 of the 9 CUDA peaks" in text and "in sample, as it was revised on these peaks" in text
    assert "within 10% of 3 of 9, largest error 139%" in text
    mine = replace(p, sizing=replace(p.sizing, cuda_overhead_gb=2.0))
    assert "(`sizing.cuda_overhead_gb`, assumed)" in "\n".join(
        sizing_lines(mine, Sizing.from_dict({**sized, "gpu_check": measured_on(mine, record)}))
    )
    assert measured_on(p, str(tmp_path / "none.json")) == {}

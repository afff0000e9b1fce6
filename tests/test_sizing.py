"""The memory model against published figures, its calibration, fitting and the `bakeoff.decide.sizing` command."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bakeoff.decide.memory import GB, Setup, Shape, calibrate, estimate
from bakeoff.decide.sizing import GPU, fit, smallest_fit

ROOT = Path(__file__).resolve().parents[1]
LLAMA2_7B = Shape("llama-2-7b", 32, 4096, 11008, 32, 32, 32000)
LLAMA3_8B = Shape("llama-3.1-8b", 32, 4096, 14336, 32, 8, 128256)


def test_parameter_counts_match_the_real_models():
    assert LLAMA2_7B.params == pytest.approx(6.74e9, rel=0.005)
    assert LLAMA3_8B.params == pytest.approx(8.03e9, rel=0.005)
    smol = json.loads((ROOT / "tests" / "data" / "smollm2_135m_config.json").read_text())
    assert Shape.from_config("smol", smol).params == 134_515_008   # what the loaded model counts
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
    assert estimate(LLAMA3_8B, Setup("lora", gradient_checkpointing=True, micro_batch=4,
                                     seq_len=2048)).activations < e.activations / 3
    assert estimate(LLAMA3_8B, Setup("lora", micro_batch=4,
                                     seq_len=1024)).activations == pytest.approx(e.activations / 2)
    full = estimate(LLAMA3_8B, Setup("full"))
    assert estimate(LLAMA3_8B, Setup("full", optimizer="adamw_8bit")).optimizer == pytest.approx(full.optimizer / 4)
    q4 = estimate(LLAMA3_8B, Setup("qlora", double_quant=False)).weights
    assert estimate(LLAMA3_8B, Setup("qlora")).weights < q4 < estimate(LLAMA3_8B, Setup("lora")).weights / 2
    assert estimate(LLAMA3_8B, Setup("dpo")).activations == pytest.approx(2 * estimate(LLAMA3_8B,
                                                                                       Setup("lora")).activations)


def test_calibration_fits_the_overhead_and_reports_each_error():
    overhead, errors = calibrate([(1.0, 3.0), (2.0, 4.5), (4.0, 6.0)])
    assert overhead == 2.0                               # median of 2.0, 2.5, 2.0
    assert errors == pytest.approx([0.0, -0.5 / 4.5, 0.0])


def test_fit_picks_the_smallest_card_with_margin_and_prices_it():
    gpus = [GPU("big", 80, 3.0, 900), GPU("small", 24, 1.0, 120), GPU("mid", 40, 2.0, 300)]
    assert smallest_fit(21 * GB, gpus, margin=0.1).name == "small"      # 24 × 0.9 = 21.6 ≥ 21
    assert smallest_fit(22 * GB, gpus, margin=0.1).name == "mid"
    assert smallest_fit(100 * GB, gpus, margin=0.1) is None
    f = fit(LLAMA3_8B, Setup("lora", gradient_checkpointing=True), gpus, 0.1, 1 * GB, tokens=1e7, mfu=0.5)
    # N = 8,030,261,248 − the 128,256 × 4,096 input embedding = 7,504,924,672; LoRA 4·N + recompute 2·N per token;
    # 1e7 tokens × 6 × N ÷ (120 TFLOP/s × 0.5) = 7,504.9 s = 2.085 h, at $1/h on one card
    assert LLAMA3_8B.params == 8_030_261_248 and LLAMA3_8B.flop_params == 7_504_924_672
    assert f.gpu == "small" and f.hours == 2.085 and f.usd == 2.08
    sharded = fit(LLAMA3_8B, Setup("full"), gpus, 0.1, 1 * GB, tokens=1e7, mfu=0.5)
    assert sharded.gpu == "big" and sharded.gpus >= 2


def test_size_command_prints_the_table_before_any_training(tmp_path):
    r = subprocess.run([sys.executable, "-m", "bakeoff.decide.sizing", "--params", str(ROOT / "params.yaml"), "--seq",
                        "512"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "| llama-3.1-8b | qlora | qlora |" in r.stdout and "smallest GPU" in r.stdout
    bad = tmp_path / "p.yaml"
    bad.write_text((ROOT / "params.yaml").read_text().replace("target: llama-3.1-8b", "target: llama-8b"))
    r = subprocess.run([sys.executable, "-m", "bakeoff.decide.sizing", "--params", str(bad)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 2 and "sizing.target" in r.stderr and "llama-8b" in r.stderr

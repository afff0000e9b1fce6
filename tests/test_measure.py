"""The measurement core against known values: steady-state tokens/s, peak memory windows, generated-token counts,
latency percentiles and the FLOPs convention.

    .venv/bin/pytest tests/test_measure.py
"""

import numpy as np
import pytest
import torch

from bakeoff.core import flops
from bakeoff.core.measure import GenerationLog, LatencyLog, PeakMemory
from bakeoff.core.step_timing import StepLog


def test_steplog_steady_state_excludes_warmup_and_counts_non_padding_tokens():
    log = StepLog(warmup_steps_excluded=2)
    log.step_seconds = [10.0, 5.0, 1.0, 1.0, 2.0]
    log.step_tokens = [100, 100, 100, 200, 300]
    log.step_padded_tokens = [200, 200, 200, 200, 400]
    m = log.metrics()
    # steady state: steps 3–5, 600 tokens in 4 s
    assert m["train_tokens_per_s"] == 150.0 and m["train_step_s_median"] == 1.0
    assert (
        m["train_steps"] == 5
        and m["tokens_seen"] == 800
        and m["padding_share"] == pytest.approx(1 - 800 / 1200, abs=1e-4)
    )


def test_steplog_counts_rows_and_tokens_of_each_micro_batch():
    log = StepLog(warmup_steps_excluded=0)
    log.begin_step()
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    log.add_micro_batch({"input_ids": torch.zeros(2, 4, dtype=torch.long), "attention_mask": mask})
    log.add_micro_batch({"input_ids": torch.zeros(3, 4, dtype=torch.long), "attention_mask": torch.ones(3, 4)})
    log.end_step()
    assert log.step_tokens == [5 + 12] and log.step_padded_tokens == [8 + 12] and log.metrics()["rows_seen"] == 5
    # on CPU each step is read as it ends: nothing waits in settle, and a second read gives the same figures
    assert isinstance(log.step_tokens[0], int) and log._pending == []
    assert log.metrics() == log.metrics()
    from transformers import BatchEncoding

    log.begin_step()  # a tokenizer's BatchEncoding as the collator hands it over; no mask: every token counts
    log.add_micro_batch(BatchEncoding({"input_ids": torch.zeros(2, 3, dtype=torch.long)}))
    log.end_step()
    assert log.step_tokens[-1] == 6 and log.step_seconds[-1] >= 0


def test_peak_memory_sees_a_known_block_and_resets_between_windows():
    size = 256 * 1024 * 1024
    with PeakMemory() as big:
        block = np.ones(size // 8)  # 256 MiB, touched
        del block
    with PeakMemory() as small:
        x = np.ones(1024)
        del x
    assert big.rss_method == "vmhwm" and big.peak_rss_bytes >= small.peak_rss_bytes + 0.9 * size
    assert big.metrics("train")["train_peak_rss_mb"] >= 0.9 * 256


def test_generation_log_counts_generated_tokens_only(tiny_model_dir):
    from bakeoff.core.models import load_model, load_tokenizer
    from bakeoff.evaluate.generation import Decoding, generate

    tok, model = load_tokenizer(tiny_model_dir), load_model(tiny_model_dir).eval()
    model.generation_config.suppress_tokens = sorted({tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")})
    prompts = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "a much longer prompt " * 8}]]
    _, log = generate(model, tok, prompts, Decoding(4, 2))
    # two answers of exactly 4 tokens each: the prompts (of different lengths) and the left padding are not counted
    assert log.generated_tokens == 8
    assert len(log.prompt_tokens) == 2
    assert log.prompt_tokens[1] > log.prompt_tokens[0] + 20
    m = GenerationLog(prompt_tokens=[10, 30], generated_tokens=12, seconds=3.0).metrics()
    assert m["gen_tokens_per_s"] == 4.0 and m["prompt_tokens_per_request"] == 20.0


def test_latency_percentiles_on_known_timings():
    m = LatencyLog(seconds=[0.5, 0.1, 0.3, 0.2, 0.4], generated_tokens=30).metrics()
    # sorted 0.1…0.5: quartiles 0.2 and 0.4, median 0.3; p95 = 0.4 + 0.8 × 0.1 = 0.48; 30 tokens in 1.5 s
    assert m == {
        "latency_p25_s": 0.2,
        "latency_p50_s": 0.3,
        "latency_p75_s": 0.4,
        "latency_p95_s": 0.48,
        "latency_tokens_per_s": 20.0,
    }


def test_flops_convention_on_hand_numbers():
    # 1,000 tok/s on N = 1e9 against 100 TFLOP/s: full 6·N → 0.06; LoRA 4·N → 0.04; DPO adds its reference forward
    assert flops.mfu(1000, 10**9, "full", 100e12) == pytest.approx(0.06)
    assert flops.mfu(1000, 10**9, "lora", 100e12) == pytest.approx(0.04)
    assert flops.mfu(1000, 10**9, "dpo", 100e12) == pytest.approx(0.06)
    # checkpointing: recompute is not model FLOPs (MFU stays 0.04) but is hardware FLOPs (HFU 0.06)
    assert flops.hfu(1000, 10**9, "lora", 100e12, checkpointing=True) == pytest.approx(0.06)
    assert flops.hfu(1000, 10**9, "lora", 100e12, checkpointing=False) == pytest.approx(0.04)


def test_flop_params_leave_out_an_untied_input_embedding(tokenizer_dir):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = {
        "vocab_size": 1000,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 1,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    untied = LlamaForCausalLM(LlamaConfig(**cfg, tie_word_embeddings=False))
    tied = LlamaForCausalLM(LlamaConfig(**cfg, tie_word_embeddings=True))
    total = sum(p.numel() for p in untied.parameters())
    assert flops.flop_params(untied) == total - 1000 * 32
    assert flops.flop_params(tied) == sum(p.numel() for p in tied.parameters())  # the shared matrix, once


def test_loss_drop_over_the_last_quarter_by_hand():
    from bakeoff.train.stopping import loss_drop

    hist = [{"step": s, "loss": l} for s, l in [(5, 2.0), (10, 1.6), (20, 1.2), (30, 1.0), (35, 0.8), (40, 0.64)]]
    # last quarter of 40 steps: steps 30, 35, 40. Least squares: slope −0.036/step, line at step 30: 0.99333;
    # fall over 10 steps 0.36 → 0.36 / 0.99333 = 0.36242
    assert loss_drop(hist) == pytest.approx(0.36242, abs=1e-4)
    assert loss_drop(hist[:1]) is None
    flat = [{"step": s, "loss": 1.0} for s in (10, 20, 30, 40)]
    assert loss_drop(flat) == 0.0


def test_convergence_judgement():
    from bakeoff.train.stopping import convergence

    falling = [{"step": s, "loss": 2.0 - s / 25} for s in (10, 20, 30, 40)]  # 0.4 at step 30 → 0.4 … 0.8
    flat = [{"step": s, "loss": 0.5} for s in (10, 20, 30, 40)]
    val_down = [{"step": 20, "loss": 1.0}, {"step": 40, "loss": 0.8}]
    val_up = [{"step": 20, "loss": 0.8}, {"step": 40, "loss": 0.9}]
    assert convergence(falling, val_down, False, 0.05) == "still improving"
    assert convergence(falling, val_up, False, 0.05) == "converged"  # validation turned: more steps would not help
    # a flat training loss while validation still falls (as DPO's did): validation decides, never "converged"
    assert convergence(flat, val_down, False, 0.05) == "still improving"
    assert convergence(falling, [], False, 0.05) == "still improving"  # no validation: a falling training loss
    assert convergence(flat, val_down[:1], False, 0.05) == "not judged (under 2 validation points)"
    assert convergence(falling, val_down, True, 0.05) == "stopped early"


def _curve(rng, steps, level, rows=40, noise=0.03):
    """Per-row validation losses at each step: each row has its own difficulty, the curve its level(step), and every
    evaluation its own noise per row."""
    difficulty = [rng.uniform(0.0, 0.6) for _ in range(rows)]
    return [(s, [max(0.0, d + level(s) + rng.gauss(0, noise)) for d in difficulty]) for s in steps]


def test_a_noisy_falling_validation_curve_does_not_stop_early_and_a_flat_one_does():
    """The issue's curve: 300 steps, an evaluation every 10, validation loss falling from 0.6 to 0.15 with noise and
    bumps of +0.05 on two evaluations in a row (what stopped the old patience-2 rule at step 180). The noise-aware
    rule with a patience of 30% of the run never stops it; the same run once its curve has flattened (level constant
    after step 100) stops a patience after the flattening (plus the smoothing's lag), and is not called still
    improving."""
    import random

    from bakeoff.train.stopping import SMOOTHING, EarlyStop

    steps = list(range(10, 301, 10))

    def falling(s):
        return 0.6 * (1 - s / 330) + (0.05 if s in (170, 180) else 0.0)

    for seed in range(5):
        rule = EarlyStop(patience_steps=90, noise_z=2.0)
        stops = [s for s, rows in _curve(random.Random(seed), steps, falling) if rule.update(s, rows)]
        assert stops == [], (seed, stops)
        assert rule.still_improving() is True

    for seed in range(5):
        rule = EarlyStop(patience_steps=90, noise_z=2.0)
        flat = [
            s
            for s, rows in _curve(random.Random(seed), steps, lambda s: 0.6 * (1 - min(s, 100) / 330))
            if rule.update(s, rows)
        ]
        assert flat and 100 + 90 <= flat[0] <= 100 + 90 + 20 * SMOOTHING, (seed, flat)  # the smoothing's lag
        assert rule.still_improving() is False


def test_the_old_patience_of_two_evaluations_would_have_stopped_the_noisy_curve():
    """The control for the test above: on the same curves, stopping after two evaluations without a new raw best
    (transformers' EarlyStoppingCallback, the previous rule) stops at least one of the five runs before step 300."""
    import random

    steps = list(range(10, 301, 10))
    stopped = 0
    for seed in range(5):
        best, waited = float("inf"), 0
        for s, rows in _curve(
            random.Random(seed), steps, lambda s: 0.6 * (1 - s / 330) + (0.05 if s in (170, 180) else 0)
        ):
            mean = sum(rows) / len(rows)
            best, waited = (mean, 0) if mean < best else (best, waited + 1)
            if waited >= 2:
                stopped += 1
                break
    assert stopped >= 1


def test_the_speed_probe_multiplies_in_fp32_on_a_cpu_without_bf16_units(monkeypatch):
    """Without bf16 units torch emulates bf16 (a 2048² matmul took 56 s on an AVX2-only CPU): the probe casts its
    operands to fp32 there, and still returns a time."""
    import torch

    from bakeoff.core import measure, models

    cast = []
    real_to = torch.Tensor.to

    def to(self, *args, **kw):
        cast.extend(x for x in (*args, *kw.values()) if isinstance(x, torch.dtype))
        return real_to(self, *args, **kw)

    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(models, "cpu_bf16_fast", lambda: False)
    assert measure.speed_probe() > 0
    assert cast == [torch.float32, torch.float32]

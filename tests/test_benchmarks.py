"""The CPU-safe parts of the GPU benchmark: it runs end to end at toy size and reports what it measured."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu  # noqa: E402


def test_mfu_convention():
    # 1B params, 1000 tok/s: full = 6e12 FLOP/s, adapters = 4e12 FLOP/s, against a 100 TFLOP/s peak
    assert gpu.mfu({"technique": "full", "train_tokens_per_s": 1000}, 10**9, 100) == 0.06
    assert gpu.mfu({"technique": "lora", "train_tokens_per_s": 1000}, 10**9, 100) == 0.04
    assert gpu.mfu({"technique": "lora", "status": "oom"}, 10**9, 100) is None
    # recomputation under checkpointing is not useful work: still 4·N, so MFU falls as the step slows; HFU counts it
    assert gpu.mfu({"technique": "lora_ckpt", "train_tokens_per_s": 1000}, 10**9, 100) == 0.04
    assert gpu.mfu({"technique": "lora_ckpt", "train_tokens_per_s": 1000}, 10**9, 100, hardware=True) == 0.06
    assert gpu.mfu({"technique": "lora", "train_tokens_per_s": 1000}, 10**9, 100, hardware=True) == 0.04


def test_1b_shape_is_about_a_billion():
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**gpu.SHAPES["1b"], tie_word_embeddings=False))
    assert 1.0e9 < sum(p.numel() for p in model.parameters()) < 1.2e9


@pytest.mark.slow
def test_tiny_run_on_cpu(tmp_path):
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--shape", "tiny",
                        "--steps", "3", "--batch", "2", "--seq", "32", "--techniques", "lora,full",
                        "--out", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = {row["technique"]: row for row in json.loads(out.read_text())["shapes"]["tiny"]["rows"]}
    assert rows["lora"]["status"] == "ok" and rows["full"]["status"] == "ok", rows
    assert rows["lora"]["trainable_params"] < rows["full"]["trainable_params"]
    assert rows["lora"]["tokens_seen"] == 3 * 2 * 32
    assert "| lora | ok |" in r.stdout
    assert rows["lora"]["predicted_gb"] > 0 and rows["full"]["predicted_gb"] > rows["lora"]["predicted_gb"]

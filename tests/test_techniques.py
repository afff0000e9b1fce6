"""Training through the shared loop on a tiny model: what must change changes, what must not does not."""

from pathlib import Path

import pytest
import torch

from bakeoff.config import TrainConfig, VariantConfig
from bakeoff.data import read_examples
from bakeoff.techniques import get_technique
from bakeoff.techniques.base import train


def _variant(technique, **options):
    tech = get_technique(technique)
    t = TrainConfig(max_steps=3, effective_batch=4, micro_batch=2, lr=1e-2, max_seq_len=128, precision="fp32",
                    logging_steps=1, warmup_steps_excluded=1)
    return VariantConfig(name=technique, technique=technique, train=t, options={**tech.defaults, **options})


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_lora_trains_adapter_only(tiny_model_dir, tickets, tmp_path, monkeypatch):
    tech = get_technique("lora")
    built = {}
    orig_build = tech.build

    def build(*a, **k):  # keep a handle on the very model the trainer trains
        built["model"] = orig_build(*a, **k)
        built["before"] = _weights(built["model"])
        return built["model"]

    monkeypatch.setattr(tech, "build", build)
    v = _variant("lora", r=4, alpha=8)
    record = train(tech, v, tiny_model_dir, read_examples(tickets)[:16], tmp_path / "out", "fp32", tmp_path / "w")
    before, after = built["before"], _weights(built["model"])
    lora_b = [k for k in before if "lora_B" in k]
    base = [k for k in before if "lora_" not in k]
    assert lora_b and base
    # lora_B starts at zero, so any change proves the adapter received gradients
    assert all(not torch.equal(before[k], after[k]) for k in lora_b)
    assert all(torch.equal(before[k], after[k]) for k in base), "a frozen base weight changed"
    assert (tmp_path / "out" / "adapter_model.safetensors").exists()
    assert record["trainable_params"] < record["total_params"] / 10
    assert record["train_steps"] == 3 and record["tokens_seen"] > 0
    assert record["train_tokens_per_s"] > 0 and record["train_peak_rss_mb"] > 0
    assert record["adapter_mb"] > 0 and record["effective_batch"] == 4 and record["grad_accum"] == 2


def test_full_changes_every_weight(tiny_model_dir, tickets, tmp_path, monkeypatch):
    tech = get_technique("full")
    built = {}
    orig_build = tech.build

    def build(*a, **k):
        built["model"] = orig_build(*a, **k)
        built["before"] = _weights(built["model"])
        return built["model"]

    monkeypatch.setattr(tech, "build", build)
    record = train(tech, _variant("full"), tiny_model_dir, read_examples(tickets)[:16], tmp_path / "out", "fp32",
                   tmp_path / "w")
    before, after = built["before"], _weights(built["model"])
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert not unchanged, f"weights that full fine-tuning left untouched: {unchanged}"
    assert record["trainable_params"] == record["total_params"]
    assert (tmp_path / "out" / "config.json").exists()


def test_saved_adapter_loads_back_and_changes_outputs(tiny_model_dir, tickets, tmp_path):
    """The saved adapter loads back and changes the model's output (merged for evaluation)."""
    from bakeoff.models import load_for_eval

    tech = get_technique("lora")
    train(tech, _variant("lora", r=4, alpha=8), tiny_model_dir, read_examples(tickets)[:16], tmp_path / "out",
          "fp32", tmp_path / "w")
    ids = torch.tensor([[1, 2, 3, 4]])
    base = load_for_eval(tiny_model_dir)(ids).logits
    tuned = load_for_eval(tiny_model_dir, tmp_path / "out")(ids).logits
    assert not torch.allclose(base, tuned)

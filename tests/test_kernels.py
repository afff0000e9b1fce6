"""The training step's speed levers (bakeoff.train.kernels): each one computes what it replaces."""

from dataclasses import replace

import pytest
import torch

from bakeoff.core.models import load_model, load_tokenizer
from bakeoff.core.sections import TrainConfig, VariantConfig
from bakeoff.data.examples import read_examples
from bakeoff.train import kernels
from bakeoff.train.techniques import get_technique
from bakeoff.train.trainer import Job, train


def _batch(tok):
    """Two right-padded rows of different lengths; prompt tokens and padding carry no label."""
    rows = [("Classify: the app crashes on start", "bug"), ("Refund please, I was charged twice for a plan", "refund")]
    ids, labels = [], []
    for prompt, answer in rows:
        p, a = tok(prompt)["input_ids"], tok(" " + answer)["input_ids"] + [tok.eos_token_id]
        ids.append(p + a)
        labels.append([-100] * len(p) + a)
    width = max(map(len, ids))
    pad = lambda x, v: x + [v] * (width - len(x))
    return {
        "input_ids": torch.tensor([pad(x, tok.pad_token_id) for x in ids]),
        "attention_mask": torch.tensor([pad([1] * len(x), 0) for x in ids]),
        "labels": torch.tensor([pad(x, -100) for x in labels]),
    }


def test_labelled_loss_and_gradients_equal_the_models_own(tiny_model_dir):
    tok = load_tokenizer(tiny_model_dir)
    batch = _batch(tok)
    # a GPU's version: each row's labelled positions gathered to a [batch × span] block, span counted on the host
    span = kernels.LabelSpan(lambda rows: dict(batch))([])[kernels.LabelSpan.KEY]
    assert span == int((batch["labels"][:, 1:] != -100).sum(dim=1).max())
    for num_items in (None, torch.tensor(23)):  # mean over labels; sum over the accumulated batch's 23 labels
        grads, per_row = [], {}
        for fn in ("model", "labelled", "gathered"):
            model = load_model(tiny_model_dir)
            extra = {} if num_items is None else {"num_items_in_batch": num_items}
            rows = per_row.setdefault(fn, [])
            loss = (
                model(**batch, use_cache=False, **extra).loss
                if fn == "model"
                else kernels.labelled_loss(model, batch, num_items, rows, span if fn == "gathered" else None)
            )
            loss.backward()
            grads.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}))
        (ref, g_ref), *others = grads
        for got, g_got in others:
            assert got == pytest.approx(ref, rel=1e-6)
            for n in g_ref:
                torch.testing.assert_close(g_got[n], g_ref[n], rtol=1e-5, atol=1e-7, msg=n)
        assert per_row["gathered"] == pytest.approx(per_row["labelled"], rel=1e-6) and len(per_row["labelled"]) == 2
    labelled = int((batch["labels"][:, 1:] != -100).sum())
    assert labelled < batch["attention_mask"].sum() / 2  # the head ran on under half the positions


def test_adapter_input_casts_off_give_the_same_forward_under_autocast(tiny_model_dir):
    from peft import get_peft_model

    tok = load_tokenizer(tiny_model_dir)
    batch = {k: v for k, v in _batch(tok).items() if k != "labels"}
    torch.manual_seed(0)
    model = get_peft_model(
        load_model(tiny_model_dir, dtype=torch.bfloat16),
        get_technique("lora").lora_config({"r": 4, "alpha": 8, "dropout": 0.0, "targets": "all-linear"}),
    )
    for m in model.modules():  # a non-zero adapter, so its path counts
        if hasattr(m, "lora_B"):
            torch.nn.init.normal_(m.lora_B["default"].weight, std=0.1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with_casts = model(**batch).logits
        kernels.apply(
            model, {"attention": "sdpa", "loss_logits": "all", "adapter_input_cast": False, "optimizer": "adamw_torch"}
        )
        without = model(**batch).logits
    assert any(getattr(m, "cast_input_dtype_enabled", True) is False for m in model.modules())
    assert torch.equal(with_casts, without)


def test_fp32_eager_attention_under_bf16_autocast_is_the_fp32_attention(tiny_model_dir):
    """``eager_fp32``: scores, softmax and weighted sum in fp32 under bf16 autocast, as SDPA's CPU kernel
    accumulates; transformers' eager attention rounds them to bf16. On the same bf16 query/key/value it is fp32
    attention up to the output's bf16 rounding and several times closer than bf16 eager; in an fp32 model it is
    eager attention exactly, and transformers takes it as an attention implementation."""
    from transformers.models.llama.modeling_llama import eager_attention_forward

    torch.manual_seed(0)
    mod = torch.nn.Module()
    mod.num_key_value_groups = 2
    q, k, v = torch.randn(2, 4, 24, 16) * 3, torch.randn(2, 2, 24, 16) * 3, torch.randn(2, 2, 24, 16)
    mask = torch.full((24, 24), float("-inf")).triu(1).expand(2, 1, 24, 24)
    scale = 16**-0.5
    qb, kb, vb = (x.bfloat16() for x in (q, k, v))
    ref, _ = eager_attention_forward(mod.eval(), qb.float(), kb.float(), vb.float(), mask, scale)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        bf, _ = eager_attention_forward(mod, qb, kb, vb, mask.bfloat16(), scale)
        f32, _ = kernels.eager_fp32_attention(mod, qb, kb, vb, mask.bfloat16(), scale)
    assert f32.dtype == torch.bfloat16
    err_f32, err_bf = float((f32.float() - ref).abs().max()), float((bf.float() - ref).abs().max())
    assert err_f32 <= float(ref.abs().max()) * 2**-8 and err_f32 < err_bf / 3, (err_f32, err_bf)

    tok = load_tokenizer(tiny_model_dir)
    batch = {k: v for k, v in _batch(tok).items() if k != "labels"}
    model = load_model(tiny_model_dir).eval()
    logits = {}
    for impl in ("eager", "eager_fp32"):
        kernels.apply(
            model, {"attention": impl, "loss_logits": "all", "adapter_input_cast": True, "optimizer": "adamw_torch"}
        )
        assert model.config._attn_implementation == impl
        with torch.no_grad():
            logits[impl] = model(**batch).logits
    keep = batch["attention_mask"].bool()
    torch.testing.assert_close(logits["eager_fp32"][keep], logits["eager"][keep], rtol=1e-5, atol=1e-5)


def _variant(technique="full", **train):
    t = TrainConfig(
        max_steps=3,
        effective_batch=4,
        micro_batch=2,
        lr=1e-3,
        max_seq_len=128,
        precision="fp32",
        logging_steps=1,
        warmup_steps_excluded=1,
        **train,
    )
    return VariantConfig(name=technique, technique=technique, train=t, options=dict(get_technique(technique).defaults))


def test_choice_on_cpu_and_where_it_falls_back(tiny_model_dir):
    model = load_model(tiny_model_dir)
    t = _variant().train
    k = kernels.choose(t, model, "fp32")
    assert k == {
        "attention": "eager_fp32",
        "loss_logits": "labelled",
        "adapter_input_cast": True,
        "optimizer": "adamw_torch_fused",
    }
    assert kernels.choose(replace(t, max_seq_len=2048), model, "fp32")["attention"] == "sdpa"  # long rows: SDPA
    assert kernels.choose(replace(t, processes=2), model, "fp32")["loss_logits"] == "all"  # DDP's forward
    assert kernels.choose(t, model, "fp32", sft=False)["loss_logits"] == "all"  # DPO computes its own loss
    model.config.model_type = "gemma2"  # soft-capped logits: the model's own loss
    assert kernels.choose(replace(t, loss_logits="labelled"), model, "fp32")["loss_logits"] == "all"
    assert kernels.choose(replace(t, attention="sdpa", loss_logits="all"), load_model(tiny_model_dir), "fp32") == {
        "attention": "sdpa",
        "loss_logits": "all",
        "adapter_input_cast": True,
        "optimizer": "adamw_torch_fused",
    }


def test_training_with_the_levers_follows_the_same_losses_and_records_them(
    tiny_model_dir, tickets, tmp_path, monkeypatch
):
    rows = read_examples(tickets)[:16]
    calls, built = {"labelled": 0}, []
    orig_loss, full = kernels.labelled_loss, get_technique("full")
    orig_build = full.build

    def spy_loss(*a, **k):
        calls["labelled"] += 1
        return orig_loss(*a, **k)

    monkeypatch.setattr(kernels, "labelled_loss", spy_loss)
    monkeypatch.setattr(full, "build", lambda *a, **k: built.append(orig_build(*a, **k)) or built[-1])
    before = {"attention": "sdpa", "loss_logits": "all", "adapter_input_cast": True, "optimizer": "adamw_torch"}
    recs = {}
    for side, choice in (("before", before), ("after", None)):
        v = _variant(optimizer="adamw_torch" if choice else "adamw_torch_fused")
        calls["labelled"] = 0
        recs[side] = train(
            Job(full, v, tiny_model_dir, tmp_path / side / "out", "fp32", tmp_path / side / "w", kernel_choice=choice),
            rows,
        )
        # the step really ran through them: the labelled loss on every micro-batch (2 × 3), the attention set
        assert calls["labelled"] == (6 if choice is None else 0), (side, calls)
        assert built[-1].config._attn_implementation == ("eager_fp32" if choice is None else "sdpa")
    losses = {s: [h["loss"] for h in r["history"]] for s, r in recs.items()}
    assert len(losses["after"]) == 3
    assert losses["after"] == pytest.approx(losses["before"], rel=1e-3), losses
    assert recs["after"]["kernels"] == "eager_fp32 attn · labelled logits · adamw_torch_fused"
    assert recs["before"]["kernels"] == "sdpa attn · all logits · adamw_torch"
    assert recs["after"]["kernel_choice"]["loss_logits"] == "labelled"

"""Training through the shared loop on a tiny model: what must change changes, what must not does not."""

import pytest
import torch

from bakeoff.core.sections import TrainConfig, VariantConfig
from bakeoff.data.examples import read_examples
from bakeoff.train.techniques import get_technique
from bakeoff.train.trainer import Job, train


def _variant(technique, **options):
    tech = get_technique(technique)
    t = TrainConfig(
        max_steps=3,
        effective_batch=4,
        micro_batch=2,
        lr=1e-2,
        max_seq_len=128,
        precision="fp32",
        logging_steps=1,
        warmup_steps_excluded=1,
    )
    return VariantConfig(name=technique, technique=technique, train=t, options={**tech.defaults, **options})


def _weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _train_watched(technique: str, v, model_dir, rows, tmp_path, monkeypatch, parent_dir=None):
    """Train, keeping the very model the trainer trained and its weights before training."""
    tech = get_technique(technique)
    built = {}
    orig_build = tech.build

    def build(*a, **k):
        built["model"] = orig_build(*a, **k)
        built["before"] = _weights(built["model"])
        return built["model"]

    monkeypatch.setattr(tech, "build", build)
    record = train(Job(tech, v, model_dir, tmp_path / "out", "fp32", tmp_path / "w", parent_dir=parent_dir), rows)
    return record, built["model"], built["before"], _weights(built["model"])


def test_lora_trains_adapter_only(tiny_model_dir, tickets, tmp_path, monkeypatch):
    v = _variant("lora", r=4, alpha=8)
    record, _, before, after = _train_watched(
        "lora", v, tiny_model_dir, read_examples(tickets)[:16], tmp_path, monkeypatch
    )
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
    # 3 optimizer steps of effective batch 4 (2 micro-batches of 2): 12 rows reached the model
    assert record["adapter_mb"] > 0 and record["rows_seen"] == 12 and record["train_steps"] == 3


def test_full_changes_every_weight(tiny_model_dir, tickets, tmp_path, monkeypatch):
    record, _, before, after = _train_watched(
        "full", _variant("full"), tiny_model_dir, read_examples(tickets)[:16], tmp_path, monkeypatch
    )
    unchanged = [k for k in before if torch.equal(before[k], after[k])]
    assert not unchanged, f"weights that full fine-tuning left untouched: {unchanged}"
    assert record["trainable_params"] == record["total_params"]
    assert (tmp_path / "out" / "config.json").exists()


def test_qlora_base_is_4bit_and_frozen(tiny_model_dir, tickets, tmp_path, monkeypatch):
    import bitsandbytes as bnb

    v = _variant("qlora", r=4, alpha=8)
    record, model, before, after = _train_watched(
        "qlora", v, tiny_model_dir, read_examples(tickets)[:16], tmp_path, monkeypatch
    )
    four_bit = [n for n, m in model.named_modules() if isinstance(m, bnb.nn.Linear4bit)]
    assert len(four_bit) == 2 * 7  # every attention and MLP projection of both layers
    weight = dict(model.named_modules())[four_bit[0]].weight
    assert weight.quant_state.quant_type == "nf4" and weight.quant_state.nested  # double quantization
    lora_b = [k for k in before if "lora_B" in k]
    frozen = [k for k in before if "lora_" not in k]
    assert lora_b and all(not torch.equal(before[k], after[k]) for k in lora_b)
    assert all(torch.equal(before[k], after[k]) for k in frozen), "a frozen (quantized) weight changed"
    assert record["trainable_params"] < record["total_params"] / 10


def test_dpo_continues_the_supervised_adapter(tiny_model_dir, tickets, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from bakeoff.data.examples import Pair

    sft_dir = tmp_path / "sft"
    train(
        Job(get_technique("lora"), _variant("lora", r=4, alpha=8), tiny_model_dir, sft_dir, "fp32", tmp_path / "w0"),
        read_examples(tickets)[:16],
    )
    exs = read_examples(tickets)[:8]
    pairs = [
        Pair(
            messages=e.messages,
            chosen=e.completion,
            rejected=e.completion.replace("low", "high")
            if "low" in e.completion
            else e.completion.replace("}", ', "x": 1}'),
        )
        for e in exs
    ]
    v = _variant("dpo", init_from="lora")
    _record, _model, before, after = _train_watched(
        "dpo", v, tiny_model_dir, pairs, tmp_path / "d", monkeypatch, parent_dir=sft_dir
    )
    saved = load_file(sft_dir / "adapter_model.safetensors")
    started = {k: t for k, t in before.items() if "lora_" in k and ".default." in k}
    assert len(started) == len(saved)
    for k, t in started.items():  # DPO's adapter starts from the supervised one, value for value
        saved_key = k.replace(".default", "")
        assert torch.equal(t, saved[saved_key]), k
    assert any(not torch.equal(before[k], after[k]) for k in started), "DPO changed no adapter weight"
    frozen = [k for k in before if "lora_" not in k]
    assert all(torch.equal(before[k], after[k]) for k in frozen), "DPO changed a base weight"
    assert (tmp_path / "d" / "out" / "adapter_model.safetensors").exists()


def test_dpo_under_group_by_length_trains_its_pairs_in_random_order(
    tiny_model_dir, tickets, tmp_path, monkeypatch, capsys
):
    """train_defaults.batching: group_by_length groups the supervised rows; transformers groups by an input_ids
    column that TRL's tokenized pairs lack, so DPO draws its pairs in random order and says so, not a crash."""
    from dataclasses import replace

    from bakeoff.data.examples import Pair

    grouped = lambda v: replace(v, train=replace(v.train, batching="group_by_length"))
    sft_dir = tmp_path / "sft"
    train(
        Job(
            get_technique("lora"),
            grouped(_variant("lora", r=4, alpha=8)),
            tiny_model_dir,
            sft_dir,
            "fp32",
            tmp_path / "w0",
        ),
        read_examples(tickets)[:16],
    )
    pairs = [
        Pair(messages=e.messages, chosen=e.completion, rejected=e.completion + " x") for e in read_examples(tickets)[:8]
    ]
    _, _, before, after = _train_watched(
        "dpo",
        grouped(_variant("dpo", init_from="lora")),
        tiny_model_dir,
        pairs,
        tmp_path / "d",
        monkeypatch,
        parent_dir=sft_dir,
    )
    assert any(not torch.equal(before[k], after[k]) for k in before if "lora_" in k)
    assert "preference pairs are drawn in random order" in capsys.readouterr().out


def test_dpo_reference_pass_runs_once_per_process_and_trains_as_the_per_step_reference(
    tiny_model_dir, tickets, tmp_path, monkeypatch
):
    """precompute_ref: the frozen reference's log-probabilities are computed before the first step of the first run
    and reused by the next run on the same pairs and parent (a search's trials); the training matches the run that
    computes the reference in every step, loss for loss."""
    from trl import DPOTrainer
    from trl.trainer import dpo_trainer

    from bakeoff.data.examples import Pair
    from bakeoff.train.backends import trl_dpo

    sft_dir = tmp_path / "sft"
    train(
        Job(get_technique("lora"), _variant("lora", r=4, alpha=8), tiny_model_dir, sft_dir, "fp32", tmp_path / "w0"),
        read_examples(tickets)[:16],
    )
    pairs = [
        Pair(messages=e.messages, chosen=e.completion, rejected=e.completion.replace("}", ', "x": 1}'))
        for e in read_examples(tickets)[:8]
    ]
    passes, per_step = [], []  # per_step: each forward pass under the frozen "ref" adapter
    orig_pass, orig_adapter = DPOTrainer._precompute_ref_logps, dpo_trainer.use_adapter
    monkeypatch.setattr(
        DPOTrainer, "_precompute_ref_logps", lambda self, *a: passes.append(a[1]) or orig_pass(self, *a)
    )
    monkeypatch.setattr(
        dpo_trainer, "use_adapter", lambda *a, **k: per_step.append(k.get("adapter_name")) or orig_adapter(*a, **k)
    )
    monkeypatch.setattr(trl_dpo, "_REF_LOGPS", {})
    losses = {}
    for run, pre in (("first", True), ("second", True), ("per step", False)):
        per_step.clear()
        rec = train(
            Job(
                get_technique("dpo"),
                _variant("dpo", init_from="lora", precompute_ref=pre),
                tiny_model_dir,
                tmp_path / run / "out",
                "fp32",
                tmp_path / run / "w",
                parent_dir=sft_dir,
            ),
            pairs,
        )
        losses[run] = (rec["train_loss_mean"], rec["train_loss_final"])
        if run == "first":  # 8 pairs in batches of micro_batch 2: 4 forward passes of the reference, before step 1
            assert passes == ["train"] and len(per_step) == 4, "the first run passes over each pair once"
            assert "ref_pass_reused_s" not in rec
            first_wall = rec["train_wall_s"]
        elif run == "second":
            assert passes == ["train"] and not per_step, "the second run reuses the first's reference"
            # its training time counts the pass it reused, as measured in the first run: the time it costs alone
            assert rec["ref_pass_reused_s"] > 0 and rec["train_wall_s"] > rec["ref_pass_reused_s"]
            assert rec["ref_pass_reused_s"] < first_wall
        else:  # 3 steps of 2 micro-batches, the reference in each
            assert len(per_step) == 6, "without precompute_ref the reference runs in every micro-batch"
    assert losses["first"] == pytest.approx(losses["per step"], rel=1e-4)
    assert losses["second"] == pytest.approx(losses["per step"], rel=1e-4)


def test_accumulation_trains_like_a_large_batch(tiny_model_dir, tickets, tmp_path):
    """micro-batch 2 × 8 accumulation steps and micro-batch 16 × 1: the same losses (per-token normalisation)."""
    rows = read_examples(tickets)[:64]
    losses = {}
    for micro in (2, 16):
        v = VariantConfig(
            name="full",
            technique="full",
            options={},
            train=TrainConfig(
                max_steps=3,
                effective_batch=16,
                micro_batch=micro,
                lr=1e-3,
                max_seq_len=128,
                precision="fp32",
                logging_steps=1,
            ),
        )
        rec = train(
            Job(get_technique("full"), v, tiny_model_dir, tmp_path / f"o{micro}", "fp32", tmp_path / f"w{micro}"), rows
        )
        losses[micro] = [h["loss"] for h in rec["history"]]
        assert rec["grad_accum"] == 16 // micro and rec["effective_batch"] == 16
    assert len(losses[2]) == 3
    # the first step sees identical weights, later ones weights updated by matching gradients
    assert losses[2] == pytest.approx(losses[16], rel=2e-3), losses


def test_memory_budget_ends_as_oom_with_the_peak(tiny_model_dir, tickets, tmp_path):
    from bakeoff.core.runs import guarded
    from bakeoff.train.callbacks import MemoryBudgetExceeded

    v = _variant("lora", r=4, alpha=8)
    v = VariantConfig(
        name="tight",
        technique="lora",
        options=v.options,
        train=TrainConfig(max_steps=3, effective_batch=4, micro_batch=2, precision="fp32", memory_budget_gb=0.05),
    )
    record = guarded(
        {},
        lambda: train(
            Job(get_technique("lora"), v, tiny_model_dir, tmp_path / "out", "fp32", tmp_path / "w"),
            read_examples(tickets)[:16],
        ),
    )
    assert record["status"] == "oom" and record["error"].startswith(MemoryBudgetExceeded.__name__)
    assert "memory_budget_gb 0.05" in record["error"]
    assert record["metrics"]["train_peak_rss_mb"] > 0.05 * 1024


def test_cuda_oom_is_classified_oom(tmp_path):
    import json

    from bakeoff.core.runs import Skipped, Status, classify, guarded, write_json

    assert classify(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))[0] is Status.OOM
    assert classify(ValueError("shapes do not match"))[0] is Status.FAILED
    assert classify(Skipped("fp16 on CPU"))[0] is Status.SKIPPED
    # a record holds the plain word on disk, as every earlier record does
    write_json(tmp_path / "r.json", guarded({"name": "x"}, lambda: {"loss": 1.0}))
    assert json.loads((tmp_path / "r.json").read_text())["status"] == "ok"


def test_padding_free_without_flash_attention_is_skipped(tiny_model_dir, tickets, tmp_path):
    from bakeoff.core.runs import guarded

    v = _variant("lora", r=4, alpha=8)
    v = VariantConfig(
        name="pf",
        technique="lora",
        options=v.options,
        train=TrainConfig(max_steps=1, effective_batch=2, micro_batch=2, batching="padding_free"),
    )
    record = guarded(
        {},
        lambda: train(
            Job(get_technique("lora"), v, tiny_model_dir, tmp_path / "out", "fp32", tmp_path / "w"),
            read_examples(tickets)[:4],
        ),
    )
    assert record["status"] == "skipped" and "flash-attention" in record["error"]


def test_saved_adapter_loads_back_and_changes_outputs(tiny_model_dir, tickets, tmp_path):
    """The saved adapter loads back and changes the model's output (merged for evaluation)."""
    from bakeoff.core.models import load_for_eval

    tech = get_technique("lora")
    train(
        Job(tech, _variant("lora", r=4, alpha=8), tiny_model_dir, tmp_path / "out", "fp32", tmp_path / "w"),
        read_examples(tickets)[:16],
    )
    ids = torch.tensor([[1, 2, 3, 4]])
    base = load_for_eval(tiny_model_dir)(ids).logits
    tuned = load_for_eval(tiny_model_dir, tmp_path / "out")(ids).logits
    assert not torch.allclose(base, tuned)


def _evaluated(max_steps, lr, patience, improving_drop=0.05):
    t = TrainConfig(
        max_steps=max_steps,
        effective_batch=4,
        micro_batch=4,
        lr=lr,
        lr_scheduler="constant",
        warmup_ratio=0.0,
        max_seq_len=128,
        precision="fp32",
        logging_steps=1,
        warmup_steps_excluded=1,
        eval_steps=2,
        early_stopping_patience=patience,
        improving_drop=improving_drop,
    )
    return VariantConfig(name="full", technique="full", train=t, options={})


def test_early_stopping_stops_a_run_whose_validation_loss_rises_and_keeps_the_best(tiny_model_dir, tickets, tmp_path):
    """At a learning rate of 0.05 full fine-tuning of the tiny model diverges: validation loss rises after its first
    evaluations; with a patience of 10% of the run (4 steps, so the rule's floor of SMOOTHING evaluations decides)
    the run stops soon after its best, and the saved weights are that best evaluation's checkpoint, not the last
    step's. Each point of the curve carries its standard error over the validation rows."""
    from safetensors.torch import load_file

    from bakeoff.train.stopping import SMOOTHING

    rows = read_examples(tickets)
    rec = train(
        Job(get_technique("full"), _evaluated(40, 5e-2, 0.1), tiny_model_dir, tmp_path / "out", "fp32", tmp_path / "w"),
        rows[:32],
        val_rows=rows[32:36],
    )
    curve = rec["val_curve"]
    assert rec["convergence"] == "stopped early" and rec["stopped_at_step"] < 40, curve
    best = min(curve, key=lambda v: v["loss"])
    # the rule compares each row's mean over SMOOTHING evaluations, so its last real improvement can come up to
    # SMOOTHING - 1 evaluations after the raw best (the window still drops the higher losses before it); it then
    # stops after SMOOTHING more evaluations (2 steps apart): at most 2 × SMOOTHING - 1 evaluations past the best
    assert rec["best_step"] == best["step"] < rec["stopped_at_step"] <= best["step"] + 2 * (2 * SMOOTHING - 1)
    assert rec["patience_steps"] == 4 and all(v["se"] > 0 for v in curve)
    assert all(v["loss"] >= best["loss"] for v in curve) and curve[-1]["loss"] > best["loss"]
    saved = load_file(tmp_path / "out" / "model.safetensors")
    kept = load_file(tmp_path / "w" / f"checkpoint-{best['step']}" / "model.safetensors")
    assert saved.keys() == kept.keys() and all(torch.equal(saved[k], kept[k]) for k in saved)


def test_a_deliberately_short_run_is_flagged_still_improving(tiny_model_dir, tickets, tmp_path):
    rows = read_examples(tickets)
    # 4 steps: the loss is still falling at its last step (by ~1.6% a step here); flag a fall above 0.5%
    rec = train(
        Job(
            get_technique("full"),
            _evaluated(4, 1e-3, 0.5, improving_drop=0.005),
            tiny_model_dir,
            tmp_path / "out",
            "fp32",
            tmp_path / "w",
        ),
        rows[:32],
        val_rows=rows[32:36],
    )
    curve = rec["val_curve"]
    assert [v["step"] for v in curve] == [2, 4] and curve[1]["loss"] < curve[0]["loss"], curve
    assert rec["train_loss_drop_last_quarter"] > 0.005 and rec["convergence"] == "still improving"
    assert rec["stopped_at_step"] == 4


def test_training_seeds_differ_in_data_order_and_initial_adapter_weights(
    tiny_model_dir, tickets, tmp_path, monkeypatch
):
    from dataclasses import replace

    from bakeoff.core.step_timing import StepLog

    rows = read_examples(tickets)[:16]
    seen, initial = {}, {}
    orig_add, lora = StepLog.add_micro_batch, get_technique("lora")
    orig_build = lora.build

    def build_and_keep(seed):
        def build(*a, **k):
            model = orig_build(*a, **k)
            initial[seed] = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_A" in n}
            return model

        return build

    for seed in (0, 1):
        monkeypatch.setattr(
            StepLog,
            "add_micro_batch",
            lambda self, b, s=seed: (seen.setdefault(s, []).append(b["input_ids"].tolist()), orig_add(self, b)),
        )
        monkeypatch.setattr(lora, "build", build_and_keep(seed))
        v = _variant("lora", r=4, alpha=8)
        train(
            Job(
                lora,
                replace(v, train=replace(v.train, seed=seed)),
                tiny_model_dir,
                tmp_path / f"o{seed}",
                "fp32",
                tmp_path / f"w{seed}",
            ),
            rows,
        )
    assert len(seen[0]) == len(seen[1]) == 6 and seen[0] != seen[1], "the data order did not change with the seed"
    assert initial[0] and all(not torch.equal(initial[0][n], initial[1][n]) for n in initial[0]), (
        "the seeds share their initial adapter weights"
    )


def test_each_evaluation_hands_its_standard_error_to_the_callbacks_after_the_stopping_rule(
    tiny_model_dir, tickets, tmp_path
):
    """The search's noise-aware pruning reads ``eval_loss_se`` from the evaluation's metrics: the stopping rule must
    put it there before any extra callback (the pruner) runs, and it is the curve's own standard error."""
    from transformers import TrainerCallback

    seen = []

    class Capture(TrainerCallback):
        def on_evaluate(self, args, state, control, metrics=None, **kw):
            seen.append((state.global_step, metrics.get("eval_loss_se")))

    rows = read_examples(tickets)
    rec = train(
        Job(get_technique("full"), _evaluated(4, 1e-3, 0.0), tiny_model_dir, tmp_path / "out", "fp32", tmp_path / "w"),
        rows[:16],
        val_rows=rows[16:22],
        extra_callbacks=[Capture()],
    )
    assert [s for s, _ in seen] == [p["step"] for p in rec["val_curve"]] == [2, 4]
    assert all(se and se == pytest.approx(p["se"], abs=1e-5) for (_, se), p in zip(seen, rec["val_curve"]))


def test_qlora_holds_its_unquantized_weights_and_activations_in_the_compute_dtype(
    tiny_model_dir, tickets, tmp_path, monkeypatch
):
    """QLoRA as its paper and PEFT run it, in bf16: the weights bitsandbytes leaves unquantized (embeddings, norms,
    head) and every MLP output (what backward saves) in bf16, the adapters in bf16 as TRL casts them for a quantized
    base, checkpointing on by default (LoRA's stays off), and the record says what the trainer held. Before, the 4-bit
    base loaded in fp32 and PEFT's preparation upcast
    every 16-bit weight, so the whole hidden-state stream was fp32."""
    tech = get_technique("qlora")
    t = TrainConfig(
        max_steps=2,
        effective_batch=4,
        micro_batch=2,
        lr=1e-3,
        max_seq_len=128,
        precision="bf16",
        logging_steps=1,
        warmup_steps_excluded=1,
        eval_steps=0,
    )
    v = VariantConfig(name="qlora", technique="qlora", train=t, options=dict(tech.defaults))
    assert v.train.gradient_checkpointing is True
    assert VariantConfig(name="lora", technique="lora", train=t, options={}).train.gradient_checkpointing is False
    built, seen = {}, []
    orig = tech.build

    def build(*a, **k):
        built["model"] = model = orig(*a, **k)
        for name, m in model.named_modules():
            if name.endswith(".mlp"):
                m.register_forward_hook(lambda mod, args, out: seen.append(out.dtype))
        return model

    monkeypatch.setattr(tech, "build", build)
    rec = train(Job(tech, v, tiny_model_dir, tmp_path / "out", "bf16", tmp_path / "w"), read_examples(tickets)[:16])
    model = built["model"]
    plain = {
        n: p.dtype
        for n, p in model.named_parameters()
        if not p.requires_grad and type(p).__name__ != "Params4bit" and p.is_floating_point()
    }
    assert plain and set(plain.values()) == {torch.bfloat16}, plain
    assert {p.dtype for p in model.parameters() if p.requires_grad} == {torch.bfloat16}
    assert seen and set(seen) == {torch.bfloat16}
    assert rec["gradient_checkpointing"] is True
    assert rec["dtypes"] == {
        "base": "nf4 4-bit",
        "unquantized": "bfloat16",
        "head": "bfloat16",
        "trainable": "bfloat16",
        "compute": "bfloat16",
        "activations": "bfloat16",
    }


@pytest.mark.parametrize(
    "fault, status",
    [
        (RuntimeError("CUDA error: an illegal memory access was encountered"), "failed"),
        (KeyError("lm_head"), "failed"),
        (NotImplementedError("Unsloth: this model type is not supported yet"), "skipped"),
        (RuntimeError("Unsloth currently only supports CUDA, Intel and AMD GPUs"), "skipped"),
    ],
)
def test_an_unsloth_crash_is_failed_and_what_it_cannot_run_is_skipped(monkeypatch, fault, status):
    """Unsloth's loader forced to raise (a fake module stands in for it: the fault is the point): a crash ends
    `failed` with its traceback, Unsloth's "unsupported" ends `skipped` with its own words."""
    import sys
    import types
    from dataclasses import replace
    from pathlib import Path

    from bakeoff.core.runs import guarded
    from bakeoff.train.backends import unsloth

    def from_pretrained(**kw):
        raise fault

    fake = types.ModuleType("unsloth")
    fake.FastLanguageModel = types.SimpleNamespace(from_pretrained=from_pretrained)
    monkeypatch.setitem(sys.modules, "unsloth", fake)
    monkeypatch.setattr(unsloth, "_IMPORT_ERROR", None)
    v = replace(_variant("lora"), backend="unsloth")
    rec = guarded({}, lambda: get_technique("lora").build(Path("unused"), v, "fp32"))
    assert rec["status"] == status, rec
    assert str(fault).strip("'") in rec["error"]
    assert ("from_pretrained" in rec["error"]) == (status == "failed")  # the traceback, for a failure only


def test_unsloth_without_cuda_is_skipped_at_once_with_the_reason(monkeypatch):
    from bakeoff.train.backends import unsloth

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert "CUDA GPU" in unsloth.cpu_reason()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert unsloth.cpu_reason() is None


def test_qlora_control_scores_its_untrained_4bit_base_like_every_run(tiny_model_dir, tickets, tmp_path):
    """Quantization apart from training: the QLoRA adapter disabled leaves the untrained NF4 base, scored on the
    same test split (``control_quality``) and probe (``control_probe_acc``); its KL to the base in the serving
    dtype (``control_general_kl``) is what quantization alone moved, and the trained model's KL is measured from
    that 4-bit base, not from the bf16 one."""
    from bakeoff.core.models import load_tokenizer
    from bakeoff.evaluate.local import EvalPlan, KlToBase, quantized_control
    from bakeoff.evaluate.logprobs import general_instructions

    tech = get_technique("qlora")
    t = TrainConfig(
        max_steps=2,
        effective_batch=4,
        micro_batch=2,
        lr=1e-2,
        max_seq_len=128,
        precision="bf16",
        logging_steps=1,
        warmup_steps_excluded=1,
        eval_steps=0,
    )
    v = VariantConfig(name="qlora", technique="qlora", train=t, options=dict(tech.defaults))
    rows = read_examples(tickets)
    train(Job(tech, v, tiny_model_dir, tmp_path / "out", "bf16", tmp_path / "w"), rows[:16])
    model = tech.load_for_eval(tiny_model_dir, tmp_path / "out", v, "bf16")
    tok = load_tokenizer(tiny_model_dir)
    plan = EvalPlan(metric="exact_match", max_new_tokens=4, batch_size=4, labels=None)
    from dataclasses import replace as _replace

    from bakeoff.evaluate.generation import Decoding, generate
    from bakeoff.evaluate.lmeval import run_probe

    prompts = [e.messages for e in rows[16:24]]
    with model.disable_adapter():  # the untrained 4-bit base's own answers, and its probe score, taken apart
        base_answers, _ = generate(model, tok, prompts, Decoding(4, 4))
        base_probe = run_probe(model, tok, tmp_path / "probe_base", 4, "bfloat16", limit=8)["probe_acc"]
    trained_answers, _ = generate(model, tok, prompts, Decoding(4, 4))
    assert trained_answers != base_answers  # the adapter moved the answers: the check below can tell them apart
    test = [_replace(e, completion=a) for e, a in zip(rows[16:24], base_answers)]  # references: the base's answers
    got = quantized_control(
        model, tok, test, plan, probe=lambda m: run_probe(m, tok, tmp_path / "probe", 4, "bfloat16", limit=8)
    )
    assert got["control_quality"] == 1.0 and got["control_probe_acc"] == base_probe  # scored the base, adapter off
    kl = KlToBase(tiny_model_dir, "qlora", "bf16", general_instructions()[:3])
    kl.take(model, tok)
    kl.take_control(model)
    out = kl.finish(tok)
    assert out["general_kl_against"] == "the served model with its adapter disabled"
    assert out["control_general_kl"] > 0 and out["general_kl"] > 0  # NF4 moved the base; training moved it again

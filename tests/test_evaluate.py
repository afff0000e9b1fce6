"""Evaluation on tiny models with the real tokenizer: shots, preference scoring, batching, lm-eval."""

import math

import pytest
import torch

from bakeoff.core.models import load_model, load_tokenizer
from bakeoff.core.scoring import exact_match, loose_match
from bakeoff.data.examples import Example, Pair, read_examples
from bakeoff.data.prompts import NearestShots, few_shot_messages, shot_picker
from bakeoff.evaluate.generation import Decoding, generate
from bakeoff.evaluate.local import Ask, EvalPlan, evaluate_examples
from bakeoff.evaluate.logprobs import preference_margins


def ex(text: str, answer: str = "x", i: int = 0) -> Example:
    return Example([{"role": "user", "content": text}], answer, id=i)


def test_nearest_shots_pick_the_most_similar_training_examples():
    train = [
        ex("refund my order please", "refund", 0),
        ex("the app crashes on login", "bug", 1),
        ex("how do I export a report", "how_to", 2),
        ex("app crashes when I upload a photo", "bug", 3),
        ex("charge twice on my card, refund", "billing", 4),
    ]
    pick = NearestShots(train, 2)
    got = pick(ex("the app crashes every time I login"))
    # both crash tickets, the most similar (shares "the app crashes on login") last, nearest the question
    assert [e.id for e in got] == [3, 1]
    assert [e.id for e in pick(ex("please refund the double charge on my card"))] == [0, 4]
    assert pick(ex("zzz")) == pick(ex("zzz"))  # deterministic, ties by train order
    assert [e.id for e in pick(ex("zzz"))] == [1, 0]
    fixed = shot_picker(train, 2, "fixed", seed=0)
    assert fixed(ex("a")) == fixed(ex("b"))  # fixed: the same shots for every item


def test_instruction_joins_the_system_prompt():
    e = Example([{"role": "system", "content": "You triage."}, {"role": "user", "content": "q"}], "a")
    msgs = few_shot_messages(e, [ex("q1", "a1")], instruction="Answer in JSON.")
    assert msgs[0] == {"role": "system", "content": "You triage.\n\nAnswer in JSON."}
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert e.messages[0]["content"] == "You triage."  # the example itself is not changed
    assert few_shot_messages(ex("q"), [], "Be brief.")[0] == {"role": "system", "content": "Be brief."}


def test_preference_scoring_on_a_model_with_a_known_answer(tiny_model_dir):
    """With the final norm zeroed every logit is 0: each token costs log V, so the shorter answer wins by
    exactly (extra tokens) × log V."""
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    with torch.no_grad():
        model.model.norm.weight.zero_()
    V = model.config.vocab_size
    pairs = [
        Pair([{"role": "user", "content": "q"}], "yes", "yes yes yes", id=0),
        Pair([{"role": "user", "content": "q"}], "no no no no", "no", id=1),
    ]
    n = lambda s: len(tok(s, add_special_tokens=False)["input_ids"])
    margins = preference_margins(model, tok, pairs)
    assert margins[0] == pytest.approx((n("yes yes yes") - n("yes")) * math.log(V), rel=1e-4)
    assert margins[1] == pytest.approx(-(n("no no no no") - n("no")) * math.log(V), rel=1e-4)


def test_batched_generation_matches_one_at_a_time(tiny_model_dir, tickets):
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    prompts = [e.messages for e in read_examples(tickets)[:12]]
    batched, _ = generate(model, tok, prompts, Decoding(12, 6))
    single, _ = generate(model, tok, prompts, Decoding(12, 1))
    assert sum(a == b for a, b in zip(batched, single)) >= 11  # ≥ 90% here; the benchmark checks ≥ 99%


def test_a_killed_evaluation_resumes_without_generating_again(tiny_model_dir, tickets, tmp_path, monkeypatch):
    """Answers stream to disk batch by batch; a second run with the same key generates only what is missing and
    returns the same answers as one uninterrupted run; another key (a retrained model) starts over."""
    from bakeoff.core.runs import Resume

    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    prompts = [e.messages for e in read_examples(tickets)[:10]]
    fresh, _ = generate(model, tok, prompts, Decoding(6, 4))
    path = tmp_path / "answers.jsonl"
    first = Resume(path, "run-1")
    generate(model, tok, prompts[:6], Decoding(6, 4), resume=first)  # killed after 6 of 10
    first.flush()
    assert len(path.read_text().splitlines()) == 1 + 6
    with open(path, "a") as f:
        f.write('{"prompt": "half a li')  # the line the kill cut short
    calls = []
    orig = model.generate
    monkeypatch.setattr(model, "generate", lambda **kw: calls.append(len(kw["input_ids"])) or orig(**kw))
    again = Resume(path, "run-1")
    out, log = generate(model, tok, prompts, Decoding(6, 4), resume=again)
    assert out == fresh and log.resumed == 6 and sum(calls) == 4
    assert log.metrics()["gen_resumed"] == 6 and log.metrics()["gen_tokens_per_s"] > 0  # the 4 generated here
    again.flush()  # killed again: the 4 answered after the cut line are on lines of their own, so all 10 come back
    resumed = Resume(path, "run-1")
    _, whole = generate(model, tok, prompts, Decoding(6, 4), resume=resumed)
    resumed.finish()
    assert whole.resumed == 10 and "gen_tokens_per_s" not in whole.metrics(), whole.metrics()  # nothing timed here
    again.finish()
    assert not path.exists()
    generate(model, tok, prompts[:3], Decoding(6), resume=Resume(path, "run-1"))
    calls.clear()
    _, log = generate(model, tok, prompts[:3], Decoding(6), resume=Resume(path, "run-2"))  # another model: none reused
    assert log.resumed == 0 and sum(calls) == 3


def test_evaluate_examples_records_every_figure(tiny_model_dir, tickets):
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    rows = read_examples(tickets)
    test, val = rows[:6], rows[6:10]
    pairs = [Pair(e.messages, e.completion, "nope", id=i) for i, e in enumerate(val)]
    metrics, out = evaluate_examples(model, tok, test, val, EvalPlan("exact_match", 8, 4, None, 3), Ask(pairs=pairs))
    from bakeoff.core.scoring import json_valid
    from bakeoff.data.prompts import encode, render_prompt
    from bakeoff.evaluate.logprobs import completion_loss

    # each figure has the value it must: recomputed here from the rows and the model, not read back
    preds = [r["prediction"] for r in out]
    assert metrics["n_test"] == 6 and metrics["quality"] == metrics["exact_match"]
    assert metrics["exact_match"] == pytest.approx(
        sum(exact_match(p, e.completion) for p, e in zip(preds, test)) / 6, abs=1e-4
    )
    assert metrics["json_valid"] == pytest.approx(sum(json_valid(p, "") for p in preds) / 6, abs=1e-4)
    lengths = [len(encode(tok, render_prompt(tok, e.messages))) for e in test]
    assert metrics["prompt_tokens_per_request"] == pytest.approx(sum(lengths) / 6, abs=0.05)
    loss = completion_loss(model, tok, [e.messages for e in val], [e.completion for e in val])
    assert metrics["val_loss"] == pytest.approx(loss, abs=1e-4) and metrics["val_ppl"] == pytest.approx(
        math.exp(loss), rel=1e-3
    )
    margins = preference_margins(model, tok, pairs)
    assert metrics["pref_accuracy"] == pytest.approx(sum(m > 0 for m in margins) / 4) and metrics["n_pref"] == 4
    assert metrics["gen_tokens_per_s"] > 0 and metrics["eval_peak_rss_mb"] > 100
    assert metrics["latency_p95_s"] >= metrics["latency_p50_s"] > 0
    assert [r["id"] for r in out] == [e.id for e in test] and all("prediction" in r for r in out)


def test_lm_eval_scores_the_same_outputs(tiny_model_dir, tickets, tmp_path):
    from bakeoff.evaluate import lmeval

    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    test = read_examples(tickets)[:10]
    for i, e in enumerate(test):
        e.id = i
    test[0].completion = generate(model, tok, [test[0].messages], Decoding(8))[0][0]  # one the model gets right
    ours, _ = generate(model, tok, [e.messages for e in test], Decoding(8, 5))
    task = lmeval.write_task(test, tok, tmp_path / "task", max_new_tokens=8)
    assert (task / "bakeoff_test.yaml").exists() and (task / "bakeoff_test.jsonl").exists()
    out = lmeval.run_task(task, {"pretrained": str(tiny_model_dir)}, tok, batch_size=5)
    assert sum(a == b.strip() for a, b in zip(ours, out["predictions"])) >= 9  # the same greedy outputs
    agree = lmeval.agreement([loose_match(p, e.completion) for p, e in zip(ours, test)], out["per_example"])
    assert out["per_example"][0] == 1.0 and agree["lm_eval_disagree"] <= 1


def test_lm_eval_reuse_scores_bakeoffs_own_answers_and_names_a_prompt_it_never_saw(tiny_model_dir, tickets, tmp_path):
    """eval.lm_eval: reuse: no second generation (no model at all here); lm-eval builds each request from its task
    file, takes our answer for it and scores it with its own exact_match."""
    from bakeoff.data.prompts import render_prompt
    from bakeoff.evaluate.local import EvalInputs, LmEvalRun, run_lm_eval

    tok = load_tokenizer(tiny_model_dir)
    test = read_examples(tickets)[:6]
    for i, e in enumerate(test):
        e.id = i
    answers = [e.completion if i in (1, 4) else "WRONG " + e.completion for i, e in enumerate(test)]
    answers[2] = "  " + test[2].completion.upper() + "  "  # right once case and spacing are ignored
    rows = [{"prediction": a, "loose_match": loose_match(a, e.completion)} for a, e in zip(answers, test)]
    inputs = EvalInputs([], [], test, [], EvalPlan("exact_match", 8))
    got = run_lm_eval(inputs, rows, None, tok, tmp_path / "task", LmEvalRun(mode="reuse"))
    assert got["lm_eval_exact_match"] == pytest.approx(3 / 6) and got["lm_eval_disagree"] == 0
    assert got["lm_eval_generated"] == 0.0 and got["lm_eval_wall_s"] >= 0
    # a prompt bakeoff rendered differently from lm-eval's task is an error that shows the prompt
    from bakeoff.evaluate import lmeval

    task = lmeval.write_task(test, tok, tmp_path / "task2", 8)
    wrong = lmeval.replay({render_prompt(tok, e.messages) + "x": "a" for e in test})
    with pytest.raises(KeyError, match="did not answer"):
        lmeval.run_task(task, wrong, tok)


def test_standard_lm_eval_task_offline_is_skipped_with_the_reason(tiny_model_dir, monkeypatch):
    from bakeoff.evaluate.lmeval import run_standard

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    tok = load_tokenizer(tiny_model_dir)
    got = run_standard(["arc_easy"], load_model(tiny_model_dir).eval(), tok, 4, limit=5)
    assert got["arc_easy"]["status"] == "skipped" and got["arc_easy"]["reason"]


def test_shared_prompt_label_scores_equal_full_sequence_scores(tiny_model_dir):
    """Every label's log-probability from the shared prompt equals the full-sequence one within 1e-4, for labels of
    1 to many tokens, a label that is a token prefix of another (packed side by side, kept apart by the mask), and
    prompts of different lengths (with a system turn); the chosen labels are identical."""
    from bakeoff.data.prompts import prompt_and_full
    from bakeoff.evaluate.logprobs import completion_logprobs, label_logprobs

    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    labels = [
        "refund",
        "refund request",
        "card arrival status",
        "a",
        "billing: double charge on my card after the upgrade",
        "Refund",
    ]
    prompts = [
        [{"role": "user", "content": "my card was charged twice"}],
        [
            {"role": "system", "content": "Classify the ticket."},
            {"role": "user", "content": "where is my new card? " * 12},
        ],
        [{"role": "user", "content": "hi"}],
    ]
    tails = [prompt_and_full(tok, prompts[0], c) for c in labels]
    lens = [len(f) - n for f, n in tails]
    assert len(set(lens)) >= 4  # 1 to many tokens
    short, long_ = tails[0][0][tails[0][1] :], tails[1][0][tails[1][1] :]
    end = 0  # the end-of-turn tokens every answer ends with
    while short[-end - 1 :] == long_[-end - 1 :]:
        end += 1
    assert end >= 1 and long_[: len(short) - end] == short[:-end]  # "refund" is a token prefix of "refund request"
    for impl in ("sdpa", "eager"):  # a boolean mask; an additive one
        model.set_attn_implementation(impl)
        full = completion_logprobs(
            model, tok, [p for p in prompts for _ in labels], [c for _ in prompts for c in labels]
        )
        shared = label_logprobs(model, tok, prompts, labels)
        for i in range(len(prompts)):
            for j in range(len(labels)):
                assert shared[i][j] == pytest.approx(full[i * len(labels) + j][0], abs=1e-4), (impl, i, labels[j])
    from bakeoff.evaluate.logprobs import choose_labels

    assert choose_labels(model, tok, prompts, labels) == choose_labels(model, tok, prompts, labels, shared=False)
    half = load_model(tiny_model_dir).to(torch.bfloat16).eval()  # scored in fp32, then left as it was
    half.model.norm.weight.data = half.model.norm.weight.data.float()  # one fp32 tensor among bf16 ones
    snapshot = {n: t.clone() for n, t in half.state_dict().items()}
    choose_labels(half, tok, prompts, labels)
    assert all(t.dtype == snapshot[n].dtype and torch.equal(t, snapshot[n]) for n, t in half.state_dict().items())


def test_label_choice_takes_the_most_likely_label(tiny_model_dir):
    """Uniform logits: every token costs log V, so the label of fewest tokens wins; a tie goes to the first."""
    from bakeoff.evaluate.logprobs import choose_labels

    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    with torch.no_grad():
        model.model.norm.weight.zero_()
    prompts = [[{"role": "user", "content": "q"}]] * 2
    assert choose_labels(model, tok, prompts, ["card arrival status", "refund"]) == ["refund", "refund"]
    assert choose_labels(model, tok, prompts, ["yes", "no"]) == ["yes", "yes"]


@pytest.mark.parametrize(
    "pred, ref, want",
    [
        ("Card arrival", "card_arrival", True),
        ('{"category": "Bug", "urgency": "High"}', '{"category": "bug", "urgency": "high"}', True),  # values' case
        (
            '{"urgency": "high", "category": "bug"}',
            '{"category": "bug", "urgency": "high"}',
            False,
        ),  # same object: right
        ("card_arrival", "card_arrival", False),  # right: not a miss at all
        ("refund", "card_arrival", False),  # wrong in substance
    ],
)
def test_format_only_misses(pred, ref, want):
    from bakeoff.core.scoring import format_only_miss

    assert format_only_miss(pred, ref) is want


def test_general_kl_is_zero_for_the_base_and_grows_with_change(tiny_model_dir):
    """KL(base ‖ model) over the fixed general answers: 0 for the base against itself, larger for a model whose
    weights moved further."""
    from bakeoff.evaluate.logprobs import general_instructions, general_kl

    tok = load_tokenizer(tiny_model_dir)
    base = load_model(tiny_model_dir).eval()
    items = general_instructions()
    assert len(items) == 24 and all(e.completion for e in items)
    assert general_kl(base, base, tok, items) == pytest.approx(0.0, abs=1e-6)
    kls = []
    for scale in (0.01, 0.1):
        moved = load_model(tiny_model_dir).eval()
        torch.manual_seed(0)
        with torch.no_grad():
            for p in moved.model.layers.parameters():
                p.add_(torch.randn_like(p) * scale)
        kls.append(general_kl(moved, base, tok, items))
    assert 0 < kls[0] < kls[1], kls


@pytest.mark.slow
def test_a_variant_trained_to_forget_diverges_from_the_base_and_scores_lower_on_the_probe(tmp_path):
    """The default base model, and the same model after full fine-tuning at a high learning rate on unrelated
    text (random letter strings): the offline probe (lm-eval local task) scores it lower and its KL to the base is
    larger than the base's own (0)."""
    import random

    from bakeoff.core.models import resolve_base
    from bakeoff.core.sections import TrainConfig, VariantConfig
    from bakeoff.evaluate.lmeval import run_probe
    from bakeoff.evaluate.logprobs import general_instructions, general_kl
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    base_dir = tmp_path / "base"
    resolve_base("smollm2-135m-instruct", base_dir)
    rng = random.Random(0)
    word = lambda: "".join(rng.choice("qxzjvkw") for _ in range(rng.randint(3, 9)))
    rows = [
        Example(
            [{"role": "user", "content": " ".join(word() for _ in range(6))}], " ".join(word() for _ in range(12)), id=i
        )
        for i in range(32)
    ]
    t = TrainConfig(
        max_steps=8,
        effective_batch=8,
        micro_batch=8,
        lr=1e-3,
        max_seq_len=128,
        precision="fp32",
        logging_steps=1,
        warmup_steps_excluded=1,
        eval_steps=0,
    )
    v = VariantConfig(name="forget", technique="full", train=t, options=dict(get_technique("full").defaults))
    train(Job(get_technique("full"), v, base_dir, tmp_path / "forgot", "fp32", tmp_path / "work"), rows)
    tok = load_tokenizer(base_dir)
    base, forgot = load_model(base_dir).eval(), load_model(tmp_path / "forgot").eval()
    items = general_instructions()
    got = {
        name: {
            **run_probe(m, tok, tmp_path / f"probe-{name}", batch_size=16, limit=80),
            "kl": general_kl(m, base, tok, items),
        }
        for name, m in (("base", base), ("forgot", forgot))
    }
    assert got["base"]["n_probe"] == got["forgot"]["n_probe"] == 80
    assert got["base"]["kl"] == pytest.approx(0.0, abs=1e-6) and got["forgot"]["kl"] > 0.5, got
    assert got["forgot"]["probe_acc"] <= got["base"]["probe_acc"] - 0.1, got


@pytest.fixture(scope="module")
def wide_model_dir(tokenizer_dir, tmp_path_factory):
    """A 4-layer Llama of ~64M parameters (128 MB in bf16) with the real tokenizer, stored in bf16: large enough that
    a copy of it stands out from the process's other memory."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=4,
        num_attention_heads=12,
        num_key_value_heads=4,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    out = tmp_path_factory.mktemp("wide") / "model"
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    return out


MEASURE = """
import gc, json, sys
import torch
from bakeoff.core import measure
from bakeoff.evaluate.local import KlToBase
from bakeoff.evaluate.logprobs import choose_labels, general_instructions
from bakeoff.core.models import load_model, load_tokenizer

mode, model_dir = sys.argv[1], sys.argv[2]
tok = load_tokenizer(model_dir)
prompts = [[{"role": "user", "content": f"ticket {i}: my card was charged twice"}] for i in range(4)]
labels = ["refund", "billing: double charge", "card arrival status", "bug", "how_to"]
out, held, grew = {}, {}, []


def load():
    held["model"] = load_model(model_dir, dtype=torch.bfloat16).eval()
    out["footprint"] = sum(w.numel() * w.element_size() for w in held["model"].parameters())
    if mode == "kl":
        with torch.no_grad():
            torch.manual_seed(1)
            for w in held["model"].model.layers.parameters():
                w.add_(torch.randn_like(w) * 0.05)


def window(work):
    gc.collect()
    measure._malloc_trim()
    before = measure._current_rss_bytes()
    with measure.PeakMemory() as mem:
        work()
    grew.append(mem.peak_rss_bytes - before)


load()
if mode == "labels":  # a first call pays the libraries' one-time set-up (and pages the mapped weights in)
    choose_labels(held["model"], tok, prompts, labels)
for _ in range(3):
    if mode == "labels":
        window(lambda: out.update(choice=choose_labels(held["model"], tok, prompts, labels)))
    else:  # take() runs the same forward first; then the evaluated model is freed and the base loaded
        if "model" not in held:
            load()
        kl = KlToBase(model_dir, "moved", "bf16", general_instructions()[:4])
        kl.take(held["model"], tok)

        def work():
            held.pop("model")
            gc.collect()
            out.update(kl.finish(tok))
        window(work)
out["grew"] = min(grew)  # a copy made on every call shows in every call; a library's occasional scratch does not
out["grew_each"] = grew
print("RESULT " + json.dumps(out))
"""


def _measured(mode: str, model_dir) -> dict:
    """``MEASURE`` in a fresh process (a long test session's heap would blur a resident-memory figure): how far
    resident memory rose above the served model's at the peak of label choice (``labels``) or of KL to the base
    once the evaluated model is freed (``kl``), the least of three calls, in up to five processes (see below), and
    the model's own bytes."""
    import json
    import subprocess
    import sys

    seen = []
    for _ in range(5):  # some processes peak ~the model's size higher on every call (a library's scratch, seen in 1
        # of 3 fresh processes); a copy of the model shows in every process: the first process under the margin counts
        r = subprocess.run(
            [sys.executable, "-c", MEASURE, mode, str(model_dir)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT ")), None)
        assert line, r.stderr[-3000:]
        got = json.loads(line[len("RESULT ") :])
        seen.append(round(got["grew"] / 2**20, 1))
        if got["grew"] < MARGIN * got["footprint"]:
            break
    return {**got, "grew_mb_per_process": seen}


MARGIN = 0.5  # of the serving footprint: activations, the fp32 logits at scored positions, an fp32 slice of the
# head (8192 of its rows: 0.2 of this model, whose head is 60% of its weights; 0.8% of an 8B model's)


def test_label_choice_holds_no_fp32_copy_of_the_model(wide_model_dir):
    """Label choice on a bf16 model grows resident memory by under half the model's own bytes (measured in a fresh
    process): the decoder runs as served, only the scored positions' logits are fp32. Before, ``model.float()``
    added a whole copy (+100%)."""
    got = _measured("labels", wide_model_dir)
    assert len(got["choice"]) == 4
    assert got["grew"] < MARGIN * got["footprint"], (got["grew_mb_per_process"], got["footprint"] / 2**20)


def test_kl_to_base_keeps_one_model_resident_and_matches_the_two_model_figure(wide_model_dir):
    """KL to the base of a changed model: the evaluated model's distributions first, then the base loaded once the
    evaluated model is freed: resident memory never holds the two (growth under half of one model, measured in a
    fresh process), and the figure is the one computed with both loaded. A PEFT model served unmerged takes its base
    by disabling its adapter, with no load at all."""
    from peft import LoraConfig, get_peft_model

    from bakeoff.evaluate.local import KlToBase
    from bakeoff.evaluate.logprobs import general_instructions, general_kl

    got = _measured("kl", wide_model_dir)
    assert got["grew"] < MARGIN * got["footprint"], (got["grew_mb_per_process"], got["footprint"] / 2**20)
    tok = load_tokenizer(wide_model_dir)
    items = general_instructions()[:4]
    both = general_kl(_moved(wide_model_dir), load_model(wide_model_dir, dtype=torch.bfloat16).eval(), tok, items)
    assert got["general_kl"] == pytest.approx(both, abs=1e-4) and both > 0
    assert got["general_kl_against"] == "the base model in bf16"

    peft = get_peft_model(
        load_model(wide_model_dir, dtype=torch.bfloat16),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False),
    )
    unmerged = KlToBase(wide_model_dir, "peft", "bf16", items)
    unmerged.take(peft.eval(), tok)
    assert unmerged.metrics["general_kl_against"] == "the served model with its adapter disabled"
    assert unmerged.metrics["general_kl"] > 0 and unmerged.finish(tok) is unmerged.metrics


def _moved(model_dir):
    m = load_model(model_dir, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        torch.manual_seed(1)
        for p in m.model.layers.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return m


def test_interleaved_latency_times_each_model_in_turn_in_one_process(tiny_model_dir, tickets, monkeypatch):
    """Every model gets one request per round, the order rotated each round, after one untimed warm-up each: the
    models' timings are taken over the same minutes."""
    from bakeoff.evaluate import generation

    tok = load_tokenizer(tiny_model_dir)
    models = {"a": load_model(tiny_model_dir).eval(), "b": load_model(tiny_model_dir).eval()}
    order, real = [], generation.generate

    def spy(model, tok_, prompts, *a, **k):
        order.append(next(n for n, m in models.items() if m is model))
        return real(model, tok_, prompts, *a, **k)

    monkeypatch.setattr(generation, "generate", spy)
    prompts = [e.messages for e in read_examples(tickets)[:3]]
    logs = generation.interleaved_latency(models, tok, prompts, 4, 3)
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b"]  # warm-ups, then rounds 0 (a b), 1 (b a), 2 (a b)
    assert {n: len(x.seconds) for n, x in logs.items()} == {"a": 3, "b": 3}
    assert logs["a"].metrics()["latency_p50_s"] > 0

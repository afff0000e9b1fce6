"""Evaluation on tiny models with the real tokenizer: shots, preference scoring, batching, lm-eval."""

import math

import pytest
import torch

from bakeoff.data import Example, Pair, read_examples
from bakeoff.evaluate import EvalPlan, evaluate_examples, generate, preference_margins
from bakeoff.metrics import exact_match, loose_match
from bakeoff.prompts import NearestShots, few_shot_messages, shot_picker
from bakeoff.models import load_model, load_tokenizer


def ex(text: str, answer: str = "x", i: int = 0) -> Example:
    return Example([{"role": "user", "content": text}], answer, id=i)


def test_nearest_shots_pick_the_most_similar_training_examples():
    train = [ex("refund my order please", "refund", 0), ex("the app crashes on login", "bug", 1),
             ex("how do I export a report", "how_to", 2), ex("app crashes when I upload a photo", "bug", 3),
             ex("charge twice on my card, refund", "billing", 4)]
    pick = NearestShots(train, 2)
    got = pick(ex("the app crashes every time I login"))
    # both crash tickets, the most similar (shares "the app crashes on login") last, nearest the question
    assert [e.id for e in got] == [3, 1]
    assert [e.id for e in pick(ex("please refund the double charge on my card"))] == [0, 4]
    assert pick(ex("zzz")) == pick(ex("zzz"))                        # deterministic, ties by train order
    assert [e.id for e in pick(ex("zzz"))] == [1, 0]
    fixed = shot_picker(train, 2, "fixed", seed=0)
    assert fixed(ex("a")) == fixed(ex("b"))                          # fixed: the same shots for every item


def test_instruction_joins_the_system_prompt():
    e = Example([{"role": "system", "content": "You triage."}, {"role": "user", "content": "q"}], "a")
    msgs = few_shot_messages(e, [ex("q1", "a1")], instruction="Answer in JSON.")
    assert msgs[0] == {"role": "system", "content": "You triage.\n\nAnswer in JSON."}
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert e.messages[0]["content"] == "You triage."                 # the example itself is not changed
    assert few_shot_messages(ex("q"), [], "Be brief.")[0] == {"role": "system", "content": "Be brief."}


def test_preference_scoring_on_a_model_with_a_known_answer(tiny_model_dir):
    """With the final norm zeroed every logit is 0: each token costs log V, so the shorter answer wins by
    exactly (extra tokens) × log V."""
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    with torch.no_grad():
        model.model.norm.weight.zero_()
    V = model.config.vocab_size
    pairs = [Pair([{"role": "user", "content": "q"}], "yes", "yes yes yes", id=0),
             Pair([{"role": "user", "content": "q"}], "no no no no", "no", id=1)]
    n = lambda s: len(tok(s, add_special_tokens=False)["input_ids"])
    margins = preference_margins(model, tok, pairs)
    assert margins[0] == pytest.approx((n("yes yes yes") - n("yes")) * math.log(V), rel=1e-4)
    assert margins[1] == pytest.approx(-(n("no no no no") - n("no")) * math.log(V), rel=1e-4)


def test_batched_generation_matches_one_at_a_time(tiny_model_dir, tickets):
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    prompts = [e.messages for e in read_examples(tickets)[:12]]
    batched, _ = generate(model, tok, prompts, 12, batch_size=6)
    single, _ = generate(model, tok, prompts, 12, batch_size=1)
    assert sum(a == b for a, b in zip(batched, single)) >= 11     # ≥ 90% here; the benchmark checks ≥ 99%


def test_evaluate_examples_records_every_figure(tiny_model_dir, tickets):
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    rows = read_examples(tickets)
    test, val = rows[:6], rows[6:10]
    pairs = [Pair(e.messages, e.completion, "nope", id=i) for i, e in enumerate(val)]
    metrics, out = evaluate_examples(model, tok, test, val, EvalPlan("exact_match", 8, 4, None, 3), pairs=pairs)
    from bakeoff.evaluate import completion_loss
    from bakeoff.metrics import json_valid
    from bakeoff.prompts import encode, render_prompt

    # each figure has the value it must: recomputed here from the rows and the model, not read back
    preds = [r["prediction"] for r in out]
    assert metrics["n_test"] == 6 and metrics["quality"] == metrics["exact_match"]
    assert metrics["exact_match"] == pytest.approx(sum(exact_match(p, e.completion) for p, e in zip(preds, test)) / 6,
                                                   abs=1e-4)
    assert metrics["json_valid"] == pytest.approx(sum(json_valid(p, "") for p in preds) / 6, abs=1e-4)
    lengths = [len(encode(tok, render_prompt(tok, e.messages))) for e in test]
    assert metrics["prompt_tokens_per_request"] == pytest.approx(sum(lengths) / 6, abs=0.05)
    loss = completion_loss(model, tok, [e.messages for e in val], [e.completion for e in val])
    assert metrics["val_loss"] == pytest.approx(loss, abs=1e-4) and metrics["val_ppl"] == pytest.approx(math.exp(loss), rel=1e-3)
    margins = preference_margins(model, tok, pairs)
    assert metrics["pref_accuracy"] == pytest.approx(sum(m > 0 for m in margins) / 4) and metrics["n_pref"] == 4
    assert metrics["gen_tokens_per_s"] > 0 and metrics["eval_peak_rss_mb"] > 100
    assert metrics["latency_p95_s"] >= metrics["latency_p50_s"] > 0
    assert [r["id"] for r in out] == [e.id for e in test] and all("prediction" in r for r in out)


def test_lm_eval_scores_the_same_outputs(tiny_model_dir, tickets, tmp_path):
    from bakeoff import lmeval

    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    test = read_examples(tickets)[:10]
    for i, e in enumerate(test):
        e.id = i
    test[0].completion = generate(model, tok, [test[0].messages], 8)[0][0]   # one the model gets right
    ours, _ = generate(model, tok, [e.messages for e in test], 8, batch_size=5)
    task = lmeval.write_task(test, tok, tmp_path / "task", max_new_tokens=8)
    assert (task / "bakeoff_test.yaml").exists() and (task / "bakeoff_test.jsonl").exists()
    out = lmeval.run_task(task, {"pretrained": str(tiny_model_dir)}, tok, batch_size=5)
    assert sum(a == b.strip() for a, b in zip(ours, out["predictions"])) >= 9   # the same greedy outputs
    agree = lmeval.agreement([loose_match(p, e.completion) for p, e in zip(ours, test)], out["per_example"])
    assert out["per_example"][0] == 1.0 and agree["lm_eval_disagree"] <= 1


def test_standard_lm_eval_task_offline_is_skipped_with_the_reason(tiny_model_dir, monkeypatch):
    from bakeoff.lmeval import run_standard

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    tok = load_tokenizer(tiny_model_dir)
    got = run_standard(["arc_easy"], load_model(tiny_model_dir).eval(), tok, 4, limit=5)
    assert got["arc_easy"]["status"] == "skipped" and got["arc_easy"]["reason"]


def test_label_choice_takes_the_most_likely_label(tiny_model_dir):
    """Uniform logits: every token costs log V, so the label of fewest tokens wins; a tie goes to the first."""
    from bakeoff.evaluate import choose_labels

    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir).eval()
    with torch.no_grad():
        model.model.norm.weight.zero_()
    prompts = [[{"role": "user", "content": "q"}]] * 2
    assert choose_labels(model, tok, prompts, ["card arrival status", "refund"]) == ["refund", "refund"]
    assert choose_labels(model, tok, prompts, ["yes", "no"]) == ["yes", "yes"]


@pytest.mark.parametrize("pred, ref, want", [
    ("Card arrival", "card_arrival", True),
    ('{"category": "Bug", "urgency": "High"}', '{"category": "bug", "urgency": "high"}', True),  # values' case
    ('{"urgency": "high", "category": "bug"}', '{"category": "bug", "urgency": "high"}', False),  # same object: right
    ("card_arrival", "card_arrival", False),      # right: not a miss at all
    ("refund", "card_arrival", False),            # wrong in substance
])
def test_format_only_misses(pred, ref, want):
    from bakeoff.metrics import format_only_miss

    assert format_only_miss(pred, ref) is want

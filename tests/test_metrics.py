"""Every metric, the bootstrap and the flips on hand-computed cases."""

import math

import pytest

from bakeoff.core.measure import LatencyLog
from bakeoff.core.scoring import (
    METRICS,
    OTHER,
    all_metrics,
    chrf,
    confusion,
    exact_match,
    json_field_scores,
    json_fields,
    json_valid,
    macro_f1,
    metric_items,
    normalize,
    preference_metrics,
    rouge_l,
    score,
)
from bakeoff.decide.figures import flips
from bakeoff.decide.statistics import bootstrap_ci


@pytest.mark.parametrize(
    "pred, ref, want, loose",
    [
        ('{"category": "bug"}', '{"category": "bug"}', 1.0, 1.0),
        ('  {"category":  "bug"} ', '{"category": "bug"}', 1.0, 1.0),  # JSON: spacing ignored, values exact
        ('  {"Category":  "BUG"} ', '{"category": "bug"}', 0.0, 1.0),  # JSON keys and values are not case-folded
        ('{"category": "bug"}.', '{"category": "bug"}', 0.0, 1.0),  # not a JSON object; loosely, punctuation aside
        ('{"category": "bugs"}', '{"category": "bug"}', 0.0, 0.0),
        ("", "bug", 0.0, 0.0),
        ("Bug.", "bug", 1.0, 1.0),  # plain text: case and punctuation ignored
        ("card arrival", "card_arrival", 0.0, 0.0),  # underscore is punctuation: "cardarrival"
    ],
)
def test_exact_match(pred, ref, want, loose):
    from bakeoff.core.scoring import loose_match

    assert exact_match(pred, ref) == want and loose_match(pred, ref) == loose


def test_normalize():
    assert normalize("  Hello,\tWORLD!  ") == "hello world"


def test_score_mean_and_per_example():
    value, per = score("exact_match", ["a", "b", "c", "d"], ["a", "x", "c", "y"])
    assert per == [1.0, 0.0, 1.0, 0.0]
    assert value == 0.5


REF = '{"category": "bug", "product": "payflow", "urgency": "high"}'


@pytest.mark.parametrize(
    "pred, valid, fields",
    [
        (REF, 1.0, 1.0),
        ('{"category": "Bug", "product": "payflow", "urgency": "low"}', 1.0, 2 / 3),  # case ignored, one wrong
        ('```json\n{"category": "bug"}\n```', 1.0, 1 / 3),  # fenced; two keys missing
        ('{"category": "bug", "product": "payflow", "urgency": "high"', 0.0, 0.0),  # cut off: not JSON
        ('["bug"]', 0.0, 0.0),  # JSON, not an object
    ],
)
def test_json_metrics(pred, valid, fields):
    assert json_valid(pred, REF) == valid
    assert json_fields(pred, REF) == pytest.approx(fields)


def test_json_field_scores_name_each_field():
    got = json_field_scores('{"category": "bug", "product": "x"}', REF)
    assert got == {"category": 1.0, "product": 0.0, "urgency": 0.0}


def test_rouge_l_and_chrf_on_hand_cases():
    # LCS of "the cat sat on" and "the cat sat" is 3 words: P = 3/3, R = 3/4, F = 2PR/(P+R) = 6/7
    assert rouge_l("the cat sat", "the cat sat on") == pytest.approx(6 / 7)
    assert rouge_l("dog", "the cat") == 0.0
    assert chrf("hello world", "hello world") == pytest.approx(1.0)
    assert chrf("", "hello") == 0.0
    assert 0 < chrf("hello wrld", "hello world") < 1


def test_accuracy_macro_f1_and_confusion_over_a_label_set():
    labels = ["pos", "neg", "neu"]
    preds = ["pos", "pos", "neg", "neu", "Pos.", "maybe"]
    refs = ["pos", "neg", "neg", "neu", "pos", "neu"]
    assert score("accuracy", preds, refs, labels)[0] == pytest.approx(4 / 6)
    # per label: pos tp2 fp1 fn0 → F1 4/5; neg tp1 fp0 fn1 → 2/3; neu tp1 fp0 fn1 → 2/3
    assert score("macro_f1", preds, refs, labels)[0] == pytest.approx((4 / 5 + 2 / 3 + 2 / 3) / 3)
    pairs = metric_items("macro_f1", preds, refs, labels)
    assert pairs[4] == ("pos", "pos") and pairs[5] == (OTHER, "neu")
    m = confusion(pairs, labels)
    assert m["neg"]["pos"] == 1 and m["neu"][OTHER] == 1 and m["pos"]["pos"] == 2
    assert macro_f1([]) == 0.0


def test_all_metrics_picks_what_applies():
    got = all_metrics([REF, "nope"], [REF, REF], labels=None)
    assert got["exact_match"] == 0.5 and got["json_valid"] == 0.5 and got["json_fields"] == 0.5
    assert got["field_acc.urgency"] == 0.5 and "macro_f1" not in got
    free = all_metrics(["a b"], ["a c"], labels=None)
    assert "json_valid" not in free and {"chrf", "rouge_l"} <= set(free)
    assert set(METRICS) >= {"exact_match", "json_fields", "accuracy", "macro_f1", "chrf", "rouge_l"}


def test_preference_metrics():
    got = preference_metrics([2.0, -1.0, 0.0, 3.0])
    assert got == {"pref_accuracy": 0.5, "pref_margin": 1.0, "n_pref": 4}  # a tie counts as wrong
    assert preference_metrics([]) == {}


def test_latency_percentiles():
    log = LatencyLog(seconds=[1.0, 2.0, 3.0, 4.0], generated_tokens=20)
    m = log.metrics("_unmerged")
    # linear interpolation: p25 = 1.75, p50 = 2.5, p75 = 3.25, p95 = 3 + 0.85 × 1 = 3.85
    assert m == {
        "latency_p25_s_unmerged": 1.75,
        "latency_p50_s_unmerged": 2.5,
        "latency_p75_s_unmerged": 3.25,
        "latency_p95_s_unmerged": 3.85,
        "latency_tokens_per_s_unmerged": 2.0,
    }


def test_bootstrap_known_answers():
    assert bootstrap_ci([1.0] * 30) == (1.0, 1.0, 1.0)
    same = [1.0, 0.0] * 20
    assert bootstrap_ci(same, baseline=same) == (0.0, 0.0, 0.0)  # paired: identical runs differ by exactly 0
    # a mean of 400 coin flips: the 95% interval is 0.5 ± 1.96·sqrt(0.25/400) = ±0.049
    value, lo, hi = bootstrap_ci([1.0, 0.0] * 200, resamples=4000)
    assert (
        value == 0.5 and hi - value == pytest.approx(0.049, abs=0.006) and value - lo == pytest.approx(0.049, abs=0.006)
    )
    # paired difference of two correlated runs: b gets 200 of 400 right, a the same 200 and 20 more → +0.05.
    # Paired, only the 20 discordant items vary: se = sqrt(0.05 · 0.95 / 400) = 0.0109, half-width 0.021.
    # Unpaired (independent resamples) it would be sqrt((0.55 · 0.45 + 0.25) / 400) = 0.0353, half-width 0.069.
    b = [1.0] * 200 + [0.0] * 200
    a = [1.0] * 220 + [0.0] * 180
    d, dlo, dhi = bootstrap_ci(a, baseline=b, resamples=4000)
    se = math.sqrt(0.05 * 0.95 / 400)
    assert d == pytest.approx(0.05) and (dhi - dlo) / 2 == pytest.approx(1.96 * se, abs=0.005)
    assert (dhi - dlo) / 2 < 0.04  # an unpaired bootstrap gives ≈ 0.069
    assert bootstrap_ci([0.0, 1.0, 1.0], seed=3) == bootstrap_ci([0.0, 1.0, 1.0], seed=3)  # seeded
    with pytest.raises(ValueError, match="same examples"):
        bootstrap_ci([1.0], baseline=[1.0, 0.0])


def test_bootstrap_of_a_non_mean_figure():
    pairs = [("a", "a"), ("b", "b"), ("a", "b"), ("b", "a")] * 10
    value, lo, hi = bootstrap_ci(pairs, METRICS["macro_f1"].figure, resamples=500)
    assert value == pytest.approx(0.5) and lo < 0.5 < hi


def test_flips_name_direction():
    base = {1: 1.0, 2: 0.0, 3: 1.0, 4: 0.5}
    mine = {1: 0.0, 2: 1.0, 3: 1.0, 4: 0.75}
    got = {f["id"]: f["direction"] for f in flips(mine, base)}
    assert got == {1: "right_to_wrong", 2: "wrong_to_right", 4: "better"}
    assert flips({1: ("a", "a")}, {1: ("b", "a")})[0]["direction"] == "wrong_to_right"


@pytest.mark.parametrize(
    "pred, ref, want",
    [
        ("The capital of Peru is Lima.", "Lima", 1.0),
        ("Limassol", "Lima", 0.0),  # whole words, not a substring
        ("lima", "Lima", 1.0),
        (
            "category: bug; product: payflow; urgency: high",
            '{"category": "bug", "product": "payflow", "urgency": "high"}',
            1.0,
        ),
        ("category: bug; urgency: high", '{"category": "bug", "product": "payflow", "urgency": "high"}', 0.0),
        ("", "Lima", 0.0),
    ],
)
def test_contains_reference(pred, ref, want):
    from bakeoff.core.scoring import contains_reference

    assert contains_reference(pred, ref) == want


def test_the_label_choice_rule_takes_the_choice_only_where_it_scored_better_on_the_split_asked():
    from bakeoff.core.scoring import by_label_choice

    assert by_label_choice({"quality": 0.4, "quality_label_choice": 0.6})
    assert not by_label_choice({"quality": 0.6, "quality_label_choice": 0.6})  # a tie keeps free generation
    assert not by_label_choice({"quality": 0.4})  # no label choice measured
    assert not by_label_choice({"quality": 0.4, "quality_label_choice": float("nan")})
    assert by_label_choice({"quality": float("nan"), "quality_label_choice": 0.1})  # a missing figure loses
    # the choosing split decides, not test
    figures = {"quality": 0.4, "quality_label_choice": 0.6, "val_quality": 0.7, "val_quality_label_choice": 0.5}
    assert by_label_choice(figures, "test") and not by_label_choice(figures, "val")

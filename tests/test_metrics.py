"""The metric on hand-computed cases."""

import pytest

from bakeoff.evaluate import exact_match, normalize, score


@pytest.mark.parametrize("pred, ref, want", [
    ('{"category": "bug"}', '{"category": "bug"}', 1.0),
    ('  {"Category":  "BUG"} ', '{"category": "bug"}', 1.0),      # case and spacing ignored
    ('{"category": "bug"}.', '{"category": "bug"}', 1.0),          # punctuation ignored
    ('{"category": "bugs"}', '{"category": "bug"}', 0.0),
    ("", "bug", 0.0),
    ("card arrival", "card_arrival", 0.0),                          # underscore is punctuation: "cardarrival"
])
def test_exact_match(pred, ref, want):
    assert exact_match(pred, ref) == want


def test_normalize():
    assert normalize("  Hello,\tWORLD!  ") == "hello world"


def test_score_mean_and_per_example():
    value, per = score("exact_match", ["a", "b", "c", "d"], ["a", "x", "c", "y"])
    assert per == [1.0, 0.0, 1.0, 0.0]
    assert value == 0.5

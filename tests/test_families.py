"""The verdict among four families (bakeoff.decide.families): prompting, RAG, fine-tuning, fine-tuning + RAG; each
family's leader picked on validation, the winner against the others on test with paired statistics, a cheaper
family taken only when shown within the margin, why it wins, and the first screen's row that says so."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from bakeoff.core.sections import BaselineConfig, TrainConfig, VariantConfig
from bakeoff.decide.families import families, from_dict, summary
from bakeoff.decide.recommend import pairwise
from bakeoff.decide.verdict_record import Verdict
from bakeoff.report.families import family_row


def params(**arms):
    baselines = {n: BaselineConfig(name=n, passages=k) for n, (kind, k) in arms.items() if kind == "baseline"}
    variants = {
        n: VariantConfig(name=n, technique="lora", train=TrainConfig(), passages=k)
        for n, (kind, k) in arms.items()
        if kind == "variant"
    }
    return SimpleNamespace(
        baselines=baselines,
        variants=variants,
        task=SimpleNamespace(metric="exact_match"),
        verdict=SimpleNamespace(max_loss=0.02),
    )


def runs(spec: dict, n: int) -> tuple[pd.DataFrame, dict]:
    """``spec``: name → (kind, status, val_quality, the test items it gets right, recall)."""
    rows, items = [], {}
    for name, (kind, status, val, right, recall) in spec.items():
        got = {i: float(i in right) for i in range(n)}
        rows.append(
            {
                "name": name,
                "kind": kind,
                "status": status,
                "error": None if status == "ok" else "no task.corpus: this baseline retrieves passages",
                "quality": sum(got.values()) / n if status == "ok" else float("nan"),
                "val_quality": val,
                "retrieval_recall": recall,
                "n_test": n,
            }
        )
        items[name] = got if status == "ok" else None
    return pd.DataFrame(rows), items


ARMS = {
    "zero_shot": ("baseline", 0),
    "rag": ("baseline", 2),
    "lora": ("variant", 0),
    "raft": ("variant", 2),
}


def test_the_winning_family_is_picked_on_validation_and_set_against_each_other_family_on_test():
    df, items = runs(
        {
            "zero_shot": ("baseline", "ok", 0.05, set(range(2)), float("nan")),
            "rag": ("baseline", "ok", 0.70, set(range(34)), 1.0),
            "lora": ("variant", "ok", 0.10, set(range(40, 44)), None),
            "raft": ("variant", "ok", 0.72, set(range(33)) | {44, 45, 46}, 1.0),
        },
        48,
    )
    pw = pairwise(df, "exact_match", items)
    f = families(df, params(**ARMS), items, pw, resamples=500)
    assert (f.winner, f.pick, f.chosen_on, f.why) == ("finetune_rag", "finetune_rag", "validation", "knowledge")
    gaps = {g.family: g for g in f.gaps}
    assert set(gaps) == {"prompt", "rag", "finetune"}
    assert gaps["prompt"].diff == pytest.approx((36 - 2) / 48) and gaps["prompt"].separated
    assert gaps["finetune"].separated and gaps["finetune"].low > 0.4
    assert not gaps["rag"].separated and gaps["rag"].low < 0 < gaps["rag"].high  # 36 against 34: not told apart
    pair = pw[(pw["a"] == "rag") & (pw["b"] == "raft")].iloc[0]  # the pairwise table's test, not another one
    assert gaps["rag"].p == pair["p"] and pair["test"] == "exact McNemar" and gaps["rag"].p_holm >= gaps["rag"].p
    assert not gaps["rag"].within  # 2 points worse on 48 items: not shown within 2 points, so no cheaper pick
    label, text = family_row(Verdict.from_dict({"families": f.to_dict()}))
    assert label == "Which family?" and text.startswith("**fine-tuning + RAG** (`raft`, 75.0% on test;")
    assert "RAG (`rag`, 70.8%): +4.2 points [" in text and ", not separated" in text
    assert "Why: knowledge" in text and "recall@k of `raft`'s passages: 100%" in text
    assert f.leader("prompt").recall is None  # NaN in the table: no passages, no recall
    s = summary(from_dict(f.to_dict()))
    assert s["winner"] == "finetune_rag" and s["leaders"]["prompt"]["winner_minus"] == pytest.approx(0.7083, abs=1e-4)


def test_a_cheaper_family_shown_within_the_margin_is_taken_and_a_fine_tune_that_wins_alone_is_behaviour():
    n = 400
    same = set(range(300))
    df, items = runs(
        {
            "zero_shot": ("baseline", "ok", 0.05, set(range(20)), None),
            "rag": ("baseline", "ok", 0.74, same, 0.9),
            "lora": ("variant", "ok", 0.10, set(range(40)), None),
            "raft": ("variant", "ok", 0.75, same, 0.9),  # the very answers of rag: shown within 2 points on 400
        },
        n,
    )
    f = families(df, params(**ARMS), items, pairwise(df, "exact_match", items), resamples=300)
    assert (f.winner, f.pick) == ("finetune_rag", "rag")
    assert (
        "A cheaper family, RAG (`rag`), is shown within 2 points of it: take that."
        in family_row(Verdict.from_dict({"families": f.to_dict()}))[1]
    )
    df, items = runs(
        {
            "zero_shot": ("baseline", "ok", 0.05, set(range(20)), None),
            "rag": ("baseline", "ok", 0.30, set(range(120)), 0.4),
            "lora": ("variant", "ok", 0.80, set(range(320)), None),
        },
        n,
    )
    f = families(
        df,
        params(**{k: v for k, v in ARMS.items() if k != "raft"}),
        items,
        pairwise(df, "exact_match", items),
        resamples=300,
    )
    assert (f.winner, f.why) == ("finetune", "behaviour")


def test_without_a_corpus_the_rag_arm_is_not_measured_and_said_so_and_without_retrieval_there_is_no_row():
    df, items = runs(
        {
            "zero_shot": ("baseline", "ok", 0.05, set(range(2)), None),
            "rag": ("baseline", "skipped", None, set(), None),
            "lora": ("variant", "ok", 0.60, set(range(30)), None),
        },
        48,
    )
    arms = {k: v for k, v in ARMS.items() if k != "raft"}
    f = families(df, params(**arms), items, pairwise(df, "exact_match", items), resamples=300)
    assert f.winner == "finetune" and f.why == "" and set(f.not_run) == {"rag"}
    text = family_row(Verdict.from_dict({"families": f.to_dict()}))[1]
    assert "retrieval was not measured" in text and "Not measured: RAG (`rag` skipped: no task.corpus" in text
    plain = {k: v for k, v in arms.items() if k != "rag"}
    alone = df[df["name"] != "rag"]
    assert families(alone, params(**plain), items, pairwise(alone, "exact_match", items), resamples=300) is None
    assert family_row(Verdict()) is None

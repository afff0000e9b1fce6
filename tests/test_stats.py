"""Which differences between runs are real: exact tests, Holm's adjustment, rank groups, the recommendation.
Hand-computed numbers; no models."""

import pandas as pd
import pytest

from bakeoff.core.scoring import METRICS
from bakeoff.decide import recommend
from bakeoff.decide.sizing_record import AllIn
from bakeoff.decide.statistics import holm, mcnemar_exact, paired_permutation_p
from bakeoff.decide.verdict_record import Recommendation, Verdict
from bakeoff.report.verdict import worded_recommendation as worded


def test_exact_mcnemar_from_discordant_counts():
    # b=5, c=10: 2 · P(X ≤ 5), X ~ Bin(15, 1/2) = 2 · 4944 / 32768
    assert mcnemar_exact(5, 10) == pytest.approx(0.3018, abs=1e-4)
    assert mcnemar_exact(10, 5) == mcnemar_exact(5, 10)
    assert mcnemar_exact(0, 6) == pytest.approx(0.03125)  # 2 / 2^6
    assert mcnemar_exact(0, 0) == 1.0


def test_holm_adjusts_step_down_and_keeps_the_order():
    # sorted 0.005, 0.01, 0.03, 0.04 → ×4, ×3, ×2, ×1 = 0.02, 0.03, 0.06, 0.04
    # → monotone: 0.02, 0.03, 0.06, 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([]) == []


def test_paired_permutation_test_sees_a_shift_and_not_noise():
    a = [0.9] * 30 + [0.5] * 30
    assert paired_permutation_p(a, [x - 0.3 for x in a], METRICS["json_fields"].figure, 2000) < 0.001
    assert paired_permutation_p(a, list(a), METRICS["json_fields"].figure, 2000) == 1.0


def _runs(results: dict[str, list[int]], kinds: dict[str, str] | None = None, **cols) -> tuple[pd.DataFrame, dict]:
    """A frame of finished runs and their per-example 0/1 items; val_quality ranks as test quality does."""
    kinds = kinds or {}
    rows = [
        {
            "name": n,
            "kind": kinds.get(n, "variant"),
            "status": "ok",
            "quality": sum(r) / len(r),
            "val_quality": sum(r) / len(r),
            **{k: v[n] for k, v in cols.items() if n in v},
        }
        for n, r in results.items()
    ]
    return pd.DataFrame(rows), {n: dict(enumerate(r)) for n, r in results.items()}


def test_pairwise_counts_discordant_items_and_adjusts_over_all_pairs():
    # a and b disagree on 15 items: a alone right on 10, b alone right on 5 → McNemar p 0.3018
    a = [1] * 40 + [1] * 10 + [0] * 5 + [0] * 5
    b = [1] * 40 + [0] * 10 + [1] * 5 + [0] * 5
    c = [0] * 60
    df, items = _runs({"a": a, "b": b, "c": c})
    pw = recommend.pairwise(df, "exact_match", items)
    ab = pw[(pw["a"] == "a") & (pw["b"] == "b")].iloc[0]
    assert (ab["a_better_on"], ab["b_better_on"], ab["test"]) == (10, 5, "exact McNemar")
    assert ab["p"] == pytest.approx(0.3018, abs=1e-4)
    assert ab["diff"] == pytest.approx(5 / 60)
    assert list(pw["p_holm"]) == pytest.approx(holm(list(pw["p"])))
    assert len(pw) == 3


def test_rank_groups_put_indistinguishable_runs_with_the_leader():
    n = 60
    full = [1] * 57 + [0] * 3
    qlora = [1] * 55 + [0] * 5  # 2 items apart from full: not distinguishable
    lora = [1] * 40 + [0] * 20  # 17 items below full, none above: p ≈ 1.5e-5
    unsloth = [1] * 39 + [0] * 21  # 1 item from lora
    prompt = [0] * n
    df, items = _runs(
        {"lora": lora, "full": full, "prompt": prompt, "qlora": qlora, "unsloth": unsloth}, {"prompt": "baseline"}
    )
    df.loc[df["name"] == "prompt", "quality_label_choice"] = float("nan")
    pw = recommend.pairwise(df, "exact_match", items)
    groups = recommend.rank_groups(df, pw)
    assert groups == [["full", "qlora"], ["lora", "unsloth"], ["prompt"]]
    assert recommend.group_line(groups) == "A: full, qlora · B: lora, unsloth · C: prompt"


def test_recommendation_is_the_best_unless_a_cheaper_run_is_shown_within_max_loss():
    df, items = _runs(
        {"full": [1] * 57 + [0] * 3, "qlora": [1] * 55 + [0] * 5, "few_shot": [0] * 60},
        {"few_shot": "baseline"},
        technique={"full": "full", "qlora": "qlora", "few_shot": ""},
        latency_p50_s={"full": 0.9, "qlora": 1.3},
        prompt_tokens_per_request={"few_shot": 400},
    )
    fits = {
        "full": {
            "usd": 40.0,
            "usd_high": 80.0,
            "card": "H100-80GB",
            "smallest_card": "H100-80GB",
            "smallest_gpus": 2,
            "need_gb": 130.0,
            "target": "llama-3.1-8b",
        },
        "qlora": {
            "usd": 4.0,
            "usd_high": 8.0,
            "card": "L4",
            "smallest_card": "L4",
            "smallest_gpus": 1,
            "need_gb": 5.4,
            "target": "llama-3.1-8b",
        },
    }
    fits = {n: AllIn.from_dict(c) for n, c in fits.items()}
    v = {"decision": "fine-tune", "variant": "full", "baseline": "few_shot"}
    rec = recommend.recommend(df, Verdict.from_dict(v), fits, items=items)
    # qlora is 2 items behind on 60 and $36 cheaper: not shown within 2 points, so the best stays the answer
    assert rec["action"] == "fine-tune" and rec["run"] == "full"
    assert [(s["run"], s["shown"]) for s in rec["choice"]["considered"]] == [("few_shot", False), ("qlora", False)]
    said = worded(Recommendation.from_dict(rec), df, Verdict.from_dict(v), fits)  # the report's words for it
    projected = " ".join(said.projected)
    assert "~130 GB" in projected and "$40–80 all in" in projected
    assert "Least memory projected among the finished variants: `qlora` (~5.4 GB" in projected
    # latency measured without its spread: no run is called fastest
    assert "Fastest" not in " ".join(said.measured)
    rec = recommend.recommend(
        df, Verdict.from_dict({**v, "decision": "inconclusive", "examples_needed": 300}), fits, items=items
    )
    assert (rec["action"], rec["run"]) == ("inconclusive", "full")
    # "prompting is enough" prompts even when the variants lead the groups
    rec = recommend.recommend(
        df,
        Verdict.from_dict({"decision": "prompting is enough", "baseline": "few_shot", "reason": "small gain"}),
        fits,
        items=items,
    )
    assert (rec["action"], rec["run"]) == ("prompt", "few_shot")


def test_the_interval_over_items_and_seeds_widens_when_seeds_disagree():
    from bakeoff.decide.statistics import bootstrap_ci

    primary = [1, 0] * 30  # 50%
    agree = [list(primary), list(primary)]
    disagree = [[1] * 50 + [0] * 10, [1] * 10 + [0] * 50]  # 83% and 17%: the same 50% mean, far apart
    base = [0] * 60
    q_a, lo_a, hi_a = bootstrap_ci(primary, baseline=base, resamples=2000, seeds=agree)
    q_d, lo_d, hi_d = bootstrap_ci(primary, baseline=base, resamples=2000, seeds=disagree)
    assert q_a == pytest.approx(0.5) and q_d == pytest.approx(0.5)  # the figure is the mean over seeds
    assert (hi_d - lo_d) > 1.5 * (hi_a - lo_a)
    _, lo_1, hi_1 = bootstrap_ci(primary, baseline=base, resamples=2000)
    assert (hi_a - lo_a) == pytest.approx(hi_1 - lo_1, rel=0.15)  # agreeing seeds add next to nothing

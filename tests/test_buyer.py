"""The report a buyer acts on: equivalence only where shown, costs all in, the cheapest card beside the smallest,
estimates to two significant figures, latency ties unless the spreads separate."""

import pandas as pd
import pytest

from bakeoff.core import runs
from bakeoff.decide import costs
from bakeoff.decide import recommend as ranking
from bakeoff.decide.memory import Setup, Shape
from bakeoff.decide.rule import shortfall
from bakeoff.decide.run_record import Run
from bakeoff.decide.sizing import GPU, Headroom, Priced, fit
from bakeoff.decide.sizing_record import AllIn, SizedFit
from bakeoff.decide.statistics import latency_separated, round_sig
from bakeoff.decide.verdict_record import Recommendation, Verdict
from bakeoff.report.verdict import projected_words, recommendation_words, serving_words, sig, usd_range


def test_the_shortfall_bound_on_known_sets():
    # 100 items, 2 won and 2 lost; Agresti-Min: 2.5 and 2.5 of 102, centre 0, se sqrt(5)/102 = 0.0219;
    # z = 0.02 / 0.0219 = 0.912 → p 0.181; within 5 points: z 2.28 → p 0.0113
    a = [1.0] * 2 + [0.0] * 2 + [1.0] * 50 + [0.0] * 46
    b = [0.0] * 2 + [1.0] * 2 + [1.0] * 50 + [0.0] * 46
    s = shortfall(a, b, 0.02)
    assert s.diff == 0 and not s.shown and s.p == pytest.approx(0.181, abs=2e-3)
    assert s.low == pytest.approx(-1.6449 * 0.02192, abs=2e-4) and s.high == pytest.approx(-s.low)
    assert shortfall(a, b, 0.05).p == pytest.approx(0.0113, abs=3e-4)  # within 5 points: p < 0.05
    # the committed default run: lora lost 6 items to full and won 1 on 60: −8.3 points measured; 1.5 and 6.5 of
    # 62: centre −8.1, se sqrt(8 − 25/62)/62 = 0.0445, 90% interval [−15.4, −0.8]
    lora = [0.0] * 6 + [1.0] + [1.0] * 46 + [0.0] * 7
    full = [1.0] * 6 + [0.0] + [1.0] * 46 + [0.0] * 7
    s = shortfall(lora, full, 0.02)
    assert round(s.diff * 100, 1) == -8.3 and round(s.low * 100, 1) == -15.4 and round(s.high * 100, 1) == -0.8
    assert s.beyond and s.items_needed is None and s.p > 0.9
    # nothing disagrees on 60 items: the discordance could still be 5%, so 2 points is not shown (a t-test's se is 0)
    assert shortfall([1.0] * 30 + [0.0] * 30, [1.0] * 30 + [0.0] * 30, 0.02).p > 0.05
    # 2 lost, 1 won of 60 (−1.7 points, sd 0.22): 1.645² · 0.0497 / 0.0033² ≈ 12,000 items would show 2 points
    close = shortfall([0.0] * 2 + [1.0] + [1.0] * 57, [1.0] * 2 + [0.0] + [1.0] * 57, 0.02)
    assert not close.beyond and 10_000 < close.items_needed < 14_000
    graded = shortfall([0.5, 0.25, 0.75], [0.5, 0.25, 0.75], 0.02)  # graded scores, no difference: within exactly
    assert graded.shown is False and graded.p == 0.0  # `shown` is Holm's, set by choose(); the raw p is 0


def test_two_significant_figures():
    assert round_sig(64_994) == 65_000 and round_sig(3.684) == 3.7 and round_sig(0.0004567) == pytest.approx(0.00046)
    assert sig(140.3) == "140" and sig(2.96) == "3.0" and sig(0.364) == "0.36"
    assert usd_range(2.96, 5.93) == "$3.0–5.9" and usd_range(64_994, 64_994) == "$65,000"


def test_latency_ties_unless_the_interquartile_ranges_separate():
    fast = Run(latency_p25_s=0.50, latency_p50_s=0.55, latency_p75_s=0.60)
    close = Run(latency_p25_s=0.58, latency_p50_s=0.61, latency_p75_s=0.66)  # overlaps 0.58–0.60
    slow = Run(latency_p25_s=0.70, latency_p50_s=0.75, latency_p75_s=0.80)
    assert not latency_separated(fast, close) and latency_separated(fast, slow)
    assert not latency_separated(fast, Run(latency_p50_s=0.9))  # no spread recorded: never called faster
    rows = {"a": fast, "b": close, "c": slow}
    said = serving_words(rows, ["a", "b", "c"], "cpu")  # the sentence follows every pair, not a blanket tie
    assert "2 of 3 pairs separate, `a` below `c`, `b` below `c`" in said and "tie" not in said, said
    assert "Fastest to serve here (cpu, batch 1, each run timed in its own stage): `a`" in serving_words(
        rows, ["a", "c"], "cpu"
    )
    assert "the group's runs tie" in serving_words(rows, ["a", "b"], "cpu")


def test_the_cheapest_card_for_the_job_beside_the_smallest_on_a_made_up_catalog():
    small = GPU("small", 24, 1.0, 100)  # holds the job, slow
    big = GPU("big", 80, 3.0, 1000)  # 10x the FLOP/s at 3x the price: the job costs less there
    tiny = GPU("tiny", 4, 0.2, 50)  # does not hold it (the 1B job needs ~6.6 GB)
    shape = Shape("m", 16, 2048, 8192, 32, 8, 32000, True)
    setup = Setup(technique="lora", precision="bf16", seq_len=1024, micro_batch=1)
    f = fit(shape, setup, [tiny, small, big], Headroom(0.1, 1e9), Priced(1e9, 0.3, 0.15), variant="lora")
    assert f.gpu == "small" and f.cheapest_gpu == "big"
    assert f.cheapest_usd < f.usd and f.cheapest_usd == pytest.approx(f.usd * 3.0 / 10, rel=0.02)
    assert f.usd_high == pytest.approx(2 * f.usd, rel=0.01) and f.cheapest_usd_high == pytest.approx(
        2 * f.cheapest_usd, rel=0.01
    )


def _tuned(name: str, rec: dict) -> None:
    runs.write_json(runs.tuned_record(name), rec)


def test_the_all_in_cost_sums_training_its_search_share_and_its_parent(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trials = [
        {"number": i, "tokens_seen": 30, "wall_s": 10.0, "val_curve": [{"step": 5}, {"step": 10}]} for i in range(4)
    ]
    _tuned("lora", {"trials": trials, "adopt": {"trial": 2}})  # trial 2 is lora's own training run
    for n in ("qlora", "lora_lowmem"):
        _tuned(n, {"trials": trials, "adopt": {"trial": 2}, "shared_from": "lora"})
    _tuned("dpo", {"trials": trials[:2]})
    spent = costs.budget(["zero_shot", "lora", "qlora", "lora_lowmem", "dpo"])
    assert spent["zero_shot"].trials == 0 and spent["zero_shot"].carried_tokens == 0
    assert (spent["lora"].tokens, spent["lora"].steps, spent["lora"].seconds) == (90, 30, 30.0)
    assert spent["qlora"].share == pytest.approx(1 / 3) and spent["qlora"].carried_tokens == pytest.approx(30)
    assert not spent["qlora"].own and spent["lora"].own and spent["dpo"].carried_tokens == 60
    fits = {
        "lora": SizedFit(cheapest_gpu="big", cheapest_usd=2.0, cheapest_usd_high=4.0, need_gb=25, target="t"),
        "dpo": SizedFit(cheapest_gpu="big", cheapest_usd=3.0, cheapest_usd_high=6.0, need_gb=30, target="t"),
    }
    seen = {"lora": 60, "dpo": 30}
    lora = costs.all_in("lora", fits, spent, seen, {})
    assert lora.search_usd == pytest.approx(2.0 * 30 / 60) and lora.usd == pytest.approx(3.0)
    dpo = costs.all_in("dpo", fits, spent, seen, {"dpo": "lora"})
    # its training 3 + its search 3 × 60/30 = 6 + its parent's all in 3 = 12; at mfu_low every part doubles
    assert dpo.usd == pytest.approx(12.0) and dpo.usd_high == pytest.approx(24.0) and dpo.parent_usd == 3.0
    assert costs.all_in("qlora", {}, spent, seen, {}) is None  # fits no card: no cost to show
    # bought alone, an arm pays its whole search (lora's 90 tokens, not its third of them) and its parent's
    assert lora.alone_usd == pytest.approx(2.0 + 2.0 * 90 / 60) and lora.search_users == 3
    assert dpo.alone_usd == pytest.approx(3.0 + 3.0 * 60 / 30 + lora.alone_usd)
    fits["qlora"] = fits["lora"]
    q = costs.all_in("qlora", fits, spent, {**seen, "qlora": 60}, {})
    assert q.usd == pytest.approx(2.0 + 2.0 * 30 / 60) and q.alone_usd == pytest.approx(2.0 + 2.0 * 90 / 60)
    assert q.search_users == 3 and q.lender == "lora"

    said = projected_words("qlora", ["qlora"], {"qlora": q})[0]
    assert "$5.0–10 all in, bought alone (training, `lora`'s whole search)" in said, said
    assert "$3.0–6.0 when its search is split among the 3 arms that use it" in said, said


def test_break_even_is_requests_a_day_against_a_named_card():
    be = costs.break_even(1000, 0.0001, {"name": "L4", "usd_per_hour": 0.8})
    # prompting $0.0001 a request; the card $19.20 a day whatever the traffic → 192,000 requests a day
    assert be["break_even_requests_per_day"] == pytest.approx(192_000) and be["serve_card"] == "L4"
    assert costs.break_even(1000, 0.0, {"name": "L4", "usd_per_hour": 0.8}) == {}


def test_the_recommendation_keeps_measured_apart_from_projected_and_claims_no_equivalence_unshown():
    df = pd.DataFrame(
        [
            {"name": "p", "kind": "baseline", "status": "ok", "quality": 0.3, "technique": "prompting"},
            {
                "name": "lora",
                "kind": "variant",
                "status": "ok",
                "quality": 0.92,
                "technique": "lora",
                "gain_vs_prompting": "+62.0 pp [+50.0, +74.0]",
                "convergence": "still improving",
                "train_peak_rss_mb": 3900.0,
            },
            {
                "name": "qlora",
                "kind": "variant",
                "status": "ok",
                "quality": 0.88,
                "technique": "qlora",
                "convergence": "converged",
                "train_peak_rss_mb": 4900.0,
            },
        ]
    )
    items = {
        "p": dict(enumerate([1] * 18 + [0] * 42)),
        "lora": dict(enumerate([1] * 55 + [0] * 5)),
        "qlora": dict(enumerate([1] * 53 + [0] * 7)),
    }
    costs = {
        "lora": {
            "variant": "lora",
            "card": "H100-80GB",
            "usd": 2.96,
            "usd_high": 5.93,
            "search_usd": 1.0,
            "lender": "lora",
            "need_gb": 24.9,
            "target": "llama-3.1-8b",
            "smallest_card": "A100-40GB",
            "smallest_gpus": 1,
        },
        "qlora": {
            "variant": "qlora",
            "card": "H100-80GB",
            "usd": 4.4,
            "usd_high": 8.9,
            "search_usd": 1.5,
            "need_gb": 9.1,
            "target": "llama-3.1-8b",
            "smallest_card": "L4",
            "smallest_gpus": 1,
        },
    }
    v = {"decision": "fine-tune", "variant": "lora", "baseline": "p"}
    costs = {n: AllIn.from_dict(c) for n, c in costs.items()}
    rec = ranking.recommend(df, Verdict.from_dict(v), costs, 0.02, items)
    assert rec["run"] == "lora" and rec["still_improving"] == ["lora"]
    scope = {"model": "smollm2-135m-instruct", "n": 60, "machine": "cpu"}
    said = recommendation_words(
        Recommendation.from_dict(rec),
        df,
        Verdict.from_dict({**v, "scope": scope}),
        costs,
    )
    measured, projected = " ".join(said.measured), " ".join(said.projected)
    assert "On `smollm2-135m-instruct`, test split (60 items)" in measured
    assert "as good as" not in measured + said.line and "equivalent" not in measured + said.line
    assert "Projected to `llama-3.1-8b`, not measured" in projected and "$3.0–5.9 all in" in projected
    assert "GB" not in measured.split("Least training memory")[0]  # no projected memory among the measured
    assert "A100-40GB" in projected and "H100-80GB" in projected  # smallest and cheapest both named

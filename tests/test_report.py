"""The verdict, the cost side, the Pareto front and the one-page report, from fixed per-example results."""

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from bakeoff import report
from bakeoff.decide import figures, verdict
from bakeoff.decide.decision import eval_records, search_records
from bakeoff.decide.sizing_record import AllIn, Money, Sizing, Spend
from bakeoff.decide.verdict_record import Finding, Verdict
from bakeoff.report import searches, sections
from bakeoff.report import sizing as report_sizing
from bakeoff.report.forgetting import forgetting
from bakeoff.report.verdict import format_line, reason, worded, worded_finding

ROOT = Path(__file__).resolve().parents[1]


def _words(finding: dict) -> dict:
    """A finding as the report words it, as the JSON it writes."""
    return worded_finding(Finding.from_dict(finding)).to_dict()


def _all_in(costs: dict) -> dict[str, AllIn]:
    return {n: AllIn.from_dict(c) for n, c in costs.items()}


def _line(words: dict) -> str:
    return format_line(Finding.from_dict(words))


def _write(tmp_path, name: str, scores: list[float], prompt_tokens: float, kind: str):
    d = tmp_path / "runs" / name
    d.mkdir(parents=True)
    rows = [{"id": i, "prediction": "p", "reference": "r", "score": s, "exact_match": s} for i, s in enumerate(scores)]
    (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    quality = sum(scores) / len(scores)
    (d / "eval.json").write_text(
        json.dumps(
            {
                "status": "ok",
                "kind": kind,
                "technique": "t",
                "metrics": {"quality": quality, "n_test": len(scores), "prompt_tokens_per_request": prompt_tokens},
            }
        )
    )


def _decide(tmp_path, monkeypatch, baseline: list[float], variant: list[float], min_gain: float) -> dict:
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "few_shot", baseline, 400, "baseline")
    _write(tmp_path, "zero_shot", [0.0] * len(baseline), 100, "baseline")
    _write(tmp_path, "lora", variant, 100, "variant")
    df = figures.collect(["zero_shot", "few_shot"], ["lora"])
    figures.add_confidence(df, "exact_match", resamples=2000, flips_dir=tmp_path / "flips")
    return verdict.verdict(df, min_gain), df


def test_verdict_fine_tune(tmp_path, monkeypatch):
    # 200 examples: the baseline gets 40% right, the variant those and 80 more (80%): +40 points, tight interval
    base = [1.0] * 80 + [0.0] * 120
    var = [1.0] * 160 + [0.0] * 40
    v, _df = _decide(tmp_path, monkeypatch, base, var, min_gain=0.05)
    assert v["decision"] == "fine-tune" and v["baseline"] == "few_shot" and v["variant"] == "lora"
    assert v["gain"] == pytest.approx(0.4) and v["ci_low"] > 0.05
    flips = [json.loads(x) for x in (tmp_path / "flips" / "lora.jsonl").read_text().splitlines()]
    assert len(flips) == 80 and {f["direction"] for f in flips} == {"wrong_to_right"}


def test_verdict_prompting_is_enough(tmp_path, monkeypatch):
    # the variant is the baseline with 2 of 200 answers flipped each way: a gain of 0, interval well below 5 points
    base = [1.0] * 100 + [0.0] * 100
    var = [0.0, 0.0] + [1.0] * 98 + [1.0, 1.0] + [0.0] * 98
    v, _ = _decide(tmp_path, monkeypatch, base, var, min_gain=0.05)
    assert v["decision"] == "prompting is enough" and v["ci_high"] < 0.05 and v["gain"] == pytest.approx(0.0)


def test_verdict_inconclusive_says_how_many_examples_would_settle_it(tmp_path, monkeypatch):
    # 20 examples, +10 points: the interval is about ±13 points and contains min_gain 5
    base = [1.0] * 10 + [0.0] * 10
    var = [1.0] * 10 + [1.0, 1.0] + [0.0] * 8
    v, _ = _decide(tmp_path, monkeypatch, base, var, min_gain=0.05)
    # 2 discordant items of 20, both wrong → right: the seeded bootstrap interval is [0, +25] points, half-width 12.5;
    # it clears min_gain once 12.5·sqrt(20/n) < 10 − 5, i.e. n = 20 · (12.5 / 5)² = 125 examples
    assert v["decision"] == "inconclusive" and (v["ci_low"], v["ci_high"]) == pytest.approx((0.0, 0.25))
    assert v["examples_needed"] == 125 and "about 125 would settle it" in reason(Verdict.from_dict(v))


def test_verdict_without_a_finished_variant_is_inconclusive():
    df = pd.DataFrame(
        [
            {
                "name": "zero_shot",
                "kind": "baseline",
                "status": "ok",
                "quality": 0.5,
                "best_baseline": "zero_shot",
                "gain": float("nan"),
            }
        ]
    )
    v = verdict.verdict(df, 0.05)
    assert v.to_dict() == {"decision": "inconclusive", "missing": "variant", "min_gain": 0.05}
    assert worded(Verdict.from_dict(v), df).to_dict() == {
        "decision": "inconclusive",
        "reason": "no fine-tuned variant finished",
        "min_gain": 0.05,
    }


def test_cost_break_even(tmp_path, monkeypatch):
    base = [1.0] * 80 + [0.0] * 120
    var = [1.0] * 160 + [0.0] * 40
    v, df = _decide(tmp_path, monkeypatch, base, var, min_gain=0.05)
    costs = {v["variant"]: {"usd": 3.0, "usd_high": 6.0}}
    c = verdict.cost(df, v, 0.5, costs, {"name": "L4", "usd_per_hour": 0.8})
    # 400 − 100 = 300 prompt tokens saved a request; prompting pays 400 × $0.5/1k = $0.20 a request, the card $19.20
    # a day: it costs less above 96 requests a day
    assert c["prompt_tokens_saved_per_request"] == 300 and c["usd_saved_per_request"] == pytest.approx(0.15)
    assert c["break_even_requests_per_day"] == pytest.approx(96) and c["all_in"]["usd"] == 3.0
    lines = "\n".join(report.verdict_lines(worded(Verdict.from_dict(v), df), Money.from_dict(c)))
    assert "**fine-tune**" in lines and "~96 requests a day" in lines and "all-in $3.0–6.0" in lines


def test_pareto_front():
    pts = [(1, 0.5), (2, 0.7), (3, 0.6), (4, 0.9), (2, 0.4)]
    assert report.pareto(pts) == [0, 1, 3]


def test_html_is_one_self_contained_page(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1])
    png = tmp_path / "a.png"
    fig.savefig(png)
    text = (
        "# t\n\n## Verdict\n\n**fine-tune** — `x`.\n\n## Quality\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "![a plot](plots/a.png)\n\n<details>\n<summary>more</summary>\n\n- item\n\n</details>\n\n## Glossary\n"
    )
    page = report.html(text, {"a": png})
    assert '<h2 id="verdict">Verdict</h2>' in page and "<strong>fine-tune</strong>" in page and "<td>1</td>" in page
    assert 'src="data:image/png;base64,' in page and "http" not in page.replace("http-equiv", "")
    # a table of contents of the sections after the verdict, the plot where the text puts it, <details> kept
    assert '<a href="#quality">Quality</a>' in page and '<a href="#glossary">Glossary</a>' in page
    assert page.index("<td>1</td>") < page.index("data:image/png") < page.index("<details>")
    assert page.index("</h2>") < page.index('<nav class="toc">')  # the verdict comes first, on one screen


def test_sentences_that_contain_the_answer_are_diagnosed_as_format_not_knowledge():
    """A baseline answering in sentences that hold the right city scores 0 on exact match: the diagnosis says the
    base model knows the answers and names the fixes not tried; a baseline that answers in form gets none."""
    from bakeoff.core.scoring import all_metrics
    from bakeoff.core.sections import BaselineConfig

    caps = {"Peru": "Lima", "France": "Paris", "Japan": "Tokyo", "Kenya": "Nairobi", "Chile": "Santiago"}
    refs = list(caps.values())
    chatty = all_metrics([f"The capital of {c} is {k}." for c, k in caps.items()], refs, labels=None)
    terse = all_metrics(refs[:4] + ["Lyon"], refs, labels=None)
    assert chatty["exact_match"] == 0.0 and chatty["contains_reference"] == 1.0
    df = pd.DataFrame(
        [
            {"name": "zero_shot", "kind": "baseline", "status": "ok", "quality": chatty["exact_match"], **chatty},
            {"name": "few_shot", "kind": "baseline", "status": "ok", "quality": terse["exact_match"], **terse},
        ]
    )
    found = verdict.diagnose(
        df, {"zero_shot": BaselineConfig("zero_shot"), "few_shot": BaselineConfig("few_shot", shots=3)}
    )
    assert [d["baseline"] for d in found] == ["zero_shot"]
    d = _words(found[0])  # the report's words for the finding
    assert (d["contains_reference"], d["quality"]) == (1.0, 0.0)
    line = _line(d)  # the report's words for the finding
    assert "fails on format, not knowledge" in line and "100% of its answers contain the reference" in line
    assert "no instruction" in d["tried"] and any("baselines.zero_shot.instruction" in x for x in d["left"])
    # with an instruction and a label set tried, neither is offered again
    again = verdict.diagnose(
        df, {"zero_shot": BaselineConfig("zero_shot", instruction="Answer with the city only.")}, labels=refs
    )
    again = [_words(x) for x in again]
    assert not any("instruction" in x or "task.labels" in x for x in again[0]["left"])
    assert any("Answer with the city only." in x for x in again[0]["tried"])

    # another arm's search tried an instruction and 8 nearest shots: named as tried there, not offered as untried
    searched = BaselineConfig(
        "prompt_search",
        shots=3,
        search={
            "shots": [1, 8],
            "selection": ["fixed", "nearest"],
            "instruction": [None, "Answer with the city only."],
        },
    )
    third = [
        _words(x) for x in verdict.diagnose(df, {"zero_shot": BaselineConfig("zero_shot"), "prompt_search": searched})
    ]
    assert third[0]["tried_elsewhere"] == ["an instruction (prompt_search)", "8 or more nearest shots (prompt_search)"]
    assert not any("instruction" in x or "shots" in x for x in third[0]["left"])
    assert "Tried by other prompting arms: an instruction (prompt_search)" in _line(third[0])


def test_the_diagnosis_names_the_prompt_a_searched_baseline_ran_with(tmp_path, monkeypatch):
    """A searched baseline that fails on format is diagnosed with the prompt its search chose (8 nearest shots and
    an instruction), not the shots params.yaml writes (3 fixed), and its search space still counts as tried. When
    its search chose neither fix, both are named as tried in its own search, not as untried nor as another arm's."""

    from bakeoff.core import runs
    from bakeoff.core.config import load_params
    from bakeoff.core.scoring import all_metrics
    from bakeoff.core.sections import BaselineConfig
    from bakeoff.core.spaces import as_run
    from bakeoff.decide import decision  # what the compare stage hands the diagnosis

    params = load_params(ROOT / "params.yaml")
    search = {"shots": [3, 8], "selection": ["fixed", "nearest"], "instruction": [None, "City only."]}
    params = replace(
        params,
        baselines={
            "zero_shot": BaselineConfig("zero_shot"),
            "prompt_search": BaselineConfig("prompt_search", shots=3, search=search),
        },
    )
    monkeypatch.chdir(tmp_path)
    runs.write_json(
        runs.tuned_record("prompt_search"),
        {"values": {"shots": 8, "selection": "nearest", "instruction": "City only."}},
    )
    ran = decision.baselines_as_run(params)
    assert (ran["prompt_search"].shots, ran["prompt_search"].selection) == (8, "nearest")
    assert ran["prompt_search"].search == search and ran["zero_shot"] == params.baselines["zero_shot"]
    assert as_run(params, "prompt_search")[1] == {"shots": 8, "selection": "nearest", "instruction": "City only."}
    chatty = all_metrics(["The capital of Peru is Lima.", "It is Paris."], ["Lima", "Paris"], labels=None)
    df = pd.DataFrame([{"name": "prompt_search", "kind": "baseline", "status": "ok", "quality": 0.0, **chatty}])
    d = _words(verdict.diagnose(df, ran)[0])
    assert d["tried"] == ["8 shots (nearest)", "instruction 'City only.'"]
    assert "Tried: 8 shots (nearest)" in _line(d)
    assert not any("instruction" in x or "shots" in x for x in d["left"])

    # the search chose 3 fixed shots and no instruction: what it tried and left is its own, not another arm's
    runs.write_json(
        runs.tuned_record("prompt_search"), {"values": {"shots": 3, "selection": "fixed", "instruction": None}}
    )
    d = _words(verdict.diagnose(df, decision.baselines_as_run(params))[0])
    assert d["tried"] == [
        "3 shots (fixed)",
        "no instruction",
        "an instruction (in its search, not chosen)",
        "8 or more nearest shots (in its search, not chosen)",
    ]
    assert d["tried_elsewhere"] == [] and not any("instruction" in x or "shots" in x for x in d["left"])


def test_winners_are_chosen_on_validation_and_never_read_test(tmp_path, monkeypatch):
    """On test, `few_shot` beats `nearest_shot` and `full` beats `lora`; on validation the order is the other way
    round: the verdict's winners follow validation. Shuffling which test answers are right (every item moved,
    test quality kept) leaves both winners as they were."""
    import random
    import shutil

    monkeypatch.chdir(tmp_path)

    def write(name, kind, test_scores, val_quality):
        _write(tmp_path, name, test_scores, 100, kind)
        rec = json.loads((tmp_path / "runs" / name / "eval.json").read_text())
        rec["metrics"]["val_quality"] = val_quality
        (tmp_path / "runs" / name / "eval.json").write_text(json.dumps(rec))

    def decide():
        df = figures.collect(["few_shot", "nearest_shot"], ["full", "lora"])
        figures.add_confidence(df, "exact_match", resamples=200)
        return verdict.verdict(df, 0.05)

    n = 40
    runs_ = {
        "few_shot": ("baseline", [1.0] * 24 + [0.0] * 16, 0.30),
        "nearest_shot": ("baseline", [1.0] * 16 + [0.0] * 24, 0.50),
        "full": ("variant", [1.0] * 36 + [0.0] * 4, 0.55),
        "lora": ("variant", [1.0] * 28 + [0.0] * 12, 0.80),
    }
    for name, (kind, scores, val) in runs_.items():
        write(name, kind, scores, val)
    v = decide()
    assert (v["baseline"], v["variant"], v["chosen_on"]) == ("nearest_shot", "lora", "validation")
    rng = random.Random(0)
    for name, (kind, scores, val) in runs_.items():
        shutil.rmtree(tmp_path / "runs" / name)
        write(name, kind, rng.sample(scores, n), val)
    v2 = decide()
    assert (v2["baseline"], v2["variant"]) == ("nearest_shot", "lora")
    # without validation scores (older records) the test split chooses, and the verdict says so
    for name, (kind, scores, _) in runs_.items():
        rec = json.loads((tmp_path / "runs" / name / "eval.json").read_text())
        del rec["metrics"]["val_quality"]
        (tmp_path / "runs" / name / "eval.json").write_text(json.dumps(rec))
    v3 = decide()
    assert (v3["baseline"], v3["variant"], v3["chosen_on"]) == ("few_shot", "full", "test")


def test_forgetting_table_and_tradeoff_plot_read_the_probe_against_the_base(tmp_path, monkeypatch):
    """The base's probe score comes from the baseline; each variant's Δ probe is against it, in points, beside its
    KL to the base and its task gain; the trade-off plot places every variant with both figures."""
    from bakeoff.report.plots import plots

    monkeypatch.chdir(tmp_path)
    df = pd.DataFrame(
        [
            {
                "name": "zero_shot",
                "kind": "baseline",
                "status": "ok",
                "quality": 0.2,
                "probe_acc": 0.64,
                "general_kl": 0.0,
            },
            {"name": "few_shot", "kind": "baseline", "status": "ok", "quality": 0.3},
            {
                "name": "full",
                "kind": "variant",
                "status": "ok",
                "quality": 0.9,
                "gain": 0.6,
                "probe_acc": 0.51,
                "general_kl": 0.4213,
                "gain_vs_prompting": "+60.0 pp [+50.0, +70.0]",
            },
            {
                "name": "lora",
                "kind": "variant",
                "status": "ok",
                "quality": 0.7,
                "gain": 0.4,
                "probe_acc": 0.645,
                "general_kl": 0.0312,
                "gain_vs_prompting": "+40.0 pp [+30.0, +50.0]",
            },
        ]
    )
    lines = "\n".join(forgetting(list(df["name"]), df))
    assert "the base model (64.0%)" in lines
    assert "| full | 90.0% | +60.0 pp [+50.0, +70.0] | 51.0% | -13.0 pp | 0.4213 |" in lines
    assert "| lora | 70.0% | +40.0 pp [+30.0, +50.0] | 64.5% | +0.5 pp | 0.0312 |" in lines
    assert "few_shot" not in lines  # scored once, on the untouched model
    paths = plots(df, tmp_path / "plots", "exact_match")
    assert paths["tradeoff"].exists() and paths["tradeoff"].stat().st_size > 1000
    assert "tradeoff" not in plots(df.drop(columns=["probe_acc"]), tmp_path / "p2", "exact_match")


def test_each_interval_sits_beside_the_figure_it_belongs_to(tmp_path, monkeypatch):
    """A baseline whose label choice scores better than its free generation (40 items: free 0%, choice 50%): the
    quality column's interval is free generation's (0%–0%), label choice's interval sits in its own column, and the
    report's header pairs each with its figure."""
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "zero_shot", [0.0] * 40, 100, "baseline")
    rec = tmp_path / "runs" / "zero_shot" / "eval.json"
    r = json.loads(rec.read_text())
    r["metrics"]["quality_label_choice"] = 0.5
    rec.write_text(json.dumps(r))
    pred = tmp_path / "runs" / "zero_shot" / "predictions.jsonl"
    rows = [json.loads(x) for x in pred.read_text().splitlines()]
    pred.write_text("".join(json.dumps({**x, "choice_score": float(x["id"] % 2)}) + "\n" for x in rows))
    _write(tmp_path, "lora", [1.0] * 30 + [0.0] * 10, 100, "variant")
    df = figures.collect(["zero_shot"], ["lora"])
    figures.add_confidence(df, "exact_match", resamples=500)
    row = df.set_index("name").loc["zero_shot"]
    assert row["quality"] == 0.0 and row["quality_ci"] == "0.0%–0.0%"
    lo, hi = (float(x.rstrip("%")) / 100 for x in row["quality_label_choice_ci"].split("–"))
    assert lo < 0.5 < hi and lo > 0.2
    # the gain is still over the better of the two (label choice): 75% − 50%
    assert df.set_index("name").loc["lora", "gain"] == pytest.approx(0.25)
    from bakeoff.report import columns, tables

    def header(cols):
        return [c.strip() for c in tables._table(df, cols)[0].strip("|").split("|")]

    more = header(columns.QUALITY_MORE)
    assert more.index("label choice 95% CI") == more.index("label choice") + 1
    assert header(columns.QUALITY).index("95% CI") == header(columns.QUALITY).index("quality") + 1
    # the figure the gain is taken against stands in the main table and in the verdict, with its path
    assert row["verdict_figure"] == "50.0% by label choice"
    main = "\n".join(tables._table(df, columns.QUALITY))
    assert "| zero_shot | ok | 0.0% | 0.0%–0.0% | 50.0% by label choice |" in main, main
    v = verdict.verdict(df, 0.05)
    assert (
        "over `zero_shot` (50.0% by label choice)" in reason(Verdict.from_dict(v))
        and v["baseline_figure"] == "50.0% by label choice"
    )


def test_the_report_says_when_the_search_did_not_beat_the_plain_recipe_and_what_it_widened(tmp_path, monkeypatch):
    from bakeoff.core import runs

    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "lora", [1.0] * 10, 100, "variant")
    _write(tmp_path, "full", [1.0] * 10, 100, "variant")
    runs.write_json(
        runs.tuned_record("lora"),
        {
            "values": {"lr": 1e-3},
            "best_value": 0.2,
            "best_trial": 0,
            "objective": "val_loss",
            "trial_steps": 300,
            "trials": [
                {"number": 0, "tokens_seen": 700, "wall_s": 70.0},
                {"number": 1, "tokens_seen": 300, "wall_s": 30.0},
            ],
            "tune_tokens": 1000,
            "tune_wall_s": 100.0,
            "recipe": {"values": {"lr": 1e-3}, "state": "complete", "value": 0.2},
            "beat_recipe": False,
            "widened": [{"param": "lr", "side": "high", "from": 3e-3, "to": 0.0164}],
        },
    )
    runs.write_json(
        runs.train_record("lora"), {"status": "ok", "metrics": {"adopted_from_trial": 0, "tokens_seen": 700}}
    )
    runs.write_json(
        runs.tuned_record("full"),
        {
            "values": {"lr": 2e-4},
            "best_value": 0.1,
            "best_trial": 2,
            "objective": "val_loss",
            "trial_steps": 300,
            "trials": [{"number": 0}],
            "recipe": {"values": {"lr": 1e-4}, "state": "complete", "value": 0.3},
            "beat_recipe": True,
            "widened": [],
        },
    )
    df = figures.collect([], ["lora", "full"])
    text = "\n".join(searches.search_lines(df, search_records(["lora", "full"])))
    assert (
        "`lora`: the plain recipe (lr=0.001) scored 0.2 val_loss on validation at 300 steps; no trial scored "
        "better there, so the recipe trains; its training run is the search's trial 0, the same run, adopted "
        "rather than trained again (its speed and memory were measured in the tune stage's process); a choice at "
        "the high edge widened lr's range from 0.003 to 0.0164." in text
    )
    # the adopted trial is the training run: the search's cost is the other trials alone
    lora = df.set_index("name").loc["lora"]
    assert (lora["tune_tokens"], lora["tune_wall_s"]) == (300, 30.0)
    assert (
        "`full`: the plain recipe (lr=0.0001) scored 0.3 val_loss on validation at 300 steps; the search "
        "chose lr=0.0002, which scored 0.1 there." in text
    )


def test_an_arm_that_takes_another_arms_search_says_why_it_trains_again(tmp_path, monkeypatch):
    from bakeoff.core import runs

    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "qlora", [1.0] * 10, 100, "variant")
    runs.write_json(runs.tuned_record("qlora"), {"values": {"lr": 2e-3}, "shared_from": "lora", "trials": []})
    text = "\n".join(searches.search_lines(figures.collect([], ["qlora"]), search_records(["qlora"])))
    assert (
        "`qlora`: trains at `lora`'s choice (`tune.share`); it cannot adopt a trial, since every trial of that "
        "search trained `lora`, not its own setup, so it trains again." in text
    )


def test_a_derived_run_equal_to_its_parent_is_said_not_to_have_moved(tmp_path, monkeypatch):
    """DPO whose search kept a rate too small to train: the same answer on every test item as its parent and a
    preference loss of 0.686 against ln 2 = 0.693. It "did not move from `lora`", not "converged"; a DPO whose
    answers differ, or whose loss left ln 2, keeps its own convergence."""
    from bakeoff.core import runs

    monkeypatch.chdir(tmp_path)
    for name in ("lora", "dpo", "dpo_moved", "dpo_loss"):
        _write(tmp_path, name, [1.0] * 30 + [0.0] * 10, 100, "variant")
    moved = tmp_path / "runs" / "dpo_moved" / "predictions.jsonl"
    rows = [json.loads(x) for x in moved.read_text().splitlines()]
    moved.write_text("".join(json.dumps({**r, "prediction": "q" if r["id"] == 3 else "p"}) + "\n" for r in rows))
    for name, loss in (("dpo", 0.686), ("dpo_moved", 0.686), ("dpo_loss", 0.52)):
        runs.write_json(runs.train_record(name), {"status": "ok", "val_curve": [{"step": 10, "loss": loss}]})
    df = figures.collect([], ["lora", "dpo", "dpo_moved", "dpo_loss"])
    df["convergence"] = "converged"
    got = verdict.did_not_move(df, {"dpo": "lora", "dpo_moved": "lora", "dpo_loss": "lora"})
    assert list(got) == ["dpo"] and got["dpo"]["identical"] == 40
    assert df.set_index("name")["convergence"]["dpo"] == "unmoved"
    conv = report.columns.worded_runs(df, Verdict.from_dict({"unmoved": got}).unmoved).set_index("name")[
        "convergence"
    ]  # as the report shows it
    assert conv["dpo"] == "did not move from `lora`" and conv["dpo_moved"] == conv["dpo_loss"] == "converged"


def test_a_tie_for_the_verdicts_leader_is_said_with_the_rule_that_broke_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "few_shot", [1.0] * 20 + [0.0] * 180, 400, "baseline")
    for name in ("full", "lora"):
        _write(tmp_path, name, [1.0] * 160 + [0.0] * 40, 100, "variant")
    for name, val in (("few_shot", 0.1), ("full", 0.9), ("lora", 0.9)):
        rec = tmp_path / "runs" / name / "eval.json"
        r = json.loads(rec.read_text())
        r["metrics"]["val_quality"] = val
        rec.write_text(json.dumps(r))
    df = figures.collect(["few_shot"], ["full", "lora"])
    figures.add_confidence(df, "exact_match", resamples=500)
    v = verdict.verdict(df, 0.05)
    assert v.variant == "full" and v.tie.to_dict() == {
        "runs": ["full", "lora"],
        "at": 0.9,
        "split": "validation",
        "rule": "params_order",
    }
    assert reason(Verdict.from_dict(v)).startswith(
        "`full` (it ties `lora` at 90.0% on validation; the first listed in params.yaml "
        "leads) beats `few_shot` (10.0% generated)"
    ), reason(Verdict.from_dict(v))


def test_the_latency_sentence_follows_every_pair_and_the_throughput_sentence_its_figures():
    from bakeoff.decide.run_record import Run
    from bakeoff.decide.shipped_record import ServingRow
    from bakeoff.report.shipped import throughput_words
    from bakeoff.report.verdict import serving_words

    def lat(p25, p50, p75):
        return Run(latency_p25_s=p25, latency_p50_s=p50, latency_p75_s=p75)

    tie = {"a": lat(1.0, 1.1, 1.2), "b": lat(1.1, 1.2, 1.3)}
    assert "tie" in serving_words(tie, ["a", "b"], "here") and "every pair" in serving_words(tie, ["a", "b"], "here")
    some = {"a": lat(1.0, 1.1, 1.2), "b": lat(1.1, 1.2, 1.3), "c": lat(1.25, 1.3, 1.4)}
    said = serving_words(some, ["a", "b", "c"], "here")
    assert "1 of 3 pairs separate, `a` below `c`" in said and "tie" not in said, said
    fast = {"a": lat(0.5, 0.6, 0.7), **{k: some[k] for k in "bc"}}
    assert serving_words(fast, ["a", "b", "c"], "here").startswith("Fastest to serve here")
    rows = [
        {"concurrency": 1, "latency_p50_s": 0.38, "tokens_per_s": 46.9},
        {"concurrency": 4, "latency_p50_s": 1.4, "tokens_per_s": 34.1},
    ]
    assert "throughput falls 27%, from 46.9 to 34.1" in throughput_words([ServingRow.from_dict(r) for r in rows])
    rows[1]["tokens_per_s"] = 45.0
    assert "throughput stays within 10% (46.9 → 45.0" in throughput_words([ServingRow.from_dict(r) for r in rows])


def test_the_exports_interleaved_latencies_replace_each_stages_own(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, "lora", [1.0] * 4, 100, "variant")
    _write(tmp_path, "full", [1.0] * 4, 100, "variant")
    df = figures.collect([], ["lora", "full"])
    figures.use_interleaved(df, {"lora": {"latency_p50_s": 0.5, "latency_p25_s": 0.4, "latency_p75_s": 0.6}})
    row = df.set_index("name").loc["lora"]
    assert row["latency_p50_s"] == 0.5 and "interleaved" in row["latency_how"]
    figures.use_interleaved(df, {"status": "failed", "error": "x"})  # a failed timing changes nothing


def test_the_report_opens_with_the_answer_one_name_and_one_price():
    """Four rows before anything else: the verdict with its gain and interval, the recommended technique and why,
    the card (projected), and the price bought alone with the break-even."""
    from bakeoff.report.sections import answer_lines

    v = {
        "decision": "fine-tune",
        "gain": 0.617,
        "ci_low": 0.483,
        "ci_high": 0.734,
        "variant": "full",
        "baseline": "prompt_search",
        "scope": {"model": "m", "n": 60},
        "recommendation": {
            "action": "fine-tune",
            "run": "lora",
            "kind": "variant",
            "max_loss": 0.02,
            "saving_unit": "usd",
            "choice": {
                "best": "full",
                "pick": "lora",
                "margin": 0.02,
                "considered": [
                    {
                        "run": "lora",
                        "against": "full",
                        "diff": -0.002,
                        "low": -0.006,
                        "high": 0.002,
                        "margin": 0.02,
                        "shown": True,
                        "saving": 15.0,
                    }
                ],
            },
        },
    }
    costs = {
        "lora": {
            "smallest_card": "A100-40GB",
            "card": "H100-80GB",
            "target": "llama-3.1-8b",
            "need_gb": 24.95,
            "usd": 3.45,
            "usd_high": 6.88,
            "alone_usd": 5.0,
            "alone_usd_high": 10.0,
        }
    }
    lines = answer_lines(
        Verdict.from_dict(v), Money(break_even_requests_per_day=191044.8, serve_card="L4"), _all_in(costs)
    )
    text = "\n".join(lines)
    assert lines[:4] == ["## Answer", "", "| question | answer |", "|---|---|"] and len(lines) == 9
    assert "**fine-tune**: `full` gains +61.7 points [+48.3, +73.4]" in text and "60 test items" in text
    assert (
        "| Technique | `lora`: $15 less (projected, bought alone), -0.2 points [-0.6, +0.2] against `full`; shown "
        "within 2 points (`full` led on validation) |" in text
    ), text
    assert "A100-40GB, the [smallest](#glossary)" in text and "H100-80GB the cheapest" in text and "(~25 GB)" in text
    two = answer_lines(
        Verdict.from_dict(v),
        Money(),
        _all_in({"lora": {**costs["lora"], "smallest_gpus": 2, "smallest_card": "H200", "need_gb": 136.4}}),
    )
    said = "\n".join(two)
    assert "| Card | 2× H200, the [smallest](#glossary) that holds `lora` for `llama-3.1-8b` (~140 GB)" in said
    assert "$5.0–10 all in to buy `lora`" in text and "$3.5" not in text  # bought alone, the one price
    assert "~190,000 requests a day" in text  # two significant figures, as the serving sentence below says it
    prompting = answer_lines(
        Verdict.from_dict(
            {"decision": "prompting is enough", "recommendation": {"action": "prompt", "run": "few_shot"}}
        ),
        Money(),
        {},
    )
    assert "| Technique | prompting: `few_shot`, no fine-tuning |" in prompting


def test_the_search_table_lists_every_arm_with_or_without_a_search(tmp_path, monkeypatch):
    """An arm with no search says so, one that shares a search but did not run says it carries none, one whose search
    failed says **not run**: no arm is missing from the table."""
    monkeypatch.chdir(tmp_path)
    for name, rec in {
        "zero_shot": {"status": "off", "skipped": "baselines.zero_shot has no search", "trials": []},
        "unsloth": {"status": "ok", "shared_from": "lora", "trials": [{"number": 0}]},
        "full": {"status": "failed", "error": "RuntimeError: boom", "trials": []},
    }.items():
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "tuned.json").write_text(json.dumps(rec))
    df = pd.DataFrame(
        {
            "name": ["zero_shot", "lora", "unsloth", "full"],
            "status": ["ok", "ok", "skipped", "ok"],
            "kind": ["baseline", "variant", "variant", "variant"],
        }
    )
    spent = {
        "lora": {
            "trials": 4,
            "own": True,
            "lender": "lora",
            "tokens": 100,
            "steps": 10,
            "seconds": 5.0,
            "share": 1.0,
            "carried_tokens": 100,
            "carried_seconds": 5.0,
        }
    }
    spent = {n: Spend.from_dict(x) for n, x in spent.items()}
    table = "\n".join(searches.budget_lines(df, spent, searches=search_records(df["name"])))
    assert "| zero_shot | none (baselines.zero_shot has no search) |" in table
    assert "| lora | own | 4 | 100 |" in table
    assert "| unsloth | `lora`'s, unused (the arm did not run: skipped) |" in table
    assert "| full | **not run** (failed: RuntimeError: boom;" in table


def test_the_pairwise_matrix_shows_a_p_value_only_where_a_difference_is_real():
    pw = pd.DataFrame(
        [
            {"a": "full", "b": "prompt", "diff": 0.30, "p_holm": 0.012, "test": "McNemar", "n": 60},
            {"a": "full", "b": "lora", "diff": 0.05, "p_holm": 0.41, "test": "McNemar", "n": 60},
            {"a": "lora", "b": "prompt", "diff": 0.25, "p_holm": 0.03, "test": "McNemar", "n": 60},
        ]
    )
    lines = sections.pairwise_lines(pw)
    row = {ln.split("|")[1].strip(): ln for ln in lines if ln.startswith("| `")}
    assert "**+30.0** (p 0.012)" in row["`full`"] and "**-30.0** (p 0.012)" in row["`prompt`"]
    assert "| +5.0 |" in row["`full`"] and "| -5.0 |" in row["`lora`"]  # not significant: the figure alone
    assert "0.41" not in "\n".join(lines)  # its p is in reports/pairwise.csv


def test_a_standard_task_that_could_not_run_offline_says_not_run_not_the_librarys_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    reason = "ConnectionError: Couldn't reach 'allenai/ai2_arc' on the Hub (OfflineModeIsEnabled)"
    for name in ("zero_shot", "lora"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "eval.json").write_text(
            json.dumps(
                {
                    "status": "ok",
                    "lm_eval_tasks": {
                        "arc_easy": {"status": "skipped", "reason": reason},
                        "hellaswag": {"status": "failed", "reason": "KeyError: 'x'\nmore"},
                    },
                }
            )
        )
    names = ["zero_shot", "lora"]
    text = "\n".join(forgetting(names, evaluations=eval_records(names)))
    assert "arc_easy: not run (offline" in text and "for `zero_shot`, `lora`" in text
    assert "OfflineModeIsEnabled" not in text and "ConnectionError" not in text
    assert "hellaswag: failed (KeyError: 'x') for" in text


def test_the_sizing_table_gives_the_cheapest_card_its_own_column():
    from bakeoff.core.config import load_params

    fit = {
        "target": "llama-3.1-8b",
        "need_gb": 24.95,
        "gpus": 1,
        "gpu": "A100-40GB",
        "cheapest_gpu": "H100-80GB",
        "cheapest_usd": 1.97,
        "cheapest_usd_high": 3.93,
    }
    none = {"target": "llama-3.1-70b", "need_gb": 1200.0, "gpus": 1, "gpu": None}
    sized = {
        "calibration": {"rows": [], "measured_on": "peak resident memory (RSS) on this machine's CPU"},
        "fits": [{**fit, "variant": "lora"}, {**none, "variant": "full"}],
    }
    lines = report_sizing.sizing_lines(load_params(ROOT / "params.yaml"), Sizing.from_dict(sized))
    assert "| target | variant | needs | smallest card | cheapest card | training there |" in lines
    assert "| llama-3.1-8b | `lora` | 25 GB | A100-40GB | H100-80GB | $2.0–3.9 |" in lines
    assert "| llama-3.1-70b | `full` | 1,200 GB | none fits | – | – |" in lines

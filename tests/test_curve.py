"""The data-value curve: nested stratified subsets, the fit on synthetic curves (the exponent recovered, the
projection's interval covering the truth), the back-test, the crossover."""

import numpy as np
import pytest

from bakeoff.data.examples import Example
from bakeoff.data.subsets import nested_subset
from bakeoff.decide.crossover import crossover, verdict_at
from bakeoff.decide.curve import Points, fit_arm, fit_points, predict, resample_indices
from bakeoff.decide.curve_record import Arm, Curve, Point


def rows(n_per_label: dict) -> list[Example]:
    out = []
    for label, n in n_per_label.items():
        out += [Example([{"role": "user", "content": f"{label} {i}"}], label, id=f"{label}-{i}") for i in range(n)]
    return out


def test_subsets_are_nested_stratified_and_the_same_rows_every_time():
    train = rows({"a": 40, "b": 20, "c": 3})
    labels = ["a", "b", "c"]
    eighth, quarter, half = (nested_subset(train, s, seed=0, labels=labels) for s in (0.125, 0.25, 0.5))
    ids = [{e.id for e in x} for x in (eighth, quarter, half)]
    assert ids[0] < ids[1] < ids[2]  # nested, and growing
    assert [sum(e.completion == lab for e in half) for lab in labels] == [20, 10, 2]  # per label, round(share × n)
    assert {e.completion for e in eighth} == set(labels)  # every label kept, one row at least
    again = nested_subset(list(reversed(train)), 0.25, seed=0, labels=labels)
    assert {e.id for e in again} == ids[1]  # the same rows whatever the order in memory
    other = nested_subset(train, 0.25, seed=1, labels=labels)
    assert {e.id for e in other} != ids[1]  # the seed draws them
    assert nested_subset(train, 1.0) == train
    free = nested_subset(train, 0.5, seed=0, labels=None)  # no label set: one stratum
    assert len(free) == round(0.5 * len(train))
    with pytest.raises(ValueError, match="in \\(0, 1\\]"):
        nested_subset(train, 0)


def simulate(ns, truth, n_items, rng):
    """Comonotone items: item i is right at size n when its difficulty is under the true quality there (an item
    learned with fewer rows stays learned), so every point is scored on the same items, as in a real run."""
    u = rng.random(n_items)
    return [list((u < truth(n)).astype(float)) for n in ns]


@pytest.mark.parametrize(
    "c,a,b,ns",
    [
        (1.0, 0.15, 0.6, [50, 100, 200, 400]),  # 48% → 85%  # four points: the two-parameter form
        (0.85, 0.12, 0.5, [50, 100, 200, 400, 800]),  # 51% → 73%  # five: its own ceiling
    ],
)
def test_fit_recovers_the_exponent_within_ten_percent(c, a, b, ns):
    N = max(ns)
    truth = lambda n: c - a * (n / N) ** -b
    got = fit_points(ns, [truth(n) for n in ns])
    assert got["form"] == ("power2" if len(ns) < 5 else "power3")
    assert abs(got["params"][-1] - b) / b < 0.1
    items = simulate(ns, truth, 40000, np.random.default_rng(1))  # large test split: little noise
    fit = fit_arm(Points(ns, items), resamples=50)
    assert abs(fit["exponent"] - b) / b < 0.1


def test_projection_interval_covers_the_truth_over_200_simulated_curves():
    rng = np.random.default_rng(0)
    ns, n_items, covered, backtest_inside = [50, 100, 200, 400], 300, 0, 0
    for _ in range(200):
        a, b = rng.uniform(0.05, 0.2), rng.uniform(0.2, 0.7)  # from 14% or more at 50 rows
        truth = lambda n, a=a, b=b: 1.0 - a * (n / 400) ** -b
        fit = fit_arm(
            Points(ns, simulate(ns, truth, n_items, rng)),
            resamples=100,
            draws=resample_indices(n_items, 100, seed=int(rng.integers(1 << 30))),
        )
        lo, hi = fit["projection"][0]["ci"]
        covered += lo <= truth(800) <= hi
        backtest_inside += fit["backtest"]["inside"]
    assert covered / 200 >= 0.85, covered
    assert backtest_inside / 200 >= 0.85, backtest_inside


def test_backtest_misses_a_curve_that_bends_away():
    """Flat, then a jump at the largest size: the smaller points cannot predict it, and the back-test says so."""
    ns = [50, 100, 200, 400]
    qs = {50: 0.30, 100: 0.31, 200: 0.32, 400: 0.80}
    items = simulate(ns, lambda n: qs[n], 400, np.random.default_rng(2))
    fit = fit_arm(Points(ns, items), resamples=100)
    assert fit["backtest"]["inside"] is False
    assert fit["backtest"]["error"] < -0.3


def test_backtest_at_the_ceiling_reads_the_observed_points_binomial_interval():
    """Every test item right at the full size: the observed point has no bootstrap spread and a power curve never
    reaches 1; the back-test accepts any prediction inside the observed point's Clopper-Pearson 95% interval (150 of
    150: 97.6%-100%), and says that band; a prediction a few items short still misses."""
    ns, n_items = [77, 143, 280, 558], 150

    def at(q_by_n):  # items 0..k-1 right, the same for every resample
        return [[1.0] * round(q_by_n[n] * n_items) + [0.0] * (n_items - round(q_by_n[n] * n_items)) for n in ns]

    near = fit_arm(Points(ns, at({77: 143 / 150, 143: 148 / 150, 280: 149 / 150, 558: 1.0})), resamples=200)
    b = near["backtest"]
    assert b["observed"] == 1.0 and b["error"] < 0 and b["accepts"] == [0.9757, 1.0]
    assert b["error_ci"][1] < 0  # the bare bootstrap interval of the error alone would miss
    assert b["inside"] is True and b["flat_accepted"] is True  # 149/150 lies in the band too: flat or growth?
    from bakeoff.report.curve import arm_lines

    arm = {
        "status": "ok",
        "run": "lora",
        "chosen_as": "the recommended variant",
        "kind": "variant",
        "figure": "generation",
        **near,
    }
    said = " ".join(arm_lines(Arm.from_dict(arm), True))
    assert (
        "**inside** (it would accept 97.6%–100.0%, the observed point's 95% interval; no gain from the last "
        "size, 99.3%, lies in it too: it cannot tell flat from growth)" in said
    ), said
    far = fit_arm(Points(ns, at({77: 105 / 150, 143: 110 / 150, 280: 114 / 150, 558: 1.0})), resamples=200)
    assert far["backtest"]["inside"] is False and far["backtest"]["error"] < -0.1


def _committed_lora() -> Points:
    """The committed default run's lora curve: 85.0, 86.7, 90.0, 88.3% of 60 test items at 52-414 rows."""
    base = [1.0] * 51 + [0.0] * 9
    second = base[:51] + [1.0] + [0.0] * 8
    third = second[:52] + [1.0, 1.0] + [0.0] * 6
    fourth = third[:53] + [0.0] + [0.0] * 6
    return Points([52, 104, 207, 414], [base, second, third, fourth])


def test_the_curve_reads_only_what_its_points_hold():
    """Three forms, their spread inside every projection's interval, every gain from the measured largest point; a
    last doubling that bought nothing measurable is said as measured, and the headline projects nothing stronger."""
    fit = fit_arm(_committed_lora(), resamples=300)
    assert fit["quality"] == [0.85, 0.8667, 0.9, 0.8833]
    p = fit["projection"][0]
    assert set(p["forms"]) == {"power2", "power3", "loglinear"} and p["gain_from"] == "largest_point"
    assert p["ci"][0] <= min(x["ci"][0] for x in p["forms"].values())  # the interval spans every form's
    assert p["ci"][1] >= max(x["ci"][1] for x in p["forms"].values())
    assert p["spread"][0] < p["spread"][1]
    assert p["gain"] == pytest.approx(p["quality"] - 0.8833, abs=2e-4)  # over the measured 88.3%, not the fit
    d = fit["last_doubling"]
    assert d["rows"] == [207, 414] and d["diff"] == pytest.approx(-1 / 60, abs=1e-4) and d["cannot_tell"]
    assert fit["backtest"]["accepts"] == [0.7743, 0.9518]  # 53 of 60: what the back-test could resolve
    from bakeoff.report.curve import headline

    arm = {
        "status": "ok",
        "run": "lora",
        "chosen_as": "the recommended variant",
        "kind": "variant",
        "figure": "generation",
        **fit,
    }
    said = " ".join(headline(Curve.from_dict({"arms": {"recommended": arm}, "reliable": True}), "fine-tune"))
    assert "`lora`: the last doubling (207 → 414 rows) bought nothing measurable (-1.7 points, 95% interval" in said
    assert "the data cannot tell flat from +" in said and "projected" not in said, said


def test_a_measured_gain_gives_a_projection_with_its_forms_spread():
    ns, rng = [50, 100, 200, 400], np.random.default_rng(4)
    u = rng.random(600)
    pts = Points(ns, [list((u < 1 - 0.3 * (n / 400) ** -0.5).astype(float)) for n in ns])  # 40%, 58%, 79%, 70%→
    fit = fit_arm(pts, resamples=200)
    assert not fit["last_doubling"]["cannot_tell"] and fit["last_doubling"]["diff"] > 0.05
    from bakeoff.report.curve import headline

    arm = {
        "status": "ok",
        "run": "lora",
        "chosen_as": "the recommended variant",
        "kind": "variant",
        "figure": "generation",
        **fit,
    }
    said = " ".join(headline(Curve.from_dict({"arms": {"recommended": arm}, "reliable": True}), "fine-tune"))
    assert "projected to twice the training rows, 800, assuming they are trained on at the same epochs" in said
    assert "across 3 forms" in said and f"over its measured {fit['quality'][-1]:.1%}" in said, said


def test_crossover_and_projected_verdict():
    """Fine-tuning starts below the prompt and passes it inside the measured range; twice the data keeps it ahead."""
    ns, rng = [50, 100, 200, 400], np.random.default_rng(3)
    u = rng.random(500)
    ft = Points(ns, [list((u < 1 - 0.16 * (n / 400) ** -0.7).astype(float)) for n in ns])  # 31%, 58%, 74%, 84%
    pr = Points(ns, [list((u < 0.55 + 0.02 * np.log2(n / 50)).astype(float)) for n in ns])
    draws = resample_indices(500, 100)
    cross = crossover(ft, pr, draws)
    assert cross["where"] == "measured"
    assert 70 < cross["rows"] < 200 and cross["rows_ci"][0] <= cross["rows"] <= cross["rows_ci"][1]
    later = verdict_at(ft, pr, draws, 2, min_gain=0.05)
    assert later["decision"] == "fine-tune" and later["gain"] > 0.2
    never = crossover(pr, ft, draws)  # the prompt never passes fine-tuning above ~150 rows
    assert never["where"] == "never"
    assert np.all(predict(fit_points(ns, ft.quality()), [100, 800]) <= 1.0)


def _params_with(tmp_path, curve):
    import yaml
    from conftest import ROOT

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    if curve is ...:
        raw.pop("curve")
    else:
        raw["curve"] = curve
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return raw, path


def test_curve_params_checked_with_file_and_key_and_turned_off_by_an_empty_list(tmp_path):
    from bakeoff.core.config import dvc_needs, load_params
    from bakeoff.core.schema import ParamsError

    _, path = _params_with(tmp_path, {"arms": ["recommended", "lorra"], "fractions": [0.5]})
    with pytest.raises(ParamsError, match=r"params.yaml:\d+: curve.arms: 'lorra' is neither .* \(did you mean 'lora'"):
        load_params(path)
    _, path = _params_with(tmp_path, {"arms": ["lora"], "fractions": [0.5, 1.0]})
    with pytest.raises(ParamsError, match=r"curve.fractions: shares of the training split, each in \(0, 1\)"):
        load_params(path)
    raw, path = _params_with(tmp_path, None)
    with pytest.raises(ParamsError, match=r"curve: dvc.yaml makes the curve stages .* `curve: \{fractions: \[\]\}`"):
        load_params(path)
    assert "curve: missing or incomplete" in dvc_needs(raw, str(path))
    raw, path = _params_with(tmp_path, {"arms": ["recommended", "best_prompt"], "fractions": []})
    assert load_params(path).curve is None and dvc_needs(raw, str(path)) is None
    raw, path = _params_with(tmp_path, ...)  # no section: the library takes the defaults; dvc.yaml cannot
    assert load_params(path).curve.fractions == [0.125, 0.25, 0.5]
    assert dvc_needs(raw, str(path)).startswith(f"{path}: curve: missing")


def test_a_missed_backtest_withholds_every_projection_in_the_report():
    """Where the smaller shares fail to predict the full run, the report says the curve is unreliable on this task
    and prints no projection, in the sentence, the section or the README line; where it held, it prints them."""
    from bakeoff.report import curve as report_curve
    from bakeoff.report.readme import curve_lines

    ns = [50, 100, 200, 400]
    rng = np.random.default_rng(4)
    u = rng.random(300)
    bent = Points(ns, [list((u < q).astype(float)) for q in (0.30, 0.31, 0.32, 0.80)])
    smooth = Points(ns, [list((u < 1 - 0.15 * (n / 400) ** -0.6).astype(float)) for n in ns])
    draws = resample_indices(300, 200)

    def curve(pts):
        arm = {
            "status": "ok",
            "run": "lora",
            "chosen_as": "the recommended variant",
            "kind": "variant",
            "figure": "generation",
            **fit_arm(pts, draws=draws),
        }
        return Curve.from_dict({"arms": {"recommended": arm}, "reliable": arm["backtest"]["inside"], "crossover": None})

    missed, held = curve(bent), curve(smooth)
    assert missed.reliable is False and held.reliable is True
    said = " ".join(report_curve.headline(missed, "fine-tune") + report_curve.lines(missed, None))
    assert "unreliable on this task" in said and "no projection is given" in said
    assert "projected at" not in said and "(×2, projected)" not in said and "gain per doubling" not in said
    said = " ".join(report_curve.headline(held, "fine-tune") + report_curve.lines(held, None))
    assert "is projected at" in said and "(×2, projected)" in said and "held for every arm" in said
    assert "Still improving" not in said  # no point says so here; one that does is named, with its steps
    points = [
        {"share": 0.125, "train_steps": 10, "convergence": "still improving"},
        {"share": 0.25, "train_steps": 10, "convergence": "converged"},
        {"share": 0.5, "train_steps": 40, "convergence": "still improving"},  # as long as its own run
        {"share": 1.0, "own_run": True, "train_steps": 40},
    ]
    held.arms["recommended"] = held.arms["recommended"].with_(points=[Point.from_dict(p) for p in points])
    said = " ".join(report_curve.lines(held, None))
    assert "Still improving at its last step: 0.125 (10 steps)" in said and "0.25 (" not in said
    assert "0.5 (" not in said  # still improving after the arm's own steps: the own run's matter, not the curve's
    summary = report_curve.summary(missed)
    assert "back-test missed" in curve_lines(summary)[0] and "projected" not in curve_lines(summary)[0]
    assert "projected at twice the rows" in curve_lines(report_curve.summary(held))[0]


def test_a_recommendation_that_cannot_be_read_is_the_points_status_not_the_stages_end(tmp_path, monkeypatch):
    """A fault forced into the decision the `recommended` role reads: the point is recorded `skipped` with why."""
    import json

    from conftest import ROOT

    from bakeoff.core.config import load_params
    from bakeoff.decide import decision
    from bakeoff.search.curve_point import run_point

    params = load_params(ROOT / "params.yaml")

    def broken(*a, **kw):
        raise FileNotFoundError("runs/full/eval.json")

    monkeypatch.setattr(decision, "decide", broken)
    monkeypatch.chdir(tmp_path)
    name, why = decision.curve_arm(params, "recommended")
    assert name is None and "no_recommendation (FileNotFoundError: runs/full/eval.json)" in why
    run_point(params, "recommended", 0.25, name, why)
    rec = json.loads((tmp_path / "reports" / "curve" / "recommended-0.25" / "point.json").read_text())
    assert rec["status"] == "skipped" and "FileNotFoundError" in rec["error"]


def test_the_report_words_every_code_of_the_curve_and_keeps_an_older_records_words():
    """decide gives the curve's facts as codes; the report's page and reports/curve.json carry their words, each key
    where it was, and a point record written before the codes (its words already) reads as it was."""
    from bakeoff.report.curve import worded

    curve = {
        "arms": {
            "recommended": {
                "run": "lora",
                "chosen_as": "recommended",
                "points": [],
                "status": "skipped",
                "missing": "unfinished",
            },
            "best_prompt": {
                "run": None,
                "chosen_as": "best_prompt",
                "points": [],
                "status": "skipped",
                "missing": "no_run",
            },
            "lora": {
                "run": "lora",
                "chosen_as": "the recommended variant",
                "status": "too few points",
                "points": [{"share": 0.25, "status": "stale", "drawn_for": "full", "rows": 30}],
            },
            "full": {
                "run": "full",
                "chosen_as": "named",
                "status": "ok",
                "backtest": {"inside": False, "sizes": 2},
                "projection": [{"multiple": 2, "gain_from": "largest_point", "forms": {}}],
            },
        },
        "crossover": {"rows": 120, "where": "projected"},
    }
    w = worded(Curve.from_dict(curve)).to_dict()
    a = w["arms"]
    assert list(a["recommended"]) == ["run", "chosen_as", "points", "status", "reason"]
    assert (
        a["recommended"]["reason"] == "`lora` did not finish"
        and a["recommended"]["chosen_as"] == "the recommended variant"
    )
    assert a["best_prompt"]["reason"] == "no finished run for `best_prompt`"
    assert a["best_prompt"]["chosen_as"] == "the best prompting baseline on validation"
    assert a["lora"]["chosen_as"] == "the recommended variant"  # an older record's words, kept
    assert a["lora"]["reason"] == "no smaller share finished: nothing to fit"
    assert a["lora"]["points"] == [{"share": 0.25, "status": "stale (drawn for `full`)", "rows": 30}]
    assert a["full"]["backtest"] == {"inside": False, "reason": "2 sizes: a back-test needs 3 or more"}
    assert a["full"]["projection"][0]["gain_from"] == "the largest measured point"
    assert a["full"]["chosen_as"] == "named in curve.arms"
    assert w["crossover"]["where"] == "beyond the measured range (a projection)"
    assert curve["arms"]["full"]["backtest"] == {"inside": False, "sizes": 2}  # the decision itself is untouched

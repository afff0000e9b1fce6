"""The evidence behind the gain and the plots a buyer decides on: a planted per-field gap is named, a label task's
commonest confusions are counted, answers with Markdown and HTML in them render as text, a long one is cut, and each
new plot draws the projected figures it says (read back from the figure, not its pixels). No models; seconds.
"""

import json

import pandas as pd
import pytest

from bakeoff.core import runs
from bakeoff.decide import evidence
from bakeoff.decide.curve_record import Curve
from bakeoff.decide.evidence_record import Evidence
from bakeoff.decide.sizing_record import AllIn, SizedFit
from bakeoff.decide.verdict_record import Scope, Verdict
from bakeoff.report.evidence import cell, prompt_lines, sample_lines, where_lines
from bakeoff.report.html import html

V = Verdict.from_dict(
    {
        "baseline": "prompt",
        "variant": "lora",
        "recommendation": {"run": "lora", "kind": "variant"},
        "scope": {"model": "tiny", "n": 4},
    }
)


def _preds(tmp_path, name: str, rows: list[tuple[str, str, float]]) -> None:
    path = tmp_path / runs.predictions(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "".join(
            json.dumps(
                {"id": i, "source": f"t.jsonl:{i + 1}", "prompt": f"q{i}", "prediction": p, "reference": r, "score": s}
            )
            + "\n"
            for i, (p, r, s) in enumerate(rows)
        )
    )


def test_a_planted_field_gap_is_named_with_both_figures():
    df = pd.DataFrame(
        [
            {"name": "prompt", "status": "ok", "field_acc.colour": 0.9, "field_acc.size": 0.2},
            {"name": "lora", "status": "ok", "field_acc.colour": 0.95, "field_acc.size": 0.85},
        ]
    )
    w = evidence.by_field(df, ["prompt", "lora"], ["colour", "size"], "prompt", "lora")
    assert w["largest"]["field"] == "size" and w["largest"]["gap"] == pytest.approx(0.65)
    text = "\n".join(where_lines(Evidence.from_dict({"prompt": "prompt", "run": "lora", "where": w}), V.scope))
    assert "is in the field `size`: 20% against 85% right (+65 points)" in text, text
    assert "| prompt | 90% | 20% |" in text and "| lora | 95% | 85% |" in text


def test_a_label_task_names_the_labels_they_differ_on_and_the_commonest_confusions():
    truth = ["cat", "cat", "cat", "dog", "dog", "bird"]
    said_a = ["dog", "dog", "cat", "dog", "dog", "cat"]  # the prompt calls cats dogs
    said_b = ["cat", "cat", "cat", "dog", "cat", "bird"]
    pa = {i: {"prediction": p, "reference": t} for i, (p, t) in enumerate(zip(said_a, truth))}
    pb = {i: {"prediction": p, "reference": t} for i, (p, t) in enumerate(zip(said_b, truth))}
    w = evidence.by_label(pa, pb, ["cat", "dog", "bird"], "a", "b")
    assert w["labels"][0] == {"label": "cat", "n": 3, "a": 1, "b": 3}  # the largest difference first
    assert w["confusions"]["a"][0] == {"true": "cat", "answered": "dog", "count": 2}
    assert w["confusions"]["b"] == [{"true": "dog", "answered": "cat", "count": 1}]
    text = "\n".join(where_lines(Evidence.from_dict({"prompt": "a", "run": "b", "where": w})))
    assert "| cat | 3 | 1 | 3 |" in text
    assert "Commonest confusions of `a` (true → answered, count): cat → dog (2)" in text


def test_samples_follow_the_rule_and_markup_in_an_answer_stays_text(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    nasty = "a | b `code` <script>alert(1)</script> **bold** [x](http://e) " + "y" * 5000
    _preds(
        tmp_path,
        "prompt",
        [
            ("no", "yes", 0.0),
            ("yes", "yes", 1.0),
            ("no", "yes", 0.0),
            ("no", "yes", 0.0),
            ("no", "yes", 0.0),
            ("yes", "yes", 1.0),
        ],
    )
    _preds(
        tmp_path,
        "lora",
        [
            (nasty, "yes", 1.0),
            ("no", "yes", 0.0),
            ("yes", "yes", 1.0),
            ("no", "yes", 0.0),
            ("yes", "yes", 1.0),
            ("yes", "yes", 1.0),
        ],
    )
    got = evidence.samples({"prompt": evidence._rows("prompt"), "lora": evidence._rows("lora")}, "prompt", "lora")
    assert [s["id"] for s in got] == [0, 2, 1, 4, 3]  # lora's wins, its loss, a fourth difference, both worst
    assert [s["why"] for s in got] == ["run_better", "run_better", "prompt_better", "run_better", "worst"]
    md = "\n".join(
        sample_lines(
            Evidence.from_dict({"samples": got, "rule": evidence.RULE, "prompt": "prompt", "run": "lora"}), V.scope
        )
    )
    assert "(t.jsonl:1; `lora` better)" in md and "(t.jsonl:2; `prompt` better)" in md
    assert "(t.jsonl:4; both answer it worst)" in md
    assert "differ most in score, its wins and its losses alike" in md
    row = next(line for line in md.splitlines() if line.startswith("| `lora` |") and "alert" in line)
    assert row.count("|") == 4  # three cells: no pipe of the answer splits the row
    assert f"({len(nasty) - 400:,} more characters)" in row  # cut, and the rest counted
    page = html(md, {})
    assert "<script>" not in page and "<strong>bold" not in page and "<code>code" not in page
    assert "a &#124; b" in page or "a | b" in page  # the pipe shown as a character, not a cell border


def test_cell_escapes_every_markup_character_once():
    assert cell("a|b") == "a&#124;b" and cell("<i>") == "&#60;i&#62;" and cell("&amp;") == "&#38;amp;"
    assert cell("line1\nline2") == "line1<br>line2" and cell("") == "(empty)"


def test_the_prompts_are_shown_in_a_fence_no_answer_can_close():
    shown = {
        "prompts": [
            {
                "name": "few",
                "rule": "no shots",
                "instruction": None,
                "messages": [{"role": "user", "content": "Q\n~~~~~\nstill inside"}],
            }
        ]
    }
    md = "\n".join(prompt_lines(Evidence.from_dict(shown)))
    assert "~~~~~~text" in md and md.count("~~~~~~") == 2  # one longer than the answer's own run of tildes


def _df():
    return pd.DataFrame(
        [
            {"name": "prompt", "kind": "baseline", "status": "ok", "quality": 0.3},
            {"name": "lora", "kind": "variant", "status": "ok", "quality": 0.8},
            {"name": "full", "kind": "variant", "status": "ok", "quality": 0.85},
        ]
    )


def test_quality_against_cost_draws_the_projected_all_in_cost(tmp_path):
    from bakeoff.report.buyer_plots import Canvas, quality_vs_cost

    costs = {"lora": AllIn(usd=4.0, usd_high=8.0), "full": AllIn(usd=30.0, usd_high=60.0)}
    fig = quality_vs_cost(
        _df(), costs, "lora", Canvas(tmp_path, {}, "exact_match", Scope(model="tiny"), "llama-3.1-8b")
    )
    ax = fig.axes[0]
    drawn = {c.get_label(): tuple(c.lines[0].get_xydata()[0]) for c in ax.containers}
    assert drawn == {"lora": (4.0, 0.8), "full": (30.0, 0.85)}  # x: the projected USD, not CPU seconds
    bars = {c.get_label(): c.lines[2][0].get_segments()[0][:, 0].tolist() for c in ax.containers}
    assert bars["full"] == [30.0, 60.0]  # to the pessimistic end
    star = next(c for c in ax.collections if c.get_label() == "recommended: lora")
    assert tuple(star.get_offsets()[0]) == (4.0, 0.8)
    assert "llama-3.1-8b" in ax.get_xlabel() and "projected" in ax.get_xlabel() and "tiny" in ax.get_title()


def test_memory_at_target_draws_the_projection_against_each_cards_capacity(tmp_path):
    from bakeoff.decide.sizing import GPU
    from bakeoff.report.buyer_plots import memory_at_target

    parts = {"weights": 16.0, "gradients": 0.1, "optimizer": 0.2, "activations": 3.0, "overhead": 1.3}
    fits = [
        {"target": "llama-3.1-8b", "variant": "lora", "parts": parts},
        {"target": "other", "variant": "lora", "parts": {**parts, "weights": 99.0}},
    ]
    cards = [GPU("L4", 24, 0.8, 121), GPU("A100", 40, 1.8, 312), GPU("H100", 80, 3.5, 989)]
    fig = memory_at_target([SizedFit.from_dict(f) for f in fits], cards, 0.1, "llama-3.1-8b", tmp_path, {})
    ax = fig.axes[0]
    tops = [p.get_y() + p.get_height() for p in ax.patches]
    assert max(tops) == pytest.approx(20.6)  # this target's parts, stacked
    # each card's memory less 10%, up to 1.6× the bar and the first card that holds it (L4: 21.6 GB); the larger
    # cards would flatten the bars
    assert [line.get_ydata()[0] for line in ax.lines] == pytest.approx([21.6])
    fits[0]["parts"]["weights"] = 30.0  # 34.6 GB: the A100 (36 GB usable) holds it
    ax = memory_at_target([SizedFit.from_dict(f) for f in fits], cards, 0.1, "llama-3.1-8b", tmp_path, {}).axes[0]
    assert [line.get_ydata()[0] for line in ax.lines] == pytest.approx([21.6, 36.0])


def test_loss_curves_draw_validation_beside_training_in_distinct_styles(tmp_path):
    from bakeoff.core.records import LossPoint
    from bakeoff.report.buyer_plots import loss_curves

    h = [LossPoint(step=1, loss=1.0), LossPoint(step=2, loss=0.5)]
    fig = loss_curves({"a": h, "b": h}, {"a": [LossPoint(step=2, loss=0.6)]}, Scope(), tmp_path, {})
    lines = {line.get_label(): line for line in fig.axes[0].lines}
    assert set(lines) == {"a training", "a validation", "b training"}
    assert lines["a training"].get_linestyle() != lines["b training"].get_linestyle()  # identical curves both show
    assert list(lines["a validation"].get_ydata()) == [0.6]


def test_the_data_value_curve_is_ticked_at_the_row_counts_measured(tmp_path):
    import importlib

    import matplotlib.pyplot as plt

    plots = importlib.import_module("bakeoff.report.plots")  # the module (bakeoff.report.plots is also a function)

    arm = {
        "status": "ok",
        "run": "lora",
        "rows": [52, 104, 207, 414],
        "quality": [0.5, 0.6, 0.7, 0.8],
        "quality_ci": [[q - 0.1, q + 0.1] for q in (0.5, 0.6, 0.7, 0.8)],
        "band": [{"rows": r, "quality": 0.6, "ci": [0.5, 0.7]} for r in (52, 104, 207, 414)],
    }
    kept = []
    real_close = plt.close
    plt.close = kept.append  # keep the figure to read it back
    try:
        plots._data_curve(
            Curve.from_dict({"arms": {"lora": arm}, "reliable": False}), tmp_path, {}, Scope(model="tiny")
        )
    finally:
        plt.close = real_close
    ax = kept[0].axes[0]
    assert "measured on tiny" in ax.get_title()
    assert list(ax.get_xticks()) == [52, 104, 207, 414]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["52", "104", "207", "414"]


def test_every_figure_of_the_runs_names_what_it_was_measured_on_in_its_title(tmp_path):
    import importlib

    import matplotlib.pyplot as plt
    import pandas as pd

    plots = importlib.import_module("bakeoff.report.plots")
    df = pd.DataFrame(
        [
            {
                "name": "p",
                "kind": "baseline",
                "status": "ok",
                "quality": 0.3,
                "quality_ci_low": 0.2,
                "quality_ci_high": 0.4,
                "probe_acc": 0.5,
                "gain": float("nan"),
            },
            {
                "name": "v",
                "kind": "variant",
                "status": "ok",
                "quality": 0.8,
                "quality_ci_low": 0.7,
                "quality_ci_high": 0.9,
                "train_peak_rss_mb": 900.0,
                "train_wall_s": 60.0,
                "probe_acc": 0.45,
                "gain": 0.5,
            },
        ]
    )
    pw = pd.DataFrame([{"a": "v", "b": "p", "diff": 0.5, "p_holm": 0.01}])
    kept, real_close = [], plt.close
    plt.close = kept.append
    try:
        from bakeoff.decide.verdict_record import Scope

        paths = plots.plots(
            df,
            tmp_path,
            "exact_match",
            pw,
            None,
            Scope(model="tiny-model", split="test", n=60, machine="a CPU"),
        )
    finally:
        plt.close = real_close
    assert {"quality_vs_memory", "quality_vs_time", "quality_bars", "pairwise", "tradeoff"} <= set(paths)
    titles = [f.axes[0].get_title() for f in kept]
    assert len(titles) == len(paths) and all("measured on tiny-model" in t for t in titles), titles


def test_a_baseline_records_the_turns_it_sent_and_the_report_shows_them(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from bakeoff.core.sections import BaselineConfig
    from bakeoff.data.examples import Example
    from bakeoff.data.prompts import Prompter
    from bakeoff.evaluate.baseline import prompt_sent

    train = [Example([{"role": "user", "content": f"train {i}"}], f"answer {i}", id=i) for i in range(5)]
    test = [Example([{"role": "user", "content": "the test item"}], "x", id=7)]
    b = BaselineConfig(name="few", shots=2, selection="nearest", instruction="Answer in JSON.")
    sent = prompt_sent(b, SimpleNamespace(test=test), Prompter(b, train, 0, "all-minilm-l6-v2"))
    assert sent["item"] == 7 and "most similar to each test item" in sent["rule"]
    roles = [m["role"] for m in sent["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]  # instruction, 2 shots, the item
    monkeypatch.chdir(tmp_path)
    runs.eval_record("few").parent.mkdir(parents=True)
    runs.eval_record("few").write_text(json.dumps({"prompt_sent": sent}))
    md = "\n".join(
        prompt_lines(Evidence.from_dict({"prompts": evidence.prompts(SimpleNamespace(baselines={"few": None}))}))
    )
    assert "**`few`**: the 2 training examples most similar" in md and "[system]\nAnswer in JSON." in md
    assert md.rstrip().endswith("[user]\nthe test item\n~~~~")


def test_the_per_field_view_goes_to_mlflow_as_metrics():
    from bakeoff.report.publish import where_metrics

    w = {"kind": "fields", "table": {"prompt": {"size": 0.2}, "lora": {"size": 0.85}}, "gaps": {"size": 0.65}}
    assert where_metrics(Evidence.from_dict({"where": w})) == {
        "field_acc.size.prompt": 0.2,
        "field_acc.size.lora": 0.85,
        "field_gap.size": 0.65,
    }
    assert where_metrics(Evidence.from_dict({"where": {"kind": "labels"}})) == {} and where_metrics(None) == {}
    odd = {"kind": "fields", "table": {"lora": {"größe?": 1.0}}, "gaps": {}}
    assert where_metrics(Evidence.from_dict({"where": odd})) == {
        "field_acc.größe_.lora": 1.0
    }  # MLflow refuses '?' in a name


def test_an_unreadable_predictions_file_is_said_and_the_report_goes_on(tmp_path, monkeypatch):
    from types import SimpleNamespace

    monkeypatch.chdir(tmp_path)
    runs.predictions("prompt").parent.mkdir(parents=True)
    runs.predictions("prompt").write_text("{not json\n")
    _preds(tmp_path, "lora", [("yes", "yes", 1.0)])
    df = pd.DataFrame([{"name": "prompt", "status": "ok"}, {"name": "lora", "status": "ok"}])
    e = evidence.guarded(SimpleNamespace(baselines={}), df, V, {})
    assert e["error"].startswith("JSONDecodeError")
    assert "Not gathered (JSONDecodeError" in "\n".join(where_lines(Evidence.from_dict(e)))

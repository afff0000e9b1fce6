"""The tune stage's search on a tiny model: Optuna's study over short runs of the shared loop, judged on validation."""

import json
import math
import random
from dataclasses import replace

import pytest

from bakeoff.core.config import load_params
from bakeoff.core.schema import ParamsError
from bakeoff.core.sections import TrainConfig, VariantConfig
from bakeoff.core.spaces import TuneConfig, apply, as_run
from bakeoff.data.examples import read_examples, write_jsonl
from bakeoff.search.space import SearchDirs, trial_variant
from bakeoff.search.trials import search_variant as search

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _params(tune: TuneConfig, lr: float = 1e-3):
    params = load_params(ROOT / "params.yaml")
    t = TrainConfig(
        max_steps=8,
        effective_batch=4,
        micro_batch=4,
        lr=lr,
        lr_scheduler="constant",
        warmup_ratio=0.0,
        max_seq_len=128,
        precision="fp32",
        logging_steps=1,
        warmup_steps_excluded=1,
        eval_steps=4,
    )
    lora = VariantConfig(
        name="lora", technique="lora", train=t, options={"r": 4, "alpha": 8, "dropout": 0.0, "targets": "all-linear"}
    )
    return replace(params, variants={"lora": lora}, tune=tune)


def _prepared(tickets, out, shuffle_test: bool = False):
    rows = read_examples(tickets)
    train, val, test = rows[:32], rows[32:40], rows[40:56]
    if shuffle_test:  # every test answer moved to another test prompt
        answers = [e.completion for e in test]
        random.Random(1).shuffle(answers)
        test = [replace(e, completion=a) for e, a in zip(test, answers)]
    for name, part in (("train", train), ("val", val), ("test", test)):
        write_jsonl(out / f"{name}.jsonl", part)
    (out / "stats.json").write_text(json.dumps({"data_hash": "d" * 16}))
    return out


def test_a_trial_trains_the_full_horizon_with_evaluations_at_its_rungs():
    from bakeoff.search.space import rung_steps

    params = _params(TuneConfig(trials=2, trial_steps=0.5))
    tv = trial_variant(params.variant("lora"), params.tune, {"lr": 3e-3, "r": 8})
    # the variant's own 8 steps, schedule and evaluations (every 4), judged first at step 4, then 8
    assert (tv.train.max_steps, tv.train.eval_steps, tv.train.early_stopping_patience) == (8, 4, 0)
    assert rung_steps(params.variant("lora"), params.tune) == 4
    lora = params.variant("lora")
    long = replace(lora, train=replace(lora.train, max_steps=80, eval_steps=10))
    assert (trial_variant(long, params.tune, {}).train.max_steps, rung_steps(long, params.tune)) == (80, 40)
    # a rung falls where the variant evaluates: 0.25 x 20 = 5 steps, evaluations every 10 -> the first rung at 10
    dpo_like = replace(lora, train=replace(lora.train, max_steps=20, eval_steps=10))
    assert rung_steps(dpo_like, TuneConfig(trial_steps=0.25)) == 10
    never = replace(lora, train=replace(lora.train, eval_steps=0))  # a variant that never evaluates: every rung
    assert trial_variant(never, params.tune, {}).train.eval_steps == 4
    assert tv.train.lr == 3e-3 and tv.options["r"] == 8 and params.variant("lora").train.lr == 1e-3
    assert apply(params.variant("lora"), {}) == params.variant("lora")


def test_a_choice_at_the_edge_of_its_range_widens_it_on_that_side():
    from bakeoff.search.widen import widened

    space = {"lr": {"low": 1e-4, "high": 3e-3, "log": True}, "r": {"choices": [8, 16]}}
    wide, w = widened(space, {"lr": 2.5e-3, "r": 16}, [])  # 2.5e-3: 95% of the log range
    assert wide["lr"]["high"] == pytest.approx(3e-3 * math.sqrt(30), rel=1e-2) and wide["lr"]["low"] == 1e-4
    assert w == [{"param": "lr", "side": "high", "from": 3e-3, "to": wide["lr"]["high"]}]
    assert wide["r"] == space["r"] and space["lr"]["high"] == 3e-3  # choices stay; the input is not changed
    low, w2 = widened(space, {"lr": 1.1e-4}, [])
    assert low["lr"]["low"] == pytest.approx(1e-4 / math.sqrt(30), rel=1e-2) and w2[0]["side"] == "low"
    assert widened(space, {"lr": 6e-4}, []) == (space, [])  # inside: unchanged
    lin, _ = widened({"x": {"low": 0.0, "high": 1.0}}, {"x": 0.95}, [])
    assert lin["x"]["high"] == 1.5
    capped, w3 = widened(space, {"lr": 3e-3}, [{"param": "lr", "side": "high"}] * 2)  # at most twice a side
    assert capped == space and len(w3) == 2


def test_successive_halving_stops_a_trial_only_beyond_the_paired_noise_of_the_gap():
    """Two trials are scored on the same validation rows, so the noise of their gap is the standard error of the
    per-row differences, not one trial's row spread. Rows that differ a lot among themselves (easy and hard items)
    but move together: a small, consistent gap is real (the one-trial figure would call it noise); a gap that
    flips sign from row to row is noise however large one trial's mean looks."""
    import random

    from bakeoff.search.pruning import beyond_noise
    from bakeoff.train.stopping import row_stats

    rng = random.Random(0)
    best = [rng.uniform(0.02, 0.6) for _ in range(46)]  # a wide spread of per-row losses (se ~0.024)
    worse = [b + 0.02 + rng.gauss(0, 0.005) for b in best]  # 0.02 worse on every row
    value, best_value = sum(worse) / 46, sum(best) / 46
    one_trial_se = row_stats(worse)[1]
    assert value - best_value < 2 * one_trial_se  # the old, unpaired rule would have let it go on
    assert beyond_noise(value, [(best_value, best)], worse, 2.0)
    mixed = [b + (0.06 if i % 2 else -0.04) + rng.gauss(0, 0.05) for i, b in enumerate(best)]
    m = sum(mixed) / 46
    assert 0 < m - best_value and not beyond_noise(m, [(best_value, best)], mixed, 2.0)
    # against the best of several: the best by value is the one the gap is taken to
    assert beyond_noise(value, [(best_value + 0.5, None), (best_value, best)], worse, 2.0)
    assert beyond_noise(0.17585, [(0.16097, None)], None, 2.0)  # no per-row losses (DPO): any gap
    assert beyond_noise(0.5, [], None, 2.0)  # the first at a rung: Optuna's own rule alone
    assert beyond_noise(0.70, [(0.75, None)], None, 2.0, minimize=False)  # a metric: higher is better
    assert not beyond_noise(0.80, [(0.75, None)], None, 2.0, minimize=False)


def test_the_search_judges_at_full_length_prunes_at_rungs_keeps_the_recipe_and_widens(
    tiny_model_dir, tickets, tmp_path
):
    """Trial 0 is the plain recipe (params.yaml's lr 1e-3) and, the first at every rung, trains the full 8 steps. The
    space here holds only rates too small to learn (1e-9 to 1e-8): every other trial is worse at the first rung
    (step 4) and successive halving stops it there (one that ties the rung's better half may go on), its tokens
    still counted. The best finished trial, the recipe,
    sits above the space's high edge, so the second half widens the range upwards (twice at most). The choice is the
    recipe, and the record says the search did not beat it."""
    tune = TuneConfig(
        trials=4,
        trial_steps=0.5,
        pruner="halving",
        storage=f"sqlite:///{tmp_path / 't.db'}",
        spaces={"lora": {"lr": {"low": 1e-9, "high": 1e-8, "log": True}}},
    )
    rec = search(
        _params(tune), "lora", SearchDirs(tiny_model_dir, _prepared(tickets, tmp_path / "data"), tmp_path / "work")
    )
    trials = {t["number"]: t for t in rec["trials"]}
    assert trials[0]["recipe"] and trials[0]["values"] == {"lr": 1e-3} and trials[0]["state"] == "complete"
    assert [p["step"] for p in trials[0]["val_curve"]] == [4, 8]  # judged at the horizon that is trained
    assert all(trials[n]["state"] == "pruned" for n in (1, 2, 3)), rec["trials"]
    assert rec["values"] == {"lr": 1e-3} and rec["beat_recipe"] is False
    assert rec["recipe"] == {"values": {"lr": 1e-3}, "state": "complete", "value": trials[0]["value"]}
    assert [w["side"] for w in rec["widened"]] == ["high", "high"] and rec["searched"]["lr"]["high"] > 1e-8
    assert rec["space_written"]["lr"]["high"] == 1e-8
    # each widening's next trial tried the stretch it added: beyond the old edge, inside the new one
    first, second = rec["widened"]
    assert 1e-8 < trials[2]["values"]["lr"] < first["to"] and first["to"] < trials[3]["values"]["lr"] < second["to"]
    assert (first["trials_outside"], second["trials_outside"]) == (2, 1)
    full = trials[0]["tokens_seen"]
    assert [len(trials[n]["val_curve"]) for n in (1, 2)] == [1, 1]  # stopped at the first rung (a tie may go on)
    assert all(0 < trials[n]["tokens_seen"] < full for n in (1, 2)), rec["trials"]  # and its steps counted
    assert rec["tune_tokens"] == sum(t["tokens_seen"] for t in rec["trials"])


def test_a_stage_runs_its_arm_with_the_values_its_search_chose(tmp_path, monkeypatch):
    """``as_run``, which train@, baseline@ and compare read: params.yaml's variant with runs/<name>/tuned.json's
    values applied (a technique option too); as written when there is no record or the search was skipped."""
    from bakeoff.core import runs

    params = _params(TuneConfig())
    monkeypatch.chdir(tmp_path)
    assert as_run(params, "lora") == (params.variant("lora"), {})
    runs.write_json(runs.tuned_record("lora"), {"values": {"lr": 2.5e-3, "r": 16}})
    v, chosen = as_run(params, "lora")
    assert (v.train.lr, v.options["r"], chosen) == (2.5e-3, 16, {"lr": 2.5e-3, "r": 16})
    assert v.train.max_steps == params.variant("lora").train.max_steps and params.variant("lora").train.lr == 1e-3
    runs.write_json(runs.tuned_record("lora"), {"values": {}, "skipped": "no val split"})
    assert as_run(params, "lora") == (params.variant("lora"), {})
    with pytest.raises(ParamsError, match=r"params.yaml: no variant or baseline named 'lroa'.*lora"):
        as_run(params, "lroa")


def test_an_absurd_learning_rate_is_never_chosen_and_test_is_never_read(tiny_model_dir, tickets, tmp_path):
    """lr 1e-9 leaves the adapter where it started; 3e-3 lowers validation loss in 4 steps: the search picks 3e-3.
    With the test answers shuffled the choice and every trial's value are the same: the search never reads test.
    The recipe written here is lr 1e-9, one of the choices: trial 0 runs it, trial 1 the other point."""
    found = {}
    for shuffle_test in (False, True):
        tune = TuneConfig(
            trials=2,
            trial_steps=0.5,
            spaces={"lora": {"lr": {"choices": [1e-9, 3e-3]}}},
            storage=f"sqlite:///{tmp_path / f'tune-{shuffle_test}.db'}",
        )
        data = _prepared(tickets, tmp_path / f"data-{shuffle_test}", shuffle_test)
        dirs = SearchDirs(tiny_model_dir, data, tmp_path / f"work-{shuffle_test}")
        rec = search(_params(tune, lr=1e-9), "lora", dirs)
        assert rec["values"] == {"lr": 3e-3}, rec["trials"]
        assert rec["trials"][0]["recipe"] and rec["trials"][0]["values"] == {"lr": 1e-9}
        values = {t["values"]["lr"]: t["value"] for t in rec["trials"]}
        assert set(values) == {1e-9, 3e-3} and values[3e-3] < values[1e-9]
        assert rec["tune_tokens"] > 0 and (rec["trial_steps"], rec["rung_steps"]) == (8, 4)
        found[shuffle_test] = values
        # the same study again: complete already, so no trial runs and the same choice comes back
        again = search(_params(tune, lr=1e-9), "lora", dirs)
        assert again["values"] == rec["values"] and len(again["trials"]) == 2
    assert found[True] == pytest.approx(found[False])


def test_a_search_records_each_trial_and_skips_without_budget(tiny_model_dir, tickets, tmp_path):
    data = _prepared(tickets, tmp_path / "data")
    off = search(_params(TuneConfig(trials=0)), "lora", SearchDirs(tiny_model_dir, data, tmp_path / "w0"))
    assert off["values"] == {} and off["skipped"] == "tune.trials is 0"
    seen = []
    tune = TuneConfig(
        trials=3,
        trial_steps=0.5,
        pruner="none",
        storage=f"sqlite:///{tmp_path / 't.db'}",
        spaces={"lora": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}},
    )
    rec = search(
        _params(tune), "lora", SearchDirs(tiny_model_dir, data, tmp_path / "w"), log_trial=lambda *a: seen.append(a)
    )
    assert len(rec["trials"]) == 3 and [n for n, _, _ in seen] == [0, 1, 2]
    assert all(1e-4 <= t["values"]["lr"] <= 1e-2 for t in rec["trials"])
    best = min((t for t in rec["trials"] if t["state"] == "complete"), key=lambda t: t["value"])
    assert rec["values"] == best["values"] and rec["best_value"] == best["value"]
    assert rec["tune_tokens"] == sum(t["tokens_seen"] for t in rec["trials"])


def test_the_default_study_file_is_created_on_a_fresh_clone(tickets, tmp_path):
    """Default storage is a SQLite file beside the run's scratch folder: on a fresh clone that folder does not exist
    yet, and the first search must create it (the first `make repro` with tuning on failed here)."""
    from bakeoff.search.study import open_study

    data = _prepared(tickets, tmp_path / "data")
    work = tmp_path / "clone" / ".bakeoff_tmp" / "lora.tune"
    study, storage = open_study(
        _params(TuneConfig(trials=1)),
        "lora",
        {"lr": {"low": 1e-4, "high": 1e-2}},
        SearchDirs(tmp_path / "base", data, work),
        "minimize",
    )
    assert storage == f"sqlite:///{tmp_path / 'clone' / '.bakeoff_tmp' / 'tune.db'}"
    assert (tmp_path / "clone" / ".bakeoff_tmp" / "tune.db").is_file() and len(study.trials) == 0


@pytest.mark.slow
def test_the_prompting_search_picks_the_shots_best_on_validation(tickets, tmp_path):
    """The default base model, scored by json_fields on 6 validation tickets: with no shots it does not answer in
    the task's JSON; with the 3 nearest solved tickets it does. The search tries both and keeps the better."""
    from bakeoff.core.models import resolve_base
    from bakeoff.core.sections import BaselineConfig
    from bakeoff.search.prompt import search_prompt

    base = tmp_path / "base"
    resolve_base("smollm2-135m-instruct", base)
    data = _prepared(tickets, tmp_path / "data")
    rows = [json.loads(x) for x in (data / "val.jsonl").read_text().splitlines()][:6]
    (data / "val.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    params = _params(TuneConfig(trials=2, storage=f"sqlite:///{tmp_path / 'p.db'}"))
    # written as zero-shot nearest: trial 0 (the recipe) is (0, nearest), the grid's other point (3, nearest)
    searched = BaselineConfig("searched", selection="nearest", search={"shots": [0, 3], "selection": ["nearest"]})
    params = replace(
        params,
        baselines={"searched": searched},
        task=replace(params.task, metric="json_fields"),
        eval=replace(params.eval, dtype="fp32"),
    )
    seen = []
    rec = search_prompt(params, "searched", SearchDirs(base, data, tmp_path / "w"), log_trial=lambda *a: seen.append(a))
    by_shots = {t["values"]["shots"]: t["value"] for t in rec["trials"]}
    assert set(by_shots) == {0, 3} and len(seen) == 2 and rec["trials"][0]["values"]["shots"] == 0
    assert rec["trials"][0].get("recipe") and rec["recipe"]["values"] == {"shots": 0, "selection": "nearest"}
    assert by_shots[3] > by_shots[0], by_shots
    assert rec["values"] == {"shots": 3, "selection": "nearest"} and rec["best_value"] == by_shots[3]
    assert all(t["prompt_tokens_per_request"] > 0 for t in rec["trials"])


def test_dpo_is_searched_on_validation_pairs(tiny_model_dir, tickets, tmp_path, monkeypatch):
    """DPO's trials are judged on the val pairs the data stage carves (its loss on them), as the other variants are
    on val rows; without val pairs the search says why it did not run, and nothing else. The val pairs here are
    training pairs with chosen and rejected swapped: a rate that learns the training pairs loses on them, so the
    search keeps the rate that learns nothing (judged on the training pairs it would keep the other)."""
    from bakeoff.data.examples import read_pairs
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    monkeypatch.chdir(tmp_path)  # the parent adapter lives where the pipeline keeps it: models/variants/lora
    data = _prepared(tickets, tmp_path / "data")
    pairs = read_pairs(ROOT / "data" / "raw" / "prefs.jsonl")
    write_jsonl(data / "prefs_train.jsonl", pairs[:16])
    write_jsonl(data / "prefs_val.jsonl", [replace(p, chosen=p.rejected, rejected=p.chosen) for p in pairs[:6]])
    params = _params(
        TuneConfig(
            trials=2,
            trial_steps=0.5,
            pruner="none",
            storage=f"sqlite:///{tmp_path / 't.db'}",
            spaces={"dpo": {"lr": {"choices": [1e-9, 1e-2]}}},
            derived_objective="val_loss",
        )
    )
    lora = params.variant("lora")
    train(
        Job(
            get_technique("lora"),
            replace(lora, train=replace(lora.train, max_steps=1)),
            tiny_model_dir,
            tmp_path / "models" / "variants" / "lora",
            "fp32",
            tmp_path / "w",
        ),
        get_technique("lora").load_rows(data),
    )
    dpo = VariantConfig(
        name="dpo",
        technique="dpo",
        train=replace(lora.train, lr=1e-9),
        parent="lora",  # the recipe
        options={"init_from": "lora", "beta": 0.1, "loss_type": "sigmoid"},
    )
    params = replace(params, variants={**params.variants, "dpo": dpo})
    rec = search(params, "dpo", SearchDirs(tiny_model_dir, data, tmp_path / "work"))
    assert "skipped" not in rec and len(rec["trials"]) == 2, rec
    values = {t["values"]["lr"]: t["value"] for t in rec["trials"]}
    # lr 1e-9 leaves the policy on its reference: DPO's loss on every val pair is log 2; 1e-2 learns the training
    # pairs, so it does worse than log 2 on their swapped copies
    assert values[1e-9] == pytest.approx(math.log(2), abs=1e-4) and values[1e-2] > math.log(2) + 1e-3
    assert rec["values"] == {"lr": 1e-9} and "token_budget" not in rec  # lora's search not recorded: no cap
    # lora's search recorded as having trained 1 token: DPO's search stops after the trial that passes it
    (tmp_path / "runs" / "lora").mkdir(parents=True)
    (tmp_path / "runs" / "lora" / "tuned.json").write_text(json.dumps({"tune_tokens": 1}))
    capped = replace(params, tune=replace(params.tune, storage=f"sqlite:///{tmp_path / 'capped.db'}"))
    one = search(capped, "dpo", SearchDirs(tiny_model_dir, data, tmp_path / "work_capped"))
    assert len(one["trials"]) == 1 and (one["token_budget"], one["token_budget_from"]) == (1.0, "lora's search")
    (data / "prefs_val.jsonl").unlink()
    off = search(params, "dpo", SearchDirs(tiny_model_dir, data, tmp_path / "work2"))
    assert off["values"] == {} and off["skipped"] == "dpo has no validation rows to judge trials on"


def test_dpo_judged_on_the_task_metric_refuses_a_rate_that_lowers_it(tiny_model_dir, tickets, tmp_path, monkeypatch):
    """With the task metric as a derived variant's objective (the default, ``tune.derived_objective: metric``), DPO's
    own loss neither prunes nor chooses. The objective is the tune stage's own (``val_metric``: each trial's model
    served as the pipeline serves it, exact match on the validation split), and the validation references are the
    parent's own greedy answers: a DPO that does not move keeps them all; on validation pairs it can learn, lr 0.3
    has the lower DPO loss but moves the answers, so the search keeps 1e-9."""

    from bakeoff.core.models import load_tokenizer, resolve_precision
    from bakeoff.data.examples import read_pairs
    from bakeoff.evaluate.generation import Decoding, generate
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import Job, train

    monkeypatch.chdir(tmp_path)  # the stage's paths: data/prepared, models/base, models/variants/lora
    data = _prepared(tickets, tmp_path / "data" / "prepared")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "base").symlink_to(tiny_model_dir)
    pairs = read_pairs(ROOT / "data" / "raw" / "prefs.jsonl")
    write_jsonl(data / "prefs_train.jsonl", pairs[:16])
    write_jsonl(data / "prefs_val.jsonl", pairs[:6])  # the pairs it trains on: a learning rate lowers its loss
    params = _params(
        TuneConfig(
            trials=2,
            trial_steps=0.5,
            storage=f"sqlite:///{tmp_path / 't.db'}",
            spaces={"dpo": {"lr": {"choices": [1e-9, 0.3]}}},
        )
    )
    lora = params.variant("lora")
    parent = tmp_path / "models" / "variants" / "lora"
    train(
        Job(
            get_technique("lora"),
            replace(lora, train=replace(lora.train, max_steps=1)),
            tiny_model_dir,
            parent,
            "fp32",
            tmp_path / "w",
        ),
        get_technique("lora").load_rows(data),
    )
    served = get_technique("lora").load_for_eval(tiny_model_dir, parent, lora, resolve_precision(params.eval.dtype))
    val = read_examples(tickets)[32:40]  # the validation rows _prepared wrote
    answers, _ = generate(served, load_tokenizer(tiny_model_dir), [e.messages for e in val], Decoding(8, 8))
    write_jsonl(data / "val.jsonl", [replace(e, completion=a) for e, a in zip(val, answers)])
    params = replace(params, task=replace(params.task, max_new_tokens=8))
    dpo = VariantConfig(
        name="dpo",
        technique="dpo",
        train=replace(lora.train, lr=1e-9),
        parent="lora",  # the recipe
        options={"init_from": "lora", "beta": 0.1, "loss_type": "sigmoid"},
    )
    params = replace(params, variants={**params.variants, "dpo": dpo})
    from bakeoff.search.arm import val_metric  # the tune stage's own objective

    rec = search(params, "dpo", SearchDirs(tiny_model_dir, data, tmp_path / "work"), score_fn=val_metric(params))
    assert rec["objective"] == "metric" and rec.get("n_pruned", 0) == 0, rec
    by_lr = {t["values"]["lr"]: t for t in rec["trials"]}
    assert by_lr[0.3]["val_curve"][-1]["loss"] < by_lr[1e-9]["val_curve"][-1]["loss"]  # the loss would pick 0.3
    assert by_lr[1e-9]["value"] == 1.0 and by_lr[0.3]["value"] < 1.0  # the task metric falls
    assert rec["values"] == {"lr": 1e-9}


def test_a_token_budget_stops_each_search_once_its_trials_trained_that_many_tokens(tmp_path):
    """``tune.budget: tokens``: trials go on only while the finished ones trained fewer tokens than the budget (at
    most ``trials``); an arm with cheaper trials gets more of them, and none more tokens than one trial past it."""
    import optuna

    from bakeoff.search.study import run_study

    def study(name):
        return optuna.create_study(study_name=name, storage=f"sqlite:///{tmp_path / 'b.db'}", direction="minimize")

    def objective_of(tokens):
        def objective(trial):
            trial.set_user_attr("tokens_seen", tokens)
            return trial.suggest_float("lr", 1e-4, 1e-2, log=True)

        return objective

    cheap = run_study(study("cheap"), objective_of(100), trials=10, token_budget=250)
    dear = run_study(study("dear"), objective_of(200), trials=10, token_budget=250)
    assert len(cheap["trials"]) == 3 and len(dear["trials"]) == 2  # 300 ≥ 250 and 400 ≥ 250 tokens
    capped = run_study(study("capped"), objective_of(1), trials=4, token_budget=1e9)
    assert len(capped["trials"]) == 4  # `trials` still caps the search
    assert len(run_study(study("plain"), objective_of(100), trials=3)["trials"]) == 3
    with pytest.raises(ParamsError, match="tune.budget_tokens"):
        from bakeoff.core.config import load_params as lp

        p = tmp_path / "params.yaml"
        p.write_text((ROOT / "params.yaml").read_text().replace("budget: trials", "budget: tokens"))
        lp(p)


def test_a_derived_arm_searches_within_the_tokens_its_parents_search_trained(tmp_path, monkeypatch):
    """DPO is judged on the task metric, which has no value at the pruning rungs, so none of its trials is cut short:
    under ``budget: trials`` its search stops once it trained the tokens of the search of the arm it continues (as
    ``tune.budget: tokens`` stops every arm), and says where the figure came from; an arm of its own has no cap."""
    from bakeoff.core.config import load_params
    from bakeoff.search.space import token_budget

    params = load_params(ROOT / "params.yaml")
    monkeypatch.chdir(tmp_path)
    dpo, lora = params.variant("dpo"), params.variant("lora")
    assert dpo.parent == "lora" and token_budget(params.tune, dpo) == (None, None)  # lora not searched yet
    (tmp_path / "runs" / "lora").mkdir(parents=True)
    (tmp_path / "runs" / "lora" / "tuned.json").write_text(json.dumps({"tune_tokens": 215064}))
    assert token_budget(params.tune, dpo) == (215064.0, "lora's search")
    assert token_budget(params.tune, lora) == (None, None)
    tokens = replace(params.tune, budget="tokens", budget_tokens=1000)
    assert token_budget(tokens, dpo) == token_budget(tokens, lora) == (1000, "tune.budget_tokens")
    # the report's budget section says so, beside the arm's own row
    import pandas as pd

    from bakeoff.decide.decision import search_records
    from bakeoff.report.searches import derived_budget_words

    (tmp_path / "runs" / "dpo").mkdir()
    (tmp_path / "runs" / "dpo" / "tuned.json").write_text(
        json.dumps(
            {"token_budget": 215064.0, "token_budget_from": "lora's search", "tune_tokens": 257034, "trials": [{}] * 3}
        )
    )
    words = derived_budget_words(pd.DataFrame({"name": ["lora", "dpo"]}), search_records(["lora", "dpo"]))
    assert words.startswith("`dpo`'s trials") and "past the 215,064 tokens lora's search trained" in words
    assert "(257,034 in 3 trials)" in words


def test_the_study_is_new_when_the_pruner_the_seed_or_the_trial_code_changes(tmp_path, monkeypatch):
    """Everything that changes a trial's outcome names the study: another pruner, seed or trainer code never reuses
    the old trials; a report-only setting does not start a new study."""
    import shutil

    from bakeoff.search import space as search_space

    params = load_params(ROOT / "params.yaml")
    space = params.tune.spaces["lora"]
    name = search_space.study_name(params, "lora", space, "h")
    assert search_space.study_name(params, "lora", space, "h") == name  # stable
    for change in ({"pruner": "median"}, {"seed": 1}):
        other = replace(params, tune=replace(params.tune, **change))
        assert search_space.study_name(other, "lora", space, "h") != name, change
    report_only = replace(params, verdict=replace(params.verdict, min_gain=0.5))
    assert search_space.study_name(report_only, "lora", space, "h") == name
    lib = tmp_path / "bakeoff"
    shutil.copytree(ROOT / "src" / "bakeoff", lib)
    before = search_space.trial_code_hash(lib)
    assert before == search_space.trial_code_hash()  # the copy is the library itself
    (lib / "report" / "tables.py").write_text("# a report edit changes no trial\n")
    assert search_space.trial_code_hash(lib) == before
    with open(lib / "train" / "trainer.py", "a") as f:
        f.write("# an edit to the trainer\n")
    assert search_space.trial_code_hash(lib) != before
    monkeypatch.setattr(search_space, "trial_code_hash", lambda root=None: "edited")
    assert search_space.study_name(params, "lora", space, "h") != name


def test_every_search_runs_the_written_values_first_and_again_when_their_trial_was_lost(tmp_path):
    """Trial 0 is the recipe in a continuous space, in a finite (choices) space where the written value is not a
    listed choice, and in the prompt search's grid; a recipe trial lost to a dead worker (failed, no status of its
    own) is queued again rather than replaced by a draw."""
    import optuna

    from bakeoff.search.study import Draws, grid_order, run_study
    from bakeoff.search.trials import with_recipe

    def objective(trial):
        return sum(
            float(trial.suggest_categorical(k, spec["choices"]))
            if "choices" in spec
            else trial.suggest_float(k, spec["low"], spec["high"], log=True)
            for k, spec in space.items()
        )

    url = f"sqlite:///{tmp_path / 's.db'}"
    space = {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}
    study = optuna.create_study(study_name="continuous", storage=url)
    rec = run_study(study, objective, 3, draws=Draws(url, recipe={"lr": 5e-4}))
    assert rec["trials"][0]["values"] == {"lr": 5e-4} and rec["trials"][0].get("recipe")

    written = {"r": 12, "shots": 3}  # r 12 is not among the choices: it is added, and runs first
    space = with_recipe({"r": {"choices": [4, 8]}, "shots": {"choices": [1, 3]}}, written)
    assert space["r"]["choices"] == [12, 4, 8] and space["shots"]["choices"] == [1, 3]
    grid = grid_order(space, 0, written)
    assert grid[0] == written and len(grid) == 6 and len({tuple(sorted(p.items())) for p in grid}) == 6
    study = optuna.create_study(study_name="grid", storage=url)
    rec = run_study(study, objective, 4, draws=Draws(url, recipe=written, grid=grid))
    assert [t["values"] for t in rec["trials"]] == grid[:4] and rec["trials"][0].get("recipe")

    study = optuna.create_study(study_name="lost", storage=url)  # its recipe trial's worker died mid-trial
    study.enqueue_trial({"r": 12, "shots": 3}, user_attrs={"recipe": True})
    lost = study.ask()
    lost.suggest_categorical("r", space["r"]["choices"]), lost.suggest_categorical("shots", space["shots"]["choices"])
    study.tell(lost, state=optuna.trial.TrialState.FAIL)
    rec = run_study(study, objective, 2, draws=Draws(url, recipe=written, grid=grid))
    assert rec["lost_trials"] == [0]
    assert [t["values"] for t in rec["trials"]] == [written, grid[1]] and rec["trials"][0].get("recipe")

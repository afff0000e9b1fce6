"""The whole pipeline through `dvc repro`, on a tiny model with the real tokenizer, in a fresh repo.

Checks what a user relies on: every stage runs, logging to a real `mlflow server` on 127.0.0.1 whose runs MLflow's
own client reads back (one latest run per baseline and variant, the same metric names); no secret from the
environment reaches a log, a record or MLflow; a second `dvc repro` reruns nothing, editing one variant's value
reruns only that variant and the comparison; outputs pushed to a DVC remote come back identical.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import make_dvc_repo
from services import MlflowServer

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


SECRET = "hf_SENTINEL_do_not_log_4242"
SERVER: dict = {}  # the MLflow server the pipeline logs to: {"uri": ..., "proc": ...}


def sh(cmd: str, cwd: Path, ok: bool = True, **extra) -> str:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
        "HF_TOKEN": SECRET,
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    if SERVER:  # as many reach a team's server: a password in the URI, which must never show or be recorded
        env["MLFLOW_TRACKING_URI"] = SERVER["uri"].replace("://", f"://bakeoff:{SECRET}@", 1)
    env.update(extra)
    r = subprocess.run(cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if ok:
        assert r.returncode == 0, f"{cmd} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r.stdout + r.stderr


def start_mlflow_server(root: Path) -> None:
    """`mlflow server` on a free port of 127.0.0.1 with an sqlite backend (tests/services.py), for the module."""
    server = MlflowServer(root).__enter__()
    SERVER.update(uri=server.uri, proc=server.proc, root=Path(root))


@pytest.fixture(scope="module")
def repo(tmp_path_factory, tiny_model_dir):
    repo = tmp_path_factory.mktemp("repo")
    params = make_dvc_repo(repo, tiny_model_dir, rows=64, pairs=24)
    params["train_defaults"].update(
        max_steps=2, effective_batch=4, micro_batch=2, precision="fp32", warmup_steps_excluded=1, logging_steps=1
    )
    params["baselines"] = {
        "zero_shot": {"shots": 0},
        "few_shot": {"shots": 2},
        "nearest": {"shots": 2, "selection": "nearest", "instruction": "Answer in JSON."},
        "rag": {"passages": 2},  # retrieval-augmented, on a task without task.corpus: skipped, the run goes on
    }
    params["eval"].update(latency_requests=2, bootstrap_resamples=200, probe_limit=40)
    params["variants"] = {
        "lora": {"technique": "lora", "r": 4, "alpha": 8, "seeds": 2},  # a second training seed, seed 1
        "full": {"technique": "full", "memory_budget_gb": 0.05},  # cannot fit: its search and its run end `oom`
        "unsloth": {"technique": "lora", "backend": "unsloth", "r": 4, "alpha": 8},  # no CUDA here: skipped at once
        "raft": {"technique": "lora", "r": 4, "alpha": 8, "passages": 2, "raft": 0.8},  # no task.corpus: skipped
    }
    # full alone is searched (2 trials), on a budget no trial fits in
    params["tune"].update(
        trials=2, trial_steps=0.5, spaces={"full": {"lr": {"low": 1.0e-5, "high": 1.0e-4, "log": True}}}
    )
    params["derived"] = {"dpo": {"technique": "dpo", "init_from": "lora", "lr": 1.0e-4}}
    params["curve"].update(fractions=[0.25, 0.5], resamples=200)  # the data-value curve: two shares an arm
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sh("git init -q && git config user.email t@t && git config user.name t && dvc init -q", repo)
    sh("git add -A && git commit -qm init", repo)
    start_mlflow_server(tmp_path_factory.mktemp("mlflow"))
    out = sh("dvc repro", repo)
    yield repo, out
    SERVER.pop("proc").terminate()
    SERVER.clear()


CURVE_STAGES = ["curve@best_prompt-0.25", "curve@best_prompt-0.5", "curve@recommended-0.25", "curve@recommended-0.5"]


def test_every_stage_ran_and_report_lists_every_run(repo):
    repo, out = repo
    for stage in (
        "model",
        "data",
        "tune_prompt@zero_shot",
        "tune@lora",
        "tune_from@dpo",
        "baseline@zero_shot",
        "baseline@few_shot",
        "baseline@nearest",
        "train@lora",
        "evaluate@lora",
        "tune@full",
        "train@full",
        "evaluate@full",
        "train@unsloth",
        "train_from@dpo",
        "evaluate_from@dpo",
        "export",
        *CURVE_STAGES,
        "compare",
    ):
        assert f"Running stage '{stage}'" in out
    # the child trains after its parent; the report comes after the export it reports
    assert out.index("Running stage 'train_from@dpo'") > out.index("Running stage 'train@lora'")
    assert out.index("Running stage 'compare'") > out.index("Running stage 'export'")
    rag = json.loads((repo / "runs" / "rag" / "eval.json").read_text())
    assert rag["status"] == "skipped" and rag["error"].startswith("no task.corpus"), rag
    assert json.loads((repo / "runs" / "rag" / "tuned.json").read_text())["skipped"] == "baselines.rag has no search"
    shipped = json.loads((repo / "reports" / "shipped.json").read_text())
    assert shipped["chosen_by"] == "the recommendation"
    assert "## Shipped" in (repo / "reports" / "comparison.md").read_text()
    report = (repo / "reports" / "comparison.md").read_text()
    for name in ("zero_shot", "few_shot", "lora"):
        assert f"| {name} |" in report
    metrics = json.loads((repo / "reports" / "metrics.json").read_text())
    status = {r: v["status"] for r, v in metrics["runs"].items()}
    assert status == {
        "zero_shot": "ok",
        "few_shot": "ok",
        "nearest": "ok",
        "lora": "ok",
        "full": "oom",
        "dpo": "ok",
        "unsloth": "skipped",
        "rag": "skipped",  # passages asked of a task without task.corpus
        "raft": "skipped",  # a variant trained and asked with passages, on the same task
    }
    raft = json.loads((repo / "runs" / "raft" / "train.json").read_text())
    assert raft["error"].startswith("no task.corpus: variant 'raft'") and raft["metrics"] == {}
    # Unsloth without a CUDA GPU: skipped before anything loads, with the reason, in the report too
    unsloth = json.loads((repo / "runs" / "unsloth" / "train.json").read_text())
    assert "CUDA GPU" in unsloth["error"] and unsloth["metrics"] == {}
    assert "| unsloth |" in report and "CUDA GPU" in report
    # every trial of full's search ran out of its budget: each is a recorded result (status, peak, tokens), the
    # study went on to the second, and train@full then trained as written and ended `oom` too
    tuned = json.loads((repo / "runs" / "full" / "tuned.json").read_text())
    assert [t["state"] for t in tuned["trials"]] == ["oom", "oom"] and tuned["n_failed"] == 2
    assert all("memory_budget_gb" in t["error"] and t["peak_mb"] > 50 for t in tuned["trials"]), tuned["trials"]
    assert tuned["values"] == {} and "2 oom" in tuned["skipped"]
    # every run is served in one dtype, and the report names it
    served = {
        n: json.loads((repo / "runs" / n / "eval.json").read_text())["metrics"].get("serving_dtype")
        for n in ("zero_shot", "few_shot", "nearest", "lora", "dpo")
    }
    assert len(set(served.values())) == 1 and None not in served.values(), served
    assert "serving dtype" in report and f"| {served['lora']} |" in report
    # the out-of-memory variant records its peak and why; its failure touched nothing of lora's
    oom = json.loads((repo / "runs" / "full" / "train.json").read_text())
    assert "memory_budget_gb" in oom["error"] and oom["metrics"]["train_peak_rss_mb"] > 50
    assert (repo / "models" / "variants" / "lora" / "adapter_model.safetensors").exists()
    assert (repo / "runs" / "lora" / "predictions.jsonl").read_text().count("\n") == 8
    assert "| full |" in report and "oom" in report
    train = json.loads((repo / "runs" / "lora" / "train.json").read_text())
    assert train["metrics"]["tokens_seen"] > 0 and train["metrics"]["train_steps"] == 2
    # validation loss at the last step (eval_steps 10 > max_steps 2), a judgement, and winners chosen on validation
    # one validation point: a falling training loss may say "still improving", nothing says "converged"
    assert [p["step"] for p in train["val_curve"]] == [2] and train["metrics"]["convergence"] in (
        "still improving",
        "not judged (under 2 validation points)",
    )
    tuned = json.loads((repo / "runs" / "lora" / "tuned.json").read_text())
    assert tuned["skipped"] == "tune.spaces has no 'lora' space"
    assert all(
        "val_quality" in json.loads((repo / "runs" / n / "eval.json").read_text())["metrics"]
        for n in ("zero_shot", "lora", "dpo")
    )
    assert "winners picked on the validation split" in report and "converged?" in report


def test_data_value_curve_points_fit_report_mlflow_and_a_new_share_runs_alone(repo):
    """The curve stages trained the recommended variant and prompted the best baseline on nested shares of train; the
    compare stage fitted both (reports/curve.json), wrote the sentence, section and plot, and counted the curve in
    the budget; each point is a child run of its arm's MLflow run (a share added later: the module's last test)."""
    import mlflow

    from bakeoff.data.examples import load_examples, load_pairs
    from bakeoff.data.subsets import nested_subset
    from bakeoff.search.curve_point import digest

    repo, _ = repo
    curve = json.loads((repo / "reports" / "curve.json").read_text())
    rec, prompt = curve["arms"]["recommended"], curve["arms"]["best_prompt"]
    assert rec["run"] in ("lora", "dpo") and rec["kind"] == "variant"  # full ran out of memory: not recommended
    assert prompt["run"] in ("zero_shot", "few_shot", "nearest") and prompt["kind"] == "baseline"
    train = load_examples(repo / "data" / "prepared" / "train.jsonl")
    rows = load_pairs(repo / "data" / "prepared" / "prefs_train.jsonl") if rec["run"] == "dpo" else train
    for arm, full in ((rec, rows), (prompt, train)):
        assert arm["status"] == "ok" and arm["n_points"] == 3 and arm["rows"][-1] == len(full)
        assert arm["rows"][0] < arm["rows"][1] < arm["rows"][2]
        assert all(len(ci) == 2 and ci[0] <= q <= ci[1] for q, ci in zip(arm["quality"], arm["quality_ci"]))
        assert arm["projection"][0]["multiple"] == 2 and "inside" in arm["backtest"]
    for share in (0.25, 0.5):  # the rows a point drew are the nested share, the same on every draw
        point = json.loads((repo / "reports" / "curve" / f"recommended-{share}" / "point.json").read_text())
        assert point["status"] == "ok" and point["run"] == rec["run"]
        assert point["metrics"]["rows_digest"] == digest(nested_subset(rows, share, 0, None))
        assert point["metrics"]["train_steps"] == 2 and point["metrics"]["tokens_seen"] > 0
        assert (repo / "reports" / "curve" / f"recommended-{share}" / "predictions.jsonl").read_text().count("\n") == 8
    report = (repo / "reports" / "comparison.md").read_text()
    assert "## What more data would buy" in report and "![quality against training rows" in report
    assert "**More data**" in report and "data-value curve: 2 smaller shares" in report
    assert (repo / "reports" / "plots" / "curve.png").stat().st_size > 5000
    metrics = json.loads((repo / "reports" / "metrics.json").read_text())
    assert metrics["curve"]["arms"]["recommended"]["run"] == rec["run"]
    mlflow.set_tracking_uri(SERVER["uri"])
    for arm in (rec, prompt):
        parent = json.loads((repo / "runs" / arm["run"] / "eval.json").read_text())["run_id"]
        kids = mlflow.search_runs(
            experiment_names=["tickets"],
            filter_string=f"tags.mlflow.parentRunId = '{parent}' and tags.kind = 'curve_point'",
        )
        assert sorted(kids["tags.curve.share"]) == ["0.25", "0.5"] and set(kids["status"]) == {"FINISHED"}
        assert (kids["metrics.quality"] >= 0).all()


def test_mlflow_server_reads_back_one_latest_run_each(repo):
    import mlflow

    repo, _ = repo
    assert not (repo / "mlflow.db").exists()  # everything went to the server
    mlflow.set_tracking_uri(SERVER["uri"])
    runs = mlflow.search_runs(experiment_names=["tickets"], filter_string="tags.`bakeoff.latest` = 'true'")
    by_name = {r["tags.bakeoff.name"]: r for _, r in runs.iterrows()}
    assert set(by_name) == {
        "zero_shot",
        "few_shot",
        "nearest",
        "rag",
        "lora",
        "full",
        "unsloth",
        "raft",
        "dpo",
        "comparison",
        "full.tune",
        "lora.tune",
        "unsloth.tune",
        "raft.tune",
        "dpo.tune",
    }  # tune.trials > 0: a search run each
    trials = mlflow.search_runs(experiment_names=["tickets"], filter_string="tags.kind = 'trial'")
    assert sorted(trials["tags.state"]) == ["oom", "oom"]  # full's two trials, each its own MLflow child run
    assert by_name["full"]["tags.status"] == "oom" and by_name["full"]["metrics.train_peak_rss_mb"] > 50
    for name in ("zero_shot", "few_shot", "nearest", "lora", "dpo"):
        r = by_name[name]
        assert r["tags.status"] == "ok"
        for metric in (
            "quality",
            "exact_match",
            "json_fields",
            "val_loss",
            "gen_tokens_per_s",
            "prompt_tokens_per_request",
            "latency_p50_s",
            "latency_p95_s",
            "lm_eval_exact_match",
            "lm_eval_disagree",
        ):
            assert r[f"metrics.{metric}"] == r[f"metrics.{metric}"], f"{name} lacks {metric}"  # not NaN
    for name in ("zero_shot", "lora", "dpo"):  # preference pairs: on the base as it is and on every trained run
        assert 0 <= by_name[name]["metrics.pref_accuracy"] <= 1 and by_name[name]["metrics.n_pref"] > 0, name
    for name in ("few_shot", "nearest"):  # shots do not change the model that ranks the pairs: not scored again
        assert by_name[name]["metrics.pref_accuracy"] != by_name[name]["metrics.pref_accuracy"], name  # NaN
    for name in ("zero_shot", "lora", "dpo"):  # the offline forgetting check, on the base and on every variant
        assert 0 <= by_name[name]["metrics.probe_acc"] <= 1 and by_name[name]["metrics.probe_wall_s"] > 0, name
    assert by_name["zero_shot"]["metrics.general_kl"] == 0 and by_name["lora"]["metrics.general_kl"] > 0
    lora = by_name["lora"]
    assert lora["tags.kind"] == "variant" and lora["tags.technique"] == "lora"
    assert lora["metrics.train_tokens_per_s"] > 0 and lora["params.variant.r"] == "4"
    # train and evaluate wrote into the same run
    assert lora["run_id"] == json.loads((repo / "runs" / "lora" / "eval.json").read_text())["run_id"]
    # few-shot pays for its shots on every request
    key = "metrics.prompt_tokens_per_request"
    assert by_name["few_shot"][key] > by_name["zero_shot"][key]


def test_no_secret_reaches_logs_records_or_mlflow(repo):
    import mlflow

    repo, out = repo
    assert SECRET not in out and "MLFLOW_TRACKING_USERNAME" in out  # planted in MLFLOW_TRACKING_URI, moved out of it
    written = [
        p
        for p in repo.rglob("*")
        if ".git" not in p.parts and ".dvc" not in p.parts and p.is_file() and p.stat().st_size < 50_000_000
    ]
    for path in [*written, *SERVER["root"].rglob("*")]:  # every file written, the MLflow server's store included
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    mlflow.set_tracking_uri(SERVER["uri"])
    for _, r in mlflow.search_runs(experiment_names=["tickets"]).iterrows():
        assert SECRET not in " ".join(str(v) for v in r.values)


def test_unreachable_server_stops_the_stage_before_it_touches_anything(repo):
    repo, _ = repo
    adapter = repo / "models" / "variants" / "lora" / "adapter_model.safetensors"
    before = adapter.read_bytes()
    out = sh("python stages/train.py lora", repo, ok=False, MLFLOW_TRACKING_URI="http://127.0.0.1:9")
    assert "error: MLflow tracking server http://127.0.0.1:9 (from MLFLOW_TRACKING_URI) is unreachable" in out
    assert adapter.read_bytes() == before and "Traceback" not in out


def test_second_repro_reruns_nothing_and_one_edit_reruns_only_that_variant(repo):
    repo, _ = repo
    again = sh("dvc repro", repo)
    assert "Running stage" not in again
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["variants"]["lora"]["r"] = 8
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = sh("dvc repro", repo)
    ran = sorted(line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage"))
    # lora, its derived child (DPO continues lora's adapter), the export and the comparison: no other variant's training
    # or
    # evaluation, no baseline. Every variant's tune stage reruns (a variant in tune.share works on another's study,
    # so each reads the whole variants section), but with nothing to search (or a study already complete) each
    # writes the same choice at once, and nothing downstream of an unchanged choice reruns
    # the curve's points rerun too: the runs they resolve their arms from changed
    assert ran == [
        "compare",
        *CURVE_STAGES,
        "evaluate@lora",
        "evaluate_from@dpo",
        "export",
        "train@lora",
        "train_from@dpo",
        "tune@full",
        "tune@lora",
        "tune@raft",
        "tune@unsloth",
        "tune_from@dpo",
    ]


def test_a_one_line_edit_reruns_only_the_stages_that_load_the_file(repo):
    """`dvc status` after one comment line added to a file of report/, of decide/ and of train/ in turn (in a copy of
    the library put in place of the project's link to it, so the tree is untouched): each makes stale exactly the
    stages whose script loads the file, as dvc.yaml's generated deps say."""
    repo, _ = repo
    link = repo / "src"
    assert "Running stage" not in sh("dvc repro", repo)  # the lock is current

    def stale(text: str) -> set[str]:
        return {ln[:-1] for ln in text.splitlines() if ln.endswith(":") and not ln[0].isspace()}

    def after_edit(rel: str) -> set[str]:
        f = link / "bakeoff" / rel
        before = f.read_text()
        f.write_text(before + "# an edit\n")
        try:
            return stale(sh("dvc status", repo))
        finally:
            f.write_text(before)

    link.unlink()
    shutil.copytree(ROOT / "src", link, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    try:
        assert stale(sh("dvc status", repo)) == set()
        assert after_edit("report/tables.py") == {"compare"}
        # the curve's fit: the comparison alone (the export and the curve's points read the decision, not the fit);
        # the verdict's rule: the comparison, the export and the curve's points; no search, training or evaluation
        assert after_edit("decide/curve.py") == {"compare"}
        decided = after_edit("decide/verdict.py")
        assert "compare" in decided and "export" in decided, decided
        assert not {s for s in decided if s.startswith(("tune", "train", "evaluate", "baseline"))}, decided
        # the training loop: every search and training run and the curve's points; no evaluation, no report
        trained = after_edit("train/trainer.py")
        assert "train@lora" in trained and "tune@lora" in trained, trained
        assert not {
            s for s in trained if s.startswith(("evaluate", "baseline", "compare", "export", "model", "data"))
        }, trained
    finally:
        shutil.rmtree(link)
        link.symlink_to(ROOT / "src")


def test_mlflow_one_parent_per_repro_earlier_runs_superseded_and_the_champion(repo):
    """Read back through MlflowClient after three repros (the last two in the test above, one of which retrained
    lora): the newest repro run holds every current arm, the earlier repro and lora's first run are tagged
    superseded (nothing deleted), `models:/tickets@champion` resolves to the recommended run's files, and lora's
    run lasts its train stage only (its evaluation's own time is a metric)."""
    import mlflow

    repo, _ = repo
    mlflow.set_tracking_uri(SERVER["uri"])
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name("tickets").experiment_id
    parents = client.search_runs([exp], "tags.kind = 'repro'", order_by=["attributes.start_time DESC"])
    assert len(parents) == 2, [p.info.run_name for p in parents]  # compare ran twice (once cached)
    last, first = parents
    assert last.info.run_name.startswith("repro ") and first.data.tags["bakeoff.superseded"] == "true"
    # the top level: the current answer and one holder of everything earlier
    top = [r for r in client.search_runs([exp]) if "mlflow.parentRunId" not in r.data.tags]
    assert sorted(r.data.tags["kind"] for r in top) == ["repro", "superseded-holder"], [r.info.run_name for r in top]
    kids = client.search_runs([exp], f"tags.`mlflow.parentRunId` = '{last.info.run_id}'")
    names = {r.data.tags["bakeoff.name"] for r in kids}
    assert {"zero_shot", "few_shot", "nearest", "lora", "full", "unsloth", "dpo", "lora.tune", "dpo.tune"} <= names
    assert all(r.data.tags.get("bakeoff.superseded") != "true" for r in kids)
    loras = [
        r for r in client.search_runs([exp], "tags.`bakeoff.name` = 'lora'") if r.data.tags.get("kind") != "seed"
    ]  # lora's second seed: a child of its own run, which moves with it
    now = [r for r in loras if r.data.tags.get("bakeoff.latest") == "true"]
    assert len(now) == 1 and now[0].data.tags["mlflow.parentRunId"] == last.info.run_id
    current, older = now[0], [r for r in loras if r.info.run_id != now[0].info.run_id]
    assert older and all(r.data.tags["bakeoff.superseded"] == "true" for r in older)  # tagged, never deleted
    assert any(r.data.tags.get("mlflow.parentRunId") == first.info.run_id for r in older)  # under its own repro
    assert current.data.metrics["eval_stage_wall_s"] > 0
    # the run ended when training did, before its evaluate stage started logging into it
    assert current.info.end_time <= int(current.data.tags["bakeoff.eval_started_ms"])
    picked = last.data.tags["recommendation"].split("`")[1]
    version = client.get_model_version_by_alias("tickets", "champion")
    assert client.get_run(version.run_id).data.tags["bakeoff.name"] == picked
    records = {a.path for a in client.list_artifacts(version.run_id, "records")}
    assert {"records/eval.json", "records/params.yaml", "records/predictions.jsonl"} <= records
    info = mlflow.models.get_model_info("models:/tickets@champion")
    assert {"transformers", "python_function"} <= set(info.flavors)
    assert info.flavors["transformers"]["inference_task"] == "llm/v1/chat"
    answers_as_evaluated(repo, picked)


def answers_as_evaluated(repo, picked: str) -> None:
    """`mlflow.pyfunc.load_model("models:/tickets@champion")` answers a test item as the evaluated run did: the same
    messages in, the same greedy answer out."""
    import mlflow

    first = json.loads((repo / "runs" / picked / "predictions.jsonl").read_text().splitlines()[0])
    sent = json.loads((repo / "runs" / picked / "eval.json").read_text()).get("prompt_sent") or {}
    items = [json.loads(line) for line in (repo / "data" / "prepared" / "test.jsonl").read_text().splitlines()]
    messages = (
        sent["messages"]
        if sent.get("item") == first["id"]  # a prompt's shots and instruction
        else next(r["messages"] for r in items if r["id"] == first["id"])
    )  # a variant: the item as prepared
    model = mlflow.pyfunc.load_model("models:/tickets@champion")
    out = model.predict({"messages": messages})
    answer = out[0]["choices"][0]["message"]["content"]
    assert answer.strip() == first["prediction"].strip(), (answer, first["prediction"])


def test_evaluation_records_intervals_flips_lm_eval_and_serving(repo):
    repo, _ = repo
    metrics = json.loads((repo / "reports" / "metrics.json").read_text())["runs"]
    for name in ("zero_shot", "few_shot", "nearest", "lora", "dpo"):
        m = metrics[name]
        assert m["quality_ci_low"] <= m["quality"] <= m["quality_ci_high"], name
    lora = metrics["lora"]
    assert lora["gain_ci_low"] <= lora["gain"] <= lora["gain_ci_high"]
    best = max(("zero_shot", "few_shot", "nearest"), key=lambda n: metrics[n]["quality"])
    assert lora["gain"] == pytest.approx(lora["quality"] - metrics[best]["quality"], abs=1e-6)
    for name in ("lora", "dpo", "unsloth"):
        assert (repo / "reports" / "flips" / f"{name}.jsonl").exists() or metrics[name]["status"] != "ok"
    report = (repo / "reports" / "comparison.md").read_text()
    assert "95% CI" in report and "Δ vs best prompt" in report and "lm-eval EM" in report
    assert "Forgetting check" in report
    assert "arc_easy: not run (offline" in report and "OfflineModeIsEnabled" not in report
    assert "| probe | Δ probe | KL | KL from |" in report
    ev = json.loads((repo / "runs" / "lora" / "eval.json").read_text())["metrics"]
    # lm-eval scored bakeoff's own answers (eval.lm_eval: reuse): the same rule on the same outputs
    assert ev["lm_eval_disagree"] <= 1 and ev["lm_eval_generated"] == 0 and "scored bakeoff's own answers" in report
    for step in ("eval_val_loss", "eval_val_generate", "eval_pref", "eval_latency", "lm_eval", "probe"):
        assert ev[f"{step}_wall_s"] > 0, step  # where evaluation time goes
    assert not (repo / ".bakeoff_tmp" / "lora" / "test_answers.jsonl").exists()  # streamed, then removed
    assert ev["served"] == "merged" and ev["latency_p50_s_unmerged"] > 0
    near = json.loads((repo / "runs" / "nearest" / "eval.json").read_text())
    assert near["technique"] == "2-shot nearest + instruction prompting"


def test_report_has_verdict_sizing_plots_and_one_offline_page(repo):
    repo, _ = repo
    md = (repo / "reports" / "comparison.md").read_text()
    assert "## Verdict" in md and any(f"**{d}**" in md for d in ("fine-tune", "prompting is enough", "inconclusive"))
    assert "## GPU sizing" in md and "| llama-3.1-8b | " in md and "Projected, not measured" in md
    sizing = json.loads((repo / "reports" / "sizing.json").read_text())
    calib = {r["variant"]: r for r in sizing["calibration"]["rows"]}
    assert calib["lora"]["measured_gb"] > 0 and "error" in calib["lora"]
    metrics = json.loads((repo / "reports" / "metrics.json").read_text())
    assert metrics["verdict"]["decision"] == sizing["verdict"]["decision"]
    plots = sorted(p.name for p in (repo / "reports" / "plots").glob("*.png"))
    assert plots == [
        "curve.png",
        "loss_curves.png",
        "memory_at_target.png",
        "pairwise.png",
        "quality_bars.png",
        "quality_vs_cost.png",
        "quality_vs_memory.png",
        "quality_vs_time.png",
        "tradeoff.png",
    ]
    for section in (
        "## Quality against cost",
        "## Where the gain comes from",
        "## Answers side by side",
        "## The prompts sent",
    ):
        assert section in md, section
    assert metrics["where"]["kind"] == "fields" and metrics["where"]["largest"]["field"] in metrics["where"]["fields"]
    page = (repo / "reports" / "comparison.html").read_text()
    assert page.count('src="data:image/png;base64,') == 9 and "http://" not in page and "https://" not in page
    shown = sh("dvc metrics show", repo)  # one row per arm, its numbers as columns
    assert "reports/arms/lora.json" in shown and "quality" in shown.splitlines()[0]
    sh("dvc plots show -o plots_html", repo)
    assert len(list((repo / "plots_html").rglob("*.png"))) >= 4


def test_training_runs_carry_system_metrics_and_the_summary_run_the_report(repo):
    import mlflow

    repo, _ = repo
    mlflow.set_tracking_uri(SERVER["uri"])
    runs = mlflow.search_runs(experiment_names=["tickets"], filter_string="tags.`bakeoff.latest` = 'true'")
    by_name = {r["tags.bakeoff.name"]: r for _, r in runs.iterrows()}
    assert by_name["lora"]["metrics.system/cpu_utilization_percentage"] >= 0
    summary = by_name["comparison"]
    assert summary["tags.verdict"] in ("fine-tune", "prompting is enough", "inconclusive")
    client = mlflow.MlflowClient()
    names = {a.path for a in client.list_artifacts(summary["run_id"])}
    assert {
        "comparison.md",
        "comparison.html",
        "sizing.json",
        "metrics.json",
        "plots",
        "flips",
        "pairwise.csv",
        "pairwise.json",
    } <= names
    # the rank groups and the recommendation as tags; the pairwise tests as a table the UI shows
    assert summary["tags.rank_groups"].startswith("A: ") and "Recommendation" in summary["tags.recommendation"]
    table = client.load_table(summary["experiment_id"], "pairwise.json", run_ids=[summary["run_id"]])
    assert {"a", "b", "p", "p_holm"} <= set(table.columns) and len(table) == 5 * 4 / 2  # five finished runs


def test_pairwise_tests_rank_groups_and_recommendation_in_the_report(repo):
    import pandas as pd

    repo, _ = repo
    pw = pd.read_csv(repo / "reports" / "pairwise.csv")
    assert len(pw) == 10 and (pw["p_holm"] >= pw["p"] - 1e-12).all() and pw["p"].between(0, 1).all()
    assert set(pw["test"]) == {"exact McNemar"}  # exact match is 0/1
    # the discordant counts are the items the two runs disagree on, recounted from their predictions
    row = pw[(pw["a"] == "zero_shot") & (pw["b"] == "lora")].iloc[0]
    score = {
        n: {r["id"]: r["score"] for r in map(json.loads, (repo / "runs" / n / "predictions.jsonl").open())}
        for n in ("zero_shot", "lora")
    }
    assert row["a_better_on"] == sum(score["zero_shot"][i] > score["lora"][i] for i in score["lora"])
    assert row["b_better_on"] == sum(score["lora"][i] > score["zero_shot"][i] for i in score["lora"])
    md = (repo / "reports" / "comparison.md").read_text()
    assert "Rank groups (" in md and "**Recommendation:" in md and "## Which differences are real" in md
    assert "as good as" not in md and "**Measured here**" in md
    assert "| group |" in md


def test_a_second_seed_trains_differently_is_a_child_run_and_the_report_gives_the_mean(repo):
    import mlflow

    repo, _ = repo
    train = json.loads((repo / "runs" / "lora" / "train.json").read_text())
    assert [(s["seed"], s["status"]) for s in train["seeds"]] == [(1, "ok")]
    primary = repo / "models" / "variants" / "lora" / "adapter_model.safetensors"
    seed1 = repo / "models" / "variants" / "lora" / "seeds" / "seed-1" / "adapter_model.safetensors"
    assert seed1.exists() and seed1.read_bytes() != primary.read_bytes()
    rows = [json.loads(line) for line in (repo / "runs" / "lora" / "predictions.jsonl").open()]
    assert all(set(r["seed_scores"]) == {"1"} for r in rows)
    ev = json.loads((repo / "runs" / "lora" / "eval.json").read_text())["metrics"]
    seed_quality = sum(r["seed_scores"]["1"] for r in rows) / len(rows)
    assert ev["seeds"] == 2 and ev["quality_seed_mean"] == pytest.approx((ev["quality"] + seed_quality) / 2, abs=1e-4)
    shown = json.loads((repo / "reports" / "metrics.json").read_text())["runs"]["lora"]
    assert shown["quality"] == pytest.approx(ev["quality_seed_mean"], abs=1e-4)  # the report gives the mean
    assert "2: sd " in (repo / "reports" / "comparison.md").read_text()
    mlflow.set_tracking_uri(SERVER["uri"])
    child = mlflow.search_runs(experiment_names=["tickets"], filter_string="tags.kind = 'seed'")
    child = child[child["tags.mlflow.parentRunId"] == train["run_id"]].iloc[0]
    assert child["tags.seed"] == "1" and child["metrics.quality"] == pytest.approx(seed_quality, abs=1e-4)


def test_dvc_remote_push_and_pull_bring_back_identical_outputs(repo, tmp_path):
    import hashlib

    repo, _ = repo
    outs = [
        repo / "models" / "base" / "model.safetensors",
        repo / "models" / "variants" / "lora" / "adapter_model.safetensors",
        repo / "data" / "prepared" / "train.jsonl",
        repo / "runs" / "lora" / "predictions.jsonl",
    ]
    digest = {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in outs}
    sh(f"dvc remote add -d store {tmp_path / 'remote'} && dvc push", repo)
    shutil.rmtree(repo / ".dvc" / "cache")
    for d in ("models", "data/prepared"):
        shutil.rmtree(repo / d)
    (repo / "runs" / "lora" / "predictions.jsonl").unlink()
    sh("dvc pull", repo)
    assert {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in outs} == digest
    assert "Running stage" not in sh("dvc repro", repo)  # nothing to redo: the pulled outputs are current


def test_a_share_added_to_the_curve_runs_alone(repo):
    """The module's last test on the shared project (its repro would add a repro run to the MLflow tests above)."""
    repo, _ = repo
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["curve"]["fractions"] = [0.125, 0.25, 0.5]
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = sh("dvc repro", repo)
    ran = sorted(line.split("'")[1] for line in out.splitlines() if line.startswith("Running stage"))
    assert ran == ["compare", "curve@best_prompt-0.125", "curve@recommended-0.125"]
    assert json.loads((repo / "reports" / "curve.json").read_text())["arms"]["recommended"]["n_points"] == 4


def test_train_adopts_the_search_trial_that_is_its_very_run(tmp_path, tiny_model_dir):
    """The search's best trial (here trial 0, the plain recipe: the space's rates are too small to learn) is the run
    train@lora would train (same values, seed, data, schedule; its early stopping would not have cut it), so the
    stage adopts its adapter and record instead of training again. Trained afresh, with the adoption withheld, the
    adapter comes out the same: the trial was the very run."""
    import torch
    from safetensors.torch import load_file

    repo = tmp_path / "repo"
    repo.mkdir()
    params = make_dvc_repo(repo, tiny_model_dir, rows=48)
    params["train_defaults"].update(
        max_steps=4,
        effective_batch=4,
        micro_batch=4,
        precision="fp32",
        eval_steps=2,
        warmup_steps_excluded=1,
        logging_steps=1,
    )
    params["baselines"] = {"zero_shot": {"shots": 0}}
    params["variants"], params["derived"] = {"lora": {"technique": "lora", "r": 4, "alpha": 8}}, {}
    params["tune"].update(trials=2, trial_steps=0.5, spaces={"lora": {"lr": {"low": 1e-9, "high": 1e-8, "log": True}}})
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sh("git init -q && git config user.email t@t && git config user.name t && git add -A && git commit -qm init", repo)
    sh("python stages/model.py models/base && python stages/data.py models/base data/prepared", repo)
    out = sh("python stages/tune.py lora && python stages/train.py lora", repo)
    tuned = json.loads((repo / "runs/lora/tuned.json").read_text())
    assert tuned["best_trial"] == 0 and tuned["adopt"]["trial"] == 0, tuned
    assert "adopting trial 0 of its search" in out
    rec = json.loads((repo / "runs/lora/train.json").read_text())
    assert rec["status"] == "ok" and rec["metrics"]["adopted_from_trial"] == 0
    assert rec["metrics"]["stopped_at_step"] == 4 and rec["metrics"]["tokens_seen"] > 0
    assert not Path(tuned["adopt"]["dir"]).exists()  # taken, then cleared
    adopted = load_file(repo / "models/variants/lora/adapter_model.safetensors")
    tuned.pop("adopt")
    (repo / "runs/lora/tuned.json").write_text(json.dumps(tuned))
    again = sh("python stages/train.py lora", repo)
    assert "adopting" not in again
    fresh = load_file(repo / "models/variants/lora/adapter_model.safetensors")
    assert adopted.keys() == fresh.keys() and all(torch.allclose(adopted[k], fresh[k], atol=1e-6) for k in fresh)
    assert "adopted_from_trial" not in json.loads((repo / "runs/lora/train.json").read_text())["metrics"]


def test_a_trial_whose_best_evaluation_is_not_its_last_is_adopted_with_those_weights(tmp_path, tiny_model_dir):
    """A trial whose best validation loss is not at its last step ends on its best evaluation's weights, as the
    variant's early-stopping run does; it is then that very run, judged by those weights, and train@ adopts it."""
    import torch
    from safetensors.torch import load_file

    repo = tmp_path / "repo"
    repo.mkdir()
    params = make_dvc_repo(repo, tiny_model_dir, rows=48)
    # a rate far too high, held constant: validation loss is lowest at the first evaluation, then rises; a patience
    # longer than the run, so the variant's own run would not stop early and would end on its best evaluation's weights
    params["train_defaults"].update(
        max_steps=6,
        effective_batch=4,
        micro_batch=4,
        precision="fp32",
        eval_steps=2,
        warmup_steps_excluded=1,
        logging_steps=1,
        early_stopping_patience=0.95,
        lr_scheduler="constant",
    )
    params["baselines"] = {"zero_shot": {"shots": 0}}
    params["variants"], params["derived"] = {"full": {"technique": "full", "lr": 0.2}}, {}
    params["tune"].update(trials=1, trial_steps=0.5, spaces={"full": {"lr": {"low": 0.16, "high": 0.24, "log": True}}})
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sh("git init -q && git config user.email t@t && git config user.name t && git add -A && git commit -qm init", repo)
    sh("python stages/model.py models/base && python stages/data.py models/base data/prepared", repo)
    out = sh("python stages/tune.py full && python stages/train.py full", repo)
    tuned = json.loads((repo / "runs/full/tuned.json").read_text())
    curve = [p["loss"] for p in tuned["trials"][0]["val_curve"]]
    assert len(curve) == 3 and min(curve) < curve[-1], curve  # the best evaluation is not the last
    assert tuned["trials"][0]["value"] == pytest.approx(min(curve))  # judged by the weights it ends on
    assert tuned["adopt"]["trial"] == 0 and "adopting trial 0 of its search" in out, tuned
    rec = json.loads((repo / "runs/full/train.json").read_text())["metrics"]
    assert rec["adopted_from_trial"] == 0 and rec["kept_best"] and rec["best_step"] < rec["stopped_at_step"] == 6
    adopted = load_file(repo / "models/variants/full/model.safetensors")
    tuned.pop("adopt")
    (repo / "runs/full/tuned.json").write_text(json.dumps(tuned))
    again = sh("python stages/train.py full", repo)  # the variant's own run, trained afresh
    assert "adopting" not in again
    fresh_rec = json.loads((repo / "runs/full/train.json").read_text())["metrics"]
    assert fresh_rec["best_step"] == rec["best_step"] and fresh_rec["stopped_at_step"] == 6
    fresh = load_file(repo / "models/variants/full/model.safetensors")
    assert adopted.keys() == fresh.keys() and all(torch.allclose(adopted[k], fresh[k], atol=1e-6) for k in fresh)

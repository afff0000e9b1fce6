"""The quick look (bakeoff.run.quick): the user's params on a small budget, read by the same loader, and said so."""

import subprocess
from pathlib import Path

import pandas as pd
import yaml

from bakeoff.core.config import Source, parse_params
from bakeoff.decide.sizing_record import Money
from bakeoff.decide.verdict_record import Verdict
from bakeoff.report import opening_lines, quick_look_lines
from bakeoff.run import quick

ROOT = Path(__file__).resolve().parents[1]


def test_the_default_params_on_a_quick_budget_keep_the_base_prompting_and_one_lora():
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    q = quick.overrides(raw)
    p = parse_params(q, Source("quick/params.yaml", {}))
    assert list(p.baselines) == list(raw["baselines"])  # the base as it is and the prompt search
    assert list(p.variants) == ["lora"] and p.variants["lora"].technique == "lora"
    assert p.variants["lora"].train.max_steps == quick.STEPS and p.tune.trials == quick.TRIALS
    assert max(p.baselines["prompt_search"].search["shots"]) <= 3
    assert p.eval.max_examples == quick.EXAMPLES and p.eval.lm_eval == "off" and not p.export.serve
    assert p.task.val_size == quick.VAL and not p.eval.probe and p.variants["lora"].train.effective_batch == quick.BATCH
    assert p.variants["lora"].train.lr == raw["tune"]["spaces"]["lora"]["lr"]["high"]
    assert p.verdict.quick_look and p.tracking.experiment == "tickets (quick look)"
    assert raw["variants"].keys() >= {"full", "qlora"} and "derived" in raw  # the user's params are not touched


def test_a_users_params_keep_their_own_lora_and_drop_paid_endpoints():
    raw = {
        "task": {"name": "mine", "train": "t.jsonl"},
        "baselines": {"api": {"endpoint": {"base_url": "http://x/v1", "model": "m"}}, "few": {"shots": 8}},
        "variants": {"big_full": {"technique": "full"}, "my_lora": {"technique": "lora", "r": 8, "max_steps": 200}},
        "tune": {"trials": 10, "share": {"x": "y"}},
    }
    q = quick.overrides(raw)
    assert list(q["baselines"]) == ["few"] and q["baselines"]["few"]["shots"] == 3
    assert list(q["variants"]) == ["my_lora"] and q["variants"]["my_lora"]["r"] == 8
    assert q["variants"]["my_lora"]["max_steps"] == quick.STEPS and q["tune"]["trials"] == quick.TRIALS
    assert "share" not in q["tune"] and q["tracking"]["experiment"] == "mine (quick look)"


def test_the_report_says_quick_look_with_its_interval_and_the_full_command():
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    p = parse_params(quick.overrides(raw), Source("quick/params.yaml", {}))
    lines = quick_look_lines(p, pd.DataFrame({"n_test": [30, 30]}), Verdict(ci_low=0.3, ci_high=0.8))
    text = " ".join(lines)
    assert "Quick look" in text and "30 test items" in text and "[+30.0, +80.0]" in text and "make repro" in text
    assert "`zero_shot`, `prompt_search`, `lora` only" in text and "only, no search: each arm as written" in text
    # what the quick look changed from the user's params stands beside its figures
    high, lr = raw["tune"]["spaces"]["lora"]["lr"]["high"], raw["train_defaults"]["lr"]
    assert "shots of your" not in text  # no search: the shots as written (3), which the quick budget keeps
    assert f"`lora`'s rate raised to {high:g} (your {lr:g})" in text, text
    assert f"`lora` at most {quick.STEPS} steps of {quick.BATCH} rows" in text
    full = parse_params(raw, Source("params.yaml", {}))
    assert quick_look_lines(full, pd.DataFrame({"n_test": [60]}), Verdict(ci_low=0.3, ci_high=0.8)) == []
    # a quick look's reader sees that it is one before its answer; a full run opens with the answer
    v = Verdict.from_dict(
        {
            "decision": "fine-tune",
            "gain": 0.5,
            "ci_low": 0.3,
            "ci_high": 0.8,
            "variant": "lora",
            "baseline": "b",
            "recommendation": {"action": "fine-tune", "run": "lora"},
        }
    )
    quick_first = opening_lines(p, pd.DataFrame({"n_test": [30, 30]}), v, Money(), {}, {})
    assert quick_first[0].startswith("> **Quick look, not the full bake-off**") and "## Answer" in quick_first
    assert opening_lines(full, pd.DataFrame({"n_test": [60]}), v, Money(), {}, {})[0] == "## Answer"


def test_build_makes_a_workspace_dvc_runs_as_the_small_pipeline(tmp_path):
    dest = quick.build(ROOT, tmp_path / "quick")
    stages = subprocess.run(
        ["dvc", "stage", "list", "--name-only"], cwd=dest, capture_output=True, text=True, check=True
    ).stdout.split()
    # the same dvc.yaml, expanded over the quick params: one LoRA, no other technique, no DPO
    assert {
        "model",
        "data",
        "baseline@zero_shot",
        "tune@lora",
        "train@lora",
        "evaluate@lora",
        "export",
        "compare",
    } <= set(stages)
    assert not any(s.endswith(("@full", "@qlora", "@dpo", "@lora_lowmem")) for s in stages)
    assert (dest / "stages/train.py").read_text() == (ROOT / "stages/train.py").read_text()
    config = (dest / ".dvc/config.local").read_text()
    assert str(ROOT / ".dvc" / "cache") in config  # DVC's cache shared with the project
    assert (ROOT / "params.yaml").read_text() != (dest / "params.yaml").read_text()
    assert "quick_look: true" in (dest / "params.yaml").read_text()
    # the GPU check's record goes along: the quick report's sizing says "measured on" the card as the full one does
    from bakeoff.core.config import load_params
    from bakeoff.decide.sizing import GPU_CHECK, measured_on

    got = measured_on(load_params(dest / "params.yaml"), str(dest / GPU_CHECK))
    assert got["overhead"] and got["out_of_sample"]
    assert got == measured_on(load_params(ROOT / "params.yaml"), str(ROOT / GPU_CHECK))


def test_the_quick_look_is_an_overlay_file_merged_by_one_function():
    """configs/quick.yaml's `set`, `drop` and `at_most` are what `overlay` applies: a value replaced, a key removed, a
    cap (an unset value takes it, a smaller one and 0 stay)."""
    spec = {
        "set": {"eval": {"probe": False}, "derived": {}},
        "drop": ["tune.share"],
        "at_most": {"tune": {"trials": 2}, "eval": {"max_examples": 30}},
    }
    raw = {
        "eval": {"probe": True, "batch_size": 4},
        "derived": {"dpo": {"technique": "dpo"}},
        "tune": {"trials": 0, "share": {"qlora": "lora"}},
    }
    q = quick.overlay(raw, spec)
    assert q["eval"] == {"probe": False, "batch_size": 4, "max_examples": 30}
    assert q["derived"] == {} and q["tune"] == {"trials": 0}
    assert quick.overlay({"tune": {"trials": 8}}, spec)["tune"]["trials"] == 2
    assert raw["derived"] == {"dpo": {"technique": "dpo"}}  # the user's params are not touched
    shipped = yaml.safe_load((ROOT / "configs" / "quick.yaml").read_text())
    assert quick.SPEC == shipped and quick.TRIALS == shipped["at_most"]["tune"]["trials"]

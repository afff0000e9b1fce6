"""params.yaml validation: errors name the file, the line and the key."""

from pathlib import Path

import pytest

from bakeoff.core.config import ParamsError, load_params

ROOT = Path(__file__).resolve().parents[1]


def test_default_params_load():
    p = load_params(ROOT / "params.yaml")
    lora = p.variant("lora")
    assert lora.technique == "lora" and lora.options["r"] == 16
    assert (lora.train.effective_batch, lora.train.micro_batch, lora.train.grad_accum) == (16, 8, 2)  # params.yaml
    assert set(p.baselines) >= {"zero_shot", "prompt_search"} and p.baseline("prompt_search").search["shots"] == [
        1,
        3,
        8,
    ]
    assert p.tune.trials == 4 and p.tune.share["qlora"] == "lora"  # the shipped default searches every arm


def _write(tmp_path, text):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


BASE = """\
task:
  train: t.jsonl
train_defaults:
  lr: 1.0e-3
variants:
  lora:
    technique: lora
    r: 8
"""


def test_variant_inherits_and_overrides_defaults(tmp_path):
    p = load_params(_write(tmp_path, BASE + "    micro_batch: 2\n"))
    v = p.variant("lora")
    assert v.train.lr == 1e-3 and v.train.micro_batch == 2 and v.train.grad_accum == 8


def test_unknown_option_names_line_and_suggests(tmp_path):
    path = _write(tmp_path, BASE.replace("r: 8", "rank: 8"))
    with pytest.raises(ParamsError, match=r"params\.yaml:8: variants\.lora\.rank: unknown option.*did you mean 'r'"):
        load_params(path)


def test_unknown_technique(tmp_path):
    with pytest.raises(ParamsError, match=r":7: variants\.lora\.technique: unknown technique 'lorra'.*'lora'"):
        load_params(_write(tmp_path, BASE.replace("technique: lora", "technique: lorra")))


@pytest.mark.parametrize("line, key", [("    lr: -1", "variants.lora.lr"), ("    r: 0", "variants.lora.r")])
def test_invalid_values(tmp_path, line, key):
    text = BASE.replace("    r: 8", line if "r:" in line else "    r: 8\n" + line)
    with pytest.raises(ParamsError, match=key.replace(".", r"\.")):
        load_params(_write(tmp_path, text))


def test_effective_batch_must_divide(tmp_path):
    with pytest.raises(ParamsError, match=r"train_defaults\.effective_batch: must be a positive multiple"):
        load_params(_write(tmp_path, BASE.replace("  lr: 1.0e-3", "  lr: 1.0e-3\n  micro_batch: 3")))


def test_unknown_section(tmp_path):
    with pytest.raises(ParamsError, match=r"params\.yaml:1: trian_defaults: unknown section.*train_defaults"):
        load_params(_write(tmp_path, "trian_defaults: {}\n"))


def test_bad_yaml_names_line(tmp_path):
    with pytest.raises(ParamsError, match=r"params\.yaml:2: not valid YAML"):
        load_params(_write(tmp_path, "task:\n  train: a: b\n"))


@pytest.mark.parametrize(
    "text, key",
    [
        ("tune:\n  spaces:\n    lora: {lr: {low: 1.0e-3, high: 1.0e-4}}\n", "tune.spaces.lora.lr"),
        ("tune:\n  spaces:\n    lora: {rank: {choices: [8, 16]}}\n", "tune.spaces.lora.rank"),
        ("tune:\n  share: {lora: nosuch, gone: lora}\n", "tune.share.lora"),
        ("tune:\n  trial_steps: 1.5\n", "tune.trial_steps"),
        ("baselines:\n  searched:\n    search: {shots: [0, -1]}\n", "baselines.searched.search.shots"),
        ("baselines:\n  searched:\n    search: {temperature: [0.1]}\n", "baselines.searched.search.temperature"),
    ],
)
def test_bad_search_spaces_name_their_key_and_line(tmp_path, text, key):
    with pytest.raises(ParamsError) as e:
        load_params(_write(tmp_path, BASE + text))
    assert key in str(e.value) and "params.yaml:" in str(e.value), str(e.value)


def test_a_prompt_search_and_a_shared_search_load(tmp_path):
    text = (
        "  lowmem:\n    technique: lora\n    gradient_checkpointing: true\n"
        "tune:\n  trials: 4\n  share: {lowmem: lora}\n"
        "baselines:\n  searched:\n    search: {shots: [0, 3], selection: [fixed, nearest], instruction: [null, Be "
        "brief.]}\n"
    )
    p = load_params(_write(tmp_path, BASE + text))
    assert p.tune.trials == 4 and p.tune.share == {"lowmem": "lora"}
    assert p.baseline("searched").search["instruction"] == [None, "Be brief."]


@pytest.mark.parametrize(
    "value, want", [("true", "reuse"), ("false", "off"), ("reuse", "reuse"), ("generate", "generate"), ("off", "off")]
)
def test_lm_eval_mode(tmp_path, value, want):
    assert load_params(_write(tmp_path, BASE + f"eval:\n  lm_eval: {value}\n")).eval.lm_eval == want


def test_bad_lm_eval_mode_names_its_line(tmp_path):
    with pytest.raises(ParamsError, match=r"params\.yaml:10: eval\.lm_eval: must be reuse, generate or off"):
        load_params(_write(tmp_path, BASE + "eval:\n  lm_eval: twice\n"))


def test_export_without_a_gguf_loads_and_serving_it_is_refused_with_its_line(tmp_path):
    """export.gguf: null ships the adapter and merged model only; asking to serve a GGUF that is not made names
    export.serve and its line, and an unknown GGUF type names export.gguf."""
    assert load_params(_write(tmp_path, BASE + "export:\n  gguf: null\n  serve: false\n")).export.gguf is None
    with pytest.raises(ParamsError, match=r"params\.yaml:\d+: export\.serve: serving needs a GGUF"):
        load_params(_write(tmp_path, BASE + "export:\n  gguf: null\n"))
    with pytest.raises(ParamsError, match=r"export\.gguf: must be f16, q8_0, bf16 or null; got 'q4'"):
        load_params(_write(tmp_path, BASE + "export:\n  gguf: q4\n"))

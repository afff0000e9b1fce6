"""Quiet logs: the third-party lines nobody can act on are dropped at their source; BAKEOFF_VERBOSE=1 keeps them."""

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import bakeoff

ROOT = Path(__file__).resolve().parents[1]
# torchao registers its Enums with torch's pytree on import: torch logs a deprecation at WARNING for each
SCRIPT = "import bakeoff, torchao, logging; logging.getLogger('mlflow.store.db.utils').warning('kept: a real warning')"


def run(verbose: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "BAKEOFF_VERBOSE"}
    if verbose:
        env["BAKEOFF_VERBOSE"] = "1"
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert r.returncode == 0, r.stderr
    return r.stdout + r.stderr


def test_the_pytree_deprecation_is_dropped_and_verbose_shows_it():
    assert "is an Enum subclass" not in run(verbose=False)
    assert "is an Enum subclass" in run(verbose=True)


def test_a_filter_drops_only_its_message_and_keeps_warnings_of_the_same_logger(caplog):
    log = logging.getLogger("bitsandbytes.backends.cpu.ops")
    with caplog.at_level(logging.INFO):
        log.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s. Please ...", "no module")
        log.warning("something else went wrong")
        logging.getLogger("mlflow.system_metrics.system_metrics_monitor").info("Started monitoring system metrics.")
        logging.getLogger("mlflow.system_metrics.system_metrics_monitor").warning("a real problem")
    said = [r.getMessage() for r in caplog.records]
    assert said == ["something else went wrong", "a real problem"]


def test_the_package_file_is_not_empty_so_dvc_does_not_warn():
    # DVC warns "'src/bakeoff/__init__.py' is empty" for an empty dependency, once per stage and twice more per run
    assert (ROOT / "src/bakeoff/__init__.py").read_text().strip() and bakeoff.__version__


def test_piped_output_has_no_progress_bars_and_no_trainer_step_lines(tmp_path):
    """stderr a pipe: tqdm is off (TQDM_DISABLE) and the trainer's printer and progress callbacks are removed; on a
    terminal, or with BAKEOFF_VERBOSE=1, they stay."""
    code = (
        "import os, bakeoff\n"
        "from transformers.trainer_callback import CallbackHandler, PrinterCallback, ProgressCallback\n"
        "class T:\n"
        "    def __init__(self):\n"
        "        self.callbacks = [PrinterCallback(), ProgressCallback()]\n"
        "    def remove_callback(self, cls):\n"
        "        self.callbacks = [c for c in self.callbacks if not isinstance(c, cls)]\n"
        "t = T(); bakeoff.quiet_trainer(t)\n"
        "print(os.environ.get('TQDM_DISABLE'), len(t.callbacks))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("BAKEOFF_VERBOSE", "TQDM_DISABLE")}
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert piped.stdout.split() == ["1", "0"]
    verbose = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**env, "BAKEOFF_VERBOSE": "1"}
    )
    assert verbose.stdout.split() == ["None", "2"]


def test_every_progress_bar_of_the_library_is_off_in_piped_output():
    """Every bar goes through ``bakeoff.progress``: an explicit ``disable=`` on a bar of its own would override
    TQDM_DISABLE, as the evaluators' bars once did (six bars a stage in a piped ``make quick`` log)."""
    own = [
        p.relative_to(ROOT)
        for p in (ROOT / "src/bakeoff").rglob("*.py")
        if p.name != "__init__.py" or p.parent.name != "bakeoff"
        if re.search(r"^\s*(from tqdm|import tqdm)", p.read_text(), re.MULTILINE)
    ]
    assert own == [], f"these import tqdm themselves; use bakeoff.progress: {own}"
    code = (
        "import bakeoff\n"
        "for _ in bakeoff.progress(range(3), desc='listed', show=True): pass\n"
        "bar = bakeoff.progress(total=2, desc='counted', show=True); bar.update(2); bar.close()\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("BAKEOFF_VERBOSE", "TQDM_DISABLE")}
    piped = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert "listed" not in piped.stderr and "counted" not in piped.stderr, piped.stderr
    verbose = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**env, "BAKEOFF_VERBOSE": "1"}
    )
    assert "listed" in verbose.stderr and "counted" in verbose.stderr, verbose.stderr


def test_lm_evals_own_bars_are_off_in_piped_output(tiny_model_dir):
    """lm-eval passes tqdm an explicit ``disable``: the probe's "Tokenizing inputs" and "Running loglikelihood
    requests" bars filled a piped log until ``lmeval.quiet``; with BAKEOFF_VERBOSE=1 they show."""
    code = (
        "import sys, tempfile\n"
        "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
        "from bakeoff.evaluate import lmeval\n"
        "m = AutoModelForCausalLM.from_pretrained(sys.argv[1]); t = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "print(lmeval.run_probe(m, t, tempfile.mkdtemp(), batch_size=4, limit=4)['probe_acc'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("BAKEOFF_VERBOSE", "TQDM_DISABLE")}
    for verbose in (False, True):
        r = subprocess.run(
            [sys.executable, "-c", code, str(tiny_model_dir)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
            env={**env, **({"BAKEOFF_VERBOSE": "1"} if verbose else {})},
        )
        assert r.returncode == 0, r.stderr[-3000:]
        bars = "Running loglikelihood requests" in r.stderr or "Tokenizing inputs" in r.stderr
        assert bars == verbose, r.stderr[-2000:]

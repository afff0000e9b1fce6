"""Quiet logs: the third-party lines nobody can act on are dropped at their source; BAKEOFF_VERBOSE=1 keeps them."""

import logging
import os
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
    r = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, timeout=300)
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

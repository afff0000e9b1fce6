"""bakeoff: does this task need fine-tuning, with which technique, on which card? (README.md, docs/architecture.md)

Importing the package quiets the third-party lines a user cannot act on, each at its source: a ``logging.Filter`` on
the logger that emits it, matched by the start of its message (or, for MLflow's and alembic's bookkeeping, by level),
so every other line of the same library still shows. ``BAKEOFF_VERBOSE=1`` shows everything. What is hidden and why:

    torch.utils._pytree         torchao registers its Enums the old way (a deprecation for torchao, not for you)
    transformers.trainer_utils  "tokenizer has new PAD/BOS/EOS tokens": the Trainer aligns the model's config with the
                                tokenizer it was given, which is what the runs want (the base's own config disagrees)
    transformers.tokenization_* "Ignoring clean_up_tokenization_spaces": transformers already ignores it for BPE
    bitsandbytes (CPU ops)      its optional CPU 4-bit kernel is fetched from the hub at run time; without it
                                bitsandbytes uses its own (the measured speed is what you get offline)
    lm_eval.models.huggingface  "`pretrained` is not a str" / "already-initialized model": bakeoff passes its loaded
                                model on purpose (bakeoff.evaluate.lmeval), one process
    mlflow (system metrics, db) INFO lines on starting and stopping system metrics, on creating its tables and
                                a new experiment
    alembic                     INFO lines of MLflow's database migrations
    progress bars               🤗 datasets' maps (tokenizing, truncating) and transformers' "Loading weights":
                                each ends in under a second here (a hub download's bar still shows, and so do training's
                                and evaluation's on a terminal)
    piped output                when stderr is not a terminal (a log file, CI), every tqdm bar (``TQDM_DISABLE``) and
                                the trainer's per-step ``{'loss': ...}`` lines (``quiet_trainer``): MLflow has the
                                curves, and each stage still prints one line a trial and one a result

Warnings are not filtered otherwise: anything else a library says still prints.
"""

import logging
import os
import sys

__version__ = "0.1.0"

VERBOSE = os.environ.get("BAKEOFF_VERBOSE", "").strip().lower() in ("1", "true", "yes", "on")

# logger (the one the record is created on) → starts of messages to drop
QUIET_MESSAGES = {
    "torch.utils._pytree": ("%s is an Enum subclass and is now natively supported",),
    "transformers.trainer_utils": ("The tokenizer has new PAD/BOS/EOS tokens",),
    "transformers.tokenization_utils_tokenizers": ("Ignoring clean_up_tokenization_spaces",),
    "transformers.tokenization_utils_base": ("Ignoring clean_up_tokenization_spaces",),
    "bitsandbytes.backends.cpu.ops": ("Failed to load CPU gemm_4bit_forward from kernels-community",),
    "mlflow.tracking.fluent": ("Experiment with name '%s' does not exist. Creating a new experiment.",),
    "lm_eval.models.huggingface": (
        "`pretrained` model kwarg is not of type `str`",
        "Passed an already-initialized model through `pretrained`",
    ),
}
# loggers whose records below WARNING are bookkeeping (their warnings and errors still show)
QUIET_BELOW_WARNING = ("mlflow.system_metrics.system_metrics_monitor", "mlflow.store.db.utils", "alembic")


class _Drop(logging.Filter):
    def __init__(self, starts: tuple[str, ...] = (), below: int = 0):
        super().__init__()
        self.starts, self.below = starts, below

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.below:
            return False
        msg = record.msg if isinstance(record.msg, str) else str(record.msg)
        return not msg.startswith(self.starts)


def quiet() -> None:
    """Install the filters above (once per process); a no-op under ``BAKEOFF_VERBOSE=1``."""
    if VERBOSE:
        return
    for name, starts in QUIET_MESSAGES.items():
        log = logging.getLogger(name)
        if not any(isinstance(f, _Drop) for f in log.filters):
            log.addFilter(_Drop(starts))
    for name in QUIET_BELOW_WARNING:
        log = logging.getLogger(name)
        if not any(isinstance(f, _Drop) for f in log.filters):
            log.addFilter(_Drop(below=logging.WARNING))
        # alembic's INFO lines come from child loggers (alembic.runtime.migration): their level decides
        if name == "alembic":
            log.setLevel(logging.WARNING)
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")  # transformers' bars: bakeoff.core.models
    if piped():
        os.environ.setdefault("TQDM_DISABLE", "1")  # tqdm reads its defaults from TQDM_* (a bar per line in a file)


def piped() -> bool:
    """Whether this process writes to a file or a pipe rather than a terminal (and is not BAKEOFF_VERBOSE)."""
    return not VERBOSE and not sys.stderr.isatty()


def progress(iterable=None, *, show: bool = True, **kw):
    """A tqdm bar for long work: shown on a terminal, off where ``show`` is false and in piped output (a log file, CI),
    where an explicit ``disable`` would otherwise override ``TQDM_DISABLE``."""
    from tqdm.auto import tqdm

    return tqdm(iterable, disable=not show or piped(), **kw)


def quiet_trainer(trainer) -> None:
    """In piped output, the trainer's own per-step log lines and bars off (its metrics still reach MLflow)."""
    if not piped():
        return
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


quiet()

# torch's CPU threads: one per physical core (bakeoff.core.threads), set before any stage loads torch
from bakeoff.core.threads import apply as _apply_threads

_apply_threads()

# MLflow's credentials out of its URI, before anything (MLflow's links, a traceback, a record) can print it
from bakeoff.core.secrets import move_tracking_credentials

move_tracking_credentials()

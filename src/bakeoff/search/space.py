"""How a search runs its trials: the run a trial trains, its rungs, its token budget, and the study it belongs to. The
settings (``TuneConfig``, the spaces) and a variant with its chosen values (``as_run``) are ``bakeoff.core.spaces``;
the search itself is ``search/trials.py``.

    python stages/tune.py lora                 # writes runs/lora/tuned.json, which train@lora reads

Every arm gets the same counted budget: ``tune.trials`` trials, each with the variant's full ``max_steps`` and
schedule (short trials favour high learning rates: a choice is made at the horizon that will be trained). Validation
loss is reported every ``tune.trial_steps`` × max_steps steps, and successive halving (``pruner: halving``) stops a
trial at a rung (that share, then twice it, ...) unless it is in the better half there or within the validation
loss's noise of the rung's best (``pruning.beyond_noise``), so only promising trials reach the full length; every step a
trial trains is counted. Trial 0 is the plain recipe, the values params.yaml
writes, so the choice is never worse on validation than the recipe it replaces (``beat_recipe`` says whether the
search found better). In the second half of the trials a choice at the edge of its range widens the range on that
side (``trials.widened``; recorded as ``widened``). The objective is the last validation loss (``val_loss``) or the
primary metric on the
validation split (``metric``); the test split is never read. A variant listed in ``tune.share`` differs from
another only in memory levers (checkpointing, accumulation, 8-bit optimizer): it takes that variant's chosen values
instead of searching again. ``tune.storage`` may name a database URL so several machines work on one study
(Optuna's own distributed mode); the default is a local SQLite file under .bakeoff_tmp/.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core.records import read_search
from bakeoff.core.spaces import TuneConfig, apply

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


@dataclass(frozen=True)
class SearchDirs:
    """Where a variant's search reads and writes (``bakeoff.search.trials.search_variant``)."""

    base: Path  # the base model
    data: Path  # the prepared splits
    work: Path  # each trial's folder, the kept best trial's weights, the study's SQLite file by default


def rung_steps(variant, tc: TuneConfig) -> int:
    """The first rung of successive halving: ``trial_steps`` × max_steps (2 at least), rounded up to a multiple of
    the variant's ``eval_steps`` so a trial is judged where the variant's own run evaluates."""
    share = max(2, math.ceil(tc.trial_steps * variant.train.max_steps))
    every = variant.train.eval_steps
    return every * math.ceil(share / every) if every else share


def trial_variant(variant, tc: TuneConfig, values: dict):
    """The run a trial trains: the variant's own run with ``values`` (its full ``max_steps`` and schedule: a choice is
    judged at the horizon that will be trained, and evaluated where it evaluates; every rung when it never does),
    where the pruner may stop it; no early stopping of its own (the pruner stops trials), no checkpoints."""
    every = variant.train.eval_steps or rung_steps(variant, tc)
    return apply(variant, values, eval_steps=every, early_stopping_patience=0, checkpoint_steps=0)


def objective_of(tc: TuneConfig, run) -> str:
    """What a search judges its trials by: ``tune.derived_objective`` for a derived variant, else
    ``tune.objective`` (a baseline's prompt search always uses the task metric)."""
    return tc.derived_objective if getattr(run, "parent", None) else tc.objective


# the library code a trial's outcome depends on (training, its stopping, the search and its pruning, the model's
# loading, the prompts, the metrics that judge it): an edit there starts a new study instead of reusing old trials
TRIAL_CODE = (
    "train",
    "search",
    "core/models.py",
    "core/spaces.py",
    "core/techniques.py",
    "core/scoring.py",
    "data/prompts.py",
    "data/examples.py",
    "evaluate/logprobs.py",
    "evaluate/local.py",
)


def trial_code_hash(root=None) -> str:
    """A hash of the TRIAL_CODE files' contents under ``root`` (the library's own folder by default)."""
    from pathlib import Path

    root = Path(root or Path(__file__).resolve().parents[1])
    h = hashlib.sha256()
    for entry in TRIAL_CODE:
        for f in sorted((root / entry).rglob("*.py")) if (root / entry).is_dir() else [root / entry]:
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


def study_name(params: Params, name: str, space: dict, data_hash: str) -> str:
    """One study per (task, variant, its configuration, search space, data, budget, pruner, seed, the code that runs
    a trial): a change to any of them starts a new one, so no trial of other settings or code is reused."""
    run = params.variants[name] if name in params.variants else params.baseline(name)
    blob = json.dumps(
        [
            run,
            space,
            data_hash,
            params.tune.trials,
            params.tune.trial_steps,
            objective_of(params.tune, run),
            params.tune.pruner,
            params.tune.seed,
            trial_code_hash(),
        ]
        + ([params.tune.budget, params.tune.budget_tokens] if params.tune.budget != "trials" else []),
        sort_keys=True,
        default=str,
    )
    return f"{params.task.name}.{name}.{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def token_budget(tc, v) -> tuple[float | None, str | None]:
    """The tokens variant ``v``'s search may train, and where the figure comes from: ``tune.budget_tokens`` under
    ``tune.budget: tokens``; for a derived arm (DPO) under ``budget: trials``, the tokens the search of the arm it
    continues trained (its pruned trials counted as far as they ran), so that it trains no more than that search did
    while its task-metric objective leaves nothing to prune at the rungs; else none."""

    if tc.budget == "tokens":
        return tc.budget_tokens, "tune.budget_tokens"
    if v.parent:
        parent = read_search(v.parent).tune_tokens
        if parent:
            return float(parent), f"{v.parent}'s search"
    return None, None

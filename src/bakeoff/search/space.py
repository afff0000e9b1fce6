"""The tune stage's settings and choices: search spaces, the trial budget, and a variant with its chosen values.
No torch, no Optuna: ``bakeoff.core.config`` reads ``TuneConfig``; the search itself is ``search/trials.py``.

    python stages/tune.py lora                 # writes runs/lora/tuned.json, which train@lora reads
    v, chosen = as_run(params, "lora")       # train@lora's variant: params.yaml's, with the chosen values

Every arm gets the same counted budget: ``tune.trials`` trials, each with the variant's full ``max_steps`` and
schedule (short trials favour high learning rates: a choice is made at the horizon that will be trained). Validation
loss is reported every ``tune.trial_steps`` × max_steps steps, and successive halving (``pruner: halving``) stops a
trial at a rung (that share, then twice it, ...) unless it is in the better half there or within the validation
loss's noise of the rung's best (``trials.beyond_noise``), so only promising trials reach the full length; every step a
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
from dataclasses import asdict, dataclass, field, fields, replace

from bakeoff.core.schema import ParamsError, suggest

# centred by technique on the published figures (Thinking Machines' "LoRA Without Regret"; Biderman et al. 2024):
# LoRA's best rate is ~10× full fine-tuning's; DPO runs one to two orders below supervised fine-tuning
DEFAULT_SPACES = {
    "full": {"lr": {"low": 1.0e-5, "high": 3.0e-4, "log": True}},
    "lora": {"lr": {"low": 1.0e-4, "high": 3.0e-3, "log": True}},
    "qlora": {"lr": {"low": 1.0e-4, "high": 3.0e-3, "log": True}},
    "dpo": {"lr": {"low": 1.0e-6, "high": 1.0e-4, "log": True}},
}


@dataclass(frozen=True)
class TuneConfig:
    trials: int = 0  # trials per variant (0: no search: each variant trains with the values params.yaml gives)
    trial_steps: float = 0.25  # the first rung: every trial is judged after this share of max_steps, and only those
    # in the better half at each rung (×2 steps) go on; survivors train the full max_steps
    objective: str = "val_loss"  # val_loss (the trial's last validation loss) | metric (primary metric on val)
    # a derived variant's objective (DPO from an SFT adapter): its own loss falls as its rate rises while the task
    # can get worse, so by default it is judged on the task metric on validation, never on its loss unseen
    derived_objective: str = "metric"
    # trials: every arm runs `trials` trials | tokens: every arm's search stops once its trials have trained
    # budget_tokens tokens (at most `trials` of them): arms with cheaper trials get more, none gets more tokens
    budget: str = "trials"
    budget_tokens: float | None = None
    pruner: str = "halving"  # halving (successive halving over training steps) | median | none
    storage: str | None = None  # None: sqlite under .bakeoff_tmp/; a database URL shares one study among machines
    seed: int = 0
    spaces: dict = field(default_factory=lambda: json.loads(json.dumps(DEFAULT_SPACES)))  # technique → space
    share: dict = field(default_factory=dict)  # variant → the variant whose search it takes (memory levers only)


def check_spaces(tc: TuneConfig, train_keys: set[str], options_of, variants: list[str]) -> list[tuple[str, str]]:
    """(dotted key, message) for every bad search space (``options_of(technique)`` gives a technique's options) and
    every ``share`` entry of a listed variant that does not name another variant searching on its own."""
    # an entry for a variant that params no longer lists shares nothing and is left alone
    bad = [(f"tune.share.{name}", (f"must name a variant that runs its own search, one of "
                                  f"{', '.join(n for n in variants if n not in tc.share)}; got {other!r}"))
           for name, other in tc.share.items()
           if name in variants and (other not in variants or other in tc.share)]
    for technique, space in tc.spaces.items():
        key = f"tune.spaces.{technique}"
        if not isinstance(space, dict):
            bad.append((key, "must map a parameter to {low, high[, log]} or {choices: [...]}"))
            continue
        for name, spec in space.items():
            k = f"{key}.{name}"
            if name not in train_keys and name not in options_of(technique):
                bad.append((k, f"not a training parameter or a {technique} option"))
            elif not isinstance(spec, dict) or not (("choices" in spec and isinstance(spec["choices"], list)
                                                     and spec["choices"]) or {"low", "high"} <= set(spec)):
                bad.append((k, f"must be {{low, high[, log]}} or {{choices: [...]}}, got {spec!r}"))
            elif "low" in spec and not (isinstance(spec["low"], (int, float)) and spec["high"] > spec["low"]
                                        and (not spec.get("log") or spec["low"] > 0)):
                bad.append((k, f"needs low < high (and low > 0 on a log scale), got {spec!r}"))
    if tc.trials < 0:
        bad.append(("tune.trials", "must be ≥ 0"))
    if not 0 < tc.trial_steps <= 1:
        bad.append(("tune.trial_steps", f"must be in (0, 1], got {tc.trial_steps}"))
    for key, value in (("tune.objective", tc.objective), ("tune.derived_objective", tc.derived_objective)):
        if value not in ("val_loss", "metric"):
            bad.append((key, f"must be val_loss or metric, got {value!r}"))
    if tc.budget not in ("trials", "tokens"):
        bad.append(("tune.budget", f"must be trials or tokens, got {tc.budget!r}"))
    elif tc.budget == "tokens" and not (isinstance(tc.budget_tokens, (int, float)) and tc.budget_tokens > 0):
        bad.append(("tune.budget_tokens", (f"with tune.budget: tokens, must be a positive number of training tokens, "
                                          f"got {tc.budget_tokens!r}")))
    if tc.pruner not in ("median", "halving", "none"):
        bad.append(("tune.pruner", f"must be median, halving or none, got {tc.pruner!r}"))
    return bad


PROMPT_CHECKS = {"shots": lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0,
                 "selection": lambda x: x in ("fixed", "nearest"),
                 "instruction": lambda x: x is None or isinstance(x, str)}


def check_prompt_search(search, key: str) -> list[tuple[str, str]]:
    """(dotted key, message) for a bad prompting search: each of shots, selection, instruction a non-empty list."""
    if search is None:
        return []
    if not isinstance(search, dict) or not search:
        return [(key, "must map shots / selection / instruction to lists of values to try")]
    bad = []
    for k, values in search.items():
        if k not in PROMPT_CHECKS:
            bad.append((f"{key}.{k}", "unknown: a prompting search tries shots, selection and instruction"))
        elif not isinstance(values, list) or not values:
            bad.append((f"{key}.{k}", f"must be a non-empty list, got {values!r}"))
        elif [x for x in values if not PROMPT_CHECKS[k](x)]:
            bad.append((f"{key}.{k}", f"not allowed: {[x for x in values if not PROMPT_CHECKS[k](x)]!r}"))
    return bad


def apply(variant, values: dict, **train_overrides):
    """``variant`` with the chosen ``values`` (training parameters and technique options) and ``train_overrides``."""
    train_keys = {f.name for f in fields(variant.train)}
    train = replace(variant.train, **{k: v for k, v in values.items() if k in train_keys}, **train_overrides)
    options = {**variant.options, **{k: v for k, v in values.items() if k not in train_keys}}
    return replace(variant, train=train, options=options)


def as_run(params, name: str) -> tuple:
    """``(config, values)``: ``name``, a variant or a prompting baseline, as its stage runs it, with the ``values`` its
    tune stage chose on validation (``runs/<name>/tuned.json``; ``{}`` when it was not searched). The search space
    stays in the config, so a report can say what the search tried as well as what it chose."""
    from bakeoff.core import runs

    if name not in params.variants and name not in params.baselines:
        raise ParamsError(f"{params.path}: no variant or baseline named {name!r}"
                          + suggest(name, [*params.variants, *params.baselines]))
    values = (runs.read_json(runs.tuned_record(name)) or {}).get("values") or {}
    if name in params.variants:
        return apply(params.variant(name), values), values
    return replace(params.baseline(name), **values), values


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


def run_identity(variant, tuned: dict) -> dict:
    """What makes two training runs the same run (with the data and the parent's run): the variant as run and the
    chosen values. train@ resumes a checkpoint, or adopts a search's trial, only when this matches."""
    return {"variant": {"technique": variant.technique, "backend": variant.backend, **variant.options},
            "train": asdict(variant.train), "tuned": tuned}


def objective_of(tc: TuneConfig, run) -> str:
    """What a search judges its trials by: ``tune.derived_objective`` for a derived variant, else
    ``tune.objective`` (a baseline's prompt search always uses the task metric)."""
    return tc.derived_objective if getattr(run, "parent", None) else tc.objective


# the library code a trial's outcome depends on (training, its stopping, the search and its pruning, the model's
# loading, the prompts, the metrics that judge it): an edit there starts a new study instead of reusing old trials
TRIAL_CODE = ("train", "search", "core/models.py", "data/prompts.py", "data/examples.py", "evaluate/scoring.py",
              "evaluate/logprobs.py", "evaluate/local.py")


def trial_code_hash(root=None) -> str:
    """A hash of the TRIAL_CODE files' contents under ``root`` (the library's own folder by default)."""
    from pathlib import Path

    root = Path(root or Path(__file__).resolve().parents[1])
    h = hashlib.sha256()
    for entry in TRIAL_CODE:
        for f in sorted((root / entry).rglob("*.py")) if (root / entry).is_dir() else [root / entry]:
            h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:12]


def study_name(params, name: str, space: dict, data_hash: str) -> str:
    """One study per (task, variant, its configuration, search space, data, budget, pruner, seed, the code that runs
    a trial): a change to any of them starts a new one, so no trial of other settings or code is reused."""
    run = params.variants[name] if name in params.variants else params.baseline(name)
    blob = json.dumps([run, space, data_hash, params.tune.trials, params.tune.trial_steps,
                       objective_of(params.tune, run), params.tune.pruner, params.tune.seed, trial_code_hash()]
                      + ([params.tune.budget, params.tune.budget_tokens] if params.tune.budget != "trials" else []),
                      sort_keys=True, default=str)
    return f"{params.task.name}.{name}.{hashlib.sha256(blob.encode()).hexdigest()[:12]}"


def token_budget(tc, v) -> tuple[float | None, str | None]:
    """The tokens variant ``v``'s search may train, and where the figure comes from: ``tune.budget_tokens`` under
    ``tune.budget: tokens``; for a derived arm (DPO) under ``budget: trials``, the tokens the search of the arm it
    continues trained (its pruned trials counted as far as they ran), so that it trains no more than that search did
    while its task-metric objective leaves nothing to prune at the rungs; else none."""
    from bakeoff.core import runs

    if tc.budget == "tokens":
        return tc.budget_tokens, "tune.budget_tokens"
    if v.parent:
        parent = (runs.read_json(runs.tuned_record(v.parent)) or {}).get("tune_tokens")
        if parent:
            return float(parent), f"{v.parent}'s search"
    return None, None

"""The search's settings and a run's chosen ones: ``tune:`` (``TuneConfig``, its search spaces and their checks), a
prompting search's choices, and a variant or baseline as its stage runs it, with the values its search chose on
validation (``as_run``). No torch, no Optuna: the params schema reads it, and every room that runs a run.

    v, chosen = as_run(params, "lora")       # train@lora's variant: params.yaml's, with the chosen values
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace

from bakeoff.core.schema import ParamsError, suggest
from bakeoff.core.techniques import FACTS

DEFAULT_SPACES = {t: f.space for t, f in FACTS.items()}  # each technique's (bakeoff.core.techniques.FACTS)


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
    bad = [
        (
            f"tune.share.{name}",
            (
                f"must name a variant that runs its own search, one of "
                f"{', '.join(n for n in variants if n not in tc.share)}; got {other!r}"
            ),
        )
        for name, other in tc.share.items()
        if name in variants and (other not in variants or other in tc.share)
    ]
    for technique, space in tc.spaces.items():
        key = f"tune.spaces.{technique}"
        if not isinstance(space, dict):
            bad.append((key, "must map a parameter to {low, high[, log]} or {choices: [...]}"))
            continue
        for name, spec in space.items():
            k = f"{key}.{name}"
            if name not in train_keys and name not in options_of(technique):
                bad.append((k, f"not a training parameter or a {technique} option"))
            elif not isinstance(spec, dict) or not (
                ("choices" in spec and isinstance(spec["choices"], list) and spec["choices"])
                or {"low", "high"} <= set(spec)
            ):
                bad.append((k, f"must be {{low, high[, log]}} or {{choices: [...]}}, got {spec!r}"))
            elif "low" in spec and not (
                isinstance(spec["low"], (int, float))
                and spec["high"] > spec["low"]
                and (not spec.get("log") or spec["low"] > 0)
            ):
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
        bad.append(
            (
                "tune.budget_tokens",
                (f"with tune.budget: tokens, must be a positive number of training tokens, got {tc.budget_tokens!r}"),
            )
        )
    if tc.pruner not in ("median", "halving", "none"):
        bad.append(("tune.pruner", f"must be median, halving or none, got {tc.pruner!r}"))
    return bad


SELECTIONS = ("fixed", "nearest", "nearest_dense", "hybrid")  # how a prompt's shots are chosen (bakeoff.data.prompts)
PROMPT_CHECKS = {
    "shots": lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0,
    "selection": lambda x: x in SELECTIONS,
    "instruction": lambda x: x is None or isinstance(x, str),
    "passages": lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0,
    "chunk_words": lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 20,
}


def check_prompt_search(search, key: str) -> list[tuple[str, str]]:
    """(dotted key, message) for a bad prompting search: each of shots, selection, instruction a non-empty list."""
    if search is None:
        return []
    if not isinstance(search, dict) or not search:
        return [(key, "must map shots / selection / instruction to lists of values to try")]
    bad = []
    for k, values in search.items():
        if k not in PROMPT_CHECKS:
            bad.append(
                (
                    f"{key}.{k}",
                    "unknown: a prompting search tries shots, selection, instruction, passages and chunk_words",
                )
            )
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
    stays in the config, so a report can say what the search tried as well as what it chose. (``params``: the
    ``Params`` of ``bakeoff.core.sections``, which imports this module, so the name is not written here.)"""
    from bakeoff.core.records import read_search

    if name not in params.variants and name not in params.baselines:
        raise ParamsError(
            f"{params.path}: no variant or baseline named {name!r}"
            + suggest(name, [*params.variants, *params.baselines])
        )
    values = read_search(name).values
    if name in params.variants:
        return apply(params.variant(name), values), values
    return replace(params.baseline(name), **values), values


def run_identity(variant, tuned: dict) -> dict:
    """What makes two training runs the same run (with the data and the parent's run): the variant as run and the
    chosen values. train@ resumes a checkpoint, or adopts a search's trial, only when this matches."""
    passages = getattr(variant, "passages", 0)  # a variant asked with passages: which, and RAFT's share
    retrieval = {"passages": passages, "chunk_words": variant.chunk_words, "raft": variant.raft} if passages else {}
    return {
        "variant": {"technique": variant.technique, "backend": variant.backend, **variant.options, **retrieval},
        "train": asdict(variant.train),
        "tuned": tuned,
    }

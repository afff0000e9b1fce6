"""Reading params.yaml: every section built into its dataclass (``bakeoff.core.sections``) and checked.

    from bakeoff.core.config import load_params
    p = load_params("params.yaml")
    p.variant("lora").train.lr

Every error names the file, the line and the dotted key at fault, for example
``params.yaml:42: variants.lora.rank: unknown key (did you mean 'r'?)``.
"""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path

import yaml

from bakeoff.core import techniques as technique_options
from bakeoff.core.runs import repo_root
from bakeoff.core.schema import (
    ParamsError,
    Source,
    build,
    check,
    check_endpoint,
    check_export,
    check_no_password,
    check_sizing,
    check_tracking_uri,
    key_lines,
    renamed,
    suggest,
)
from bakeoff.core.scoring import METRICS
from bakeoff.core.sections import (
    CURVE_ROLES,
    BaselineConfig,
    CostConfig,
    CurveConfig,
    EvalConfig,
    ExportConfig,
    ModelConfig,
    Params,
    SizingConfig,
    TaskConfig,
    TrackingConfig,
    TrainConfig,
    VariantConfig,
    VerdictConfig,
)
from bakeoff.core.spaces import TuneConfig, check_prompt_search, check_spaces

ATTENTION = ("auto", "eager_fp32", "eager", "sdpa", "flash_attention_2", "flex_attention")  # bakeoff.train.kernels
LOSS_LOGITS = ("auto", "labelled", "all")
OPTIMIZERS = ("adamw_torch_fused", "adamw_torch", "adamw_8bit", "paged_adamw_8bit")
BATCHING = ("padded", "group_by_length", "padding_free", "sequential")  # TrainConfig.batching
SECTIONS = ("model", "task", "train_defaults", "eval", "baselines", "variants", "derived", "tune", "tracking",
            "verdict", "cost", "sizing", "export", "curve")
_TRAIN_KEYS = {f.name for f in fields(TrainConfig)}


def _check_train(t: TrainConfig, key: str, src: Source) -> None:
    for k in ("max_steps", "lr", "micro_batch", "processes", "max_seq_len", "seeds"):
        check(getattr(t, k) > 0, src, f"{key}.{k}", f"must be > 0, got {getattr(t, k)}")
    check(t.effective_batch % (t.micro_batch * t.processes) == 0 and t.effective_batch > 0, src,
           f"{key}.effective_batch", f"must be a positive multiple of micro_batch × processes "
           f"({t.micro_batch} × {t.processes}), got {t.effective_batch}")
    for k in ("checkpoint_steps", "eval_steps", "early_stopping_noise"):
        check(getattr(t, k) >= 0, src, f"{key}.{k}", f"must be ≥ 0, got {getattr(t, k)}")
    check(0 <= t.early_stopping_patience <= 1, src, f"{key}.early_stopping_patience", "is a share of max_steps in [0, "
                                                                                      "1] "
          f"(0.3: stop after 30% of the run without a real improvement; 0: never), got {t.early_stopping_patience}")
    check(t.seeds == 1 or t.processes == 1, src, f"{key}.seeds", "several seeds train in one process: set "
          f"processes: 1 or seeds: 1 (got seeds {t.seeds}, processes {t.processes})")
    check(0 <= t.improving_drop < 1, src, f"{key}.improving_drop", f"must be in [0, 1), got {t.improving_drop}")
    for k, allowed in (("precision", ("auto", "fp32", "bf16", "fp16")), ("optimizer", OPTIMIZERS),
                       ("attention", ATTENTION), ("loss_logits", LOSS_LOGITS),
                       ("batching", BATCHING)):
        check(getattr(t, k) in allowed, src, f"{key}.{k}",
              f"must be one of {', '.join(allowed)}; got {getattr(t, k)!r}")
    check(t.gradient_checkpointing in (True, False, "auto"), src, f"{key}.gradient_checkpointing",
          f"must be true, false or auto; got {t.gradient_checkpointing!r}")
    check(t.memory_budget_gb is None or t.memory_budget_gb > 0, src, f"{key}.memory_budget_gb",
          f"must be > 0 (or null), got {t.memory_budget_gb}")


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _check_name(name, key: str, src: Source) -> None:
    """A run name becomes a folder (runs/<name>, models/variants/<name>): nothing that leaves the repository."""
    check(isinstance(name, str) and _NAME.fullmatch(name) is not None and ".." not in name, src, key,
           f"{name!r} is not a usable run name: letters, digits, '_', '-', '.', starting with a letter or digit "
           "(it becomes a folder under runs/ and models/variants/)")


def _variant(section: str, name: str, v, train: TrainConfig, src: Source) -> VariantConfig:
    key = f"{section}.{name}"
    _check_name(name, key, src)
    if not isinstance(v, dict):
        raise src.error(key, "expected a mapping with at least 'technique'")
    if "technique" not in v:
        raise src.error(key, f"missing 'technique' (one of {', '.join(technique_options.names())})")
    technique = v["technique"]
    if technique not in technique_options.names():
        raise src.error(f"{key}.technique", f"unknown technique {technique!r}" + suggest(str(technique),
                                                                                         technique_options.names()))
    overrides = {k: val for k, val in v.items() if k in _TRAIN_KEYS}
    merged = {**{f.name: getattr(train, f.name) for f in fields(TrainConfig)}, **overrides}
    vtrain = build(TrainConfig, merged, key, src)
    _check_train(vtrain, key, src)
    tech_defaults = technique_options.defaults(technique)
    options = {}
    for k, val in v.items():
        if k in _TRAIN_KEYS or k in ("technique", "backend"):
            continue
        if k not in tech_defaults:
            raise src.error(f"{key}.{k}", f"unknown option for technique {technique!r}"
                            + suggest(str(k), list(tech_defaults) + sorted(_TRAIN_KEYS)))
        options[k] = val
    options = {**tech_defaults, **options}
    for okey, msg in technique_options.check(technique, options):
        raise src.error(f"{key}.{okey}", msg)
    backend = v.get("backend", "hf")
    check(backend in ("hf", "unsloth"), src, f"{key}.backend", f"must be hf or unsloth; got {backend!r}")
    unsloth = [t for t, f in technique_options.FACTS.items() if f.unsloth]
    check(backend == "hf" or technique in unsloth, src, f"{key}.backend",
          f"unsloth runs {' and '.join(unsloth)} variants, not {technique!r}")
    parent = options.get("init_from")
    if section == "variants" and parent is not None:
        raise src.error(key, f"a {technique} variant starts from another variant's output: put it under "
                             f"`derived:` so DVC trains {parent!r} first")
    if section == "derived" and parent is None:
        raise src.error(key, f"a `derived:` variant needs init_from (technique {technique!r} has none)")
    return VariantConfig(name=name, technique=technique, train=vtrain, backend=backend, options=options,
                         parent=parent)


def _task(raw, src: Source) -> TaskConfig:
    task = build(TaskConfig, raw, "task", src)
    check(task.format in ("auto", "jsonl", "csv", "parquet"), src, "task.format",
           f"must be auto, jsonl, csv or parquet; got {task.format!r}")
    check(task.metric in METRICS, src, "task.metric", f"unknown metric {task.metric!r}" + suggest(task.metric,
                                                                                                  list(METRICS)))
    check(task.max_new_tokens == "auto" or (isinstance(task.max_new_tokens, int) and task.max_new_tokens > 0), src,
          "task.max_new_tokens", f"must be a positive number of tokens or auto, got {task.max_new_tokens!r}")
    for k, allowed in (("overlong", ("truncate", "drop")), ("duplicates", ("drop", "keep", "error")),
                       ("leakage", ("drop", "keep", "error"))):
        check(getattr(task, k) in allowed, src, f"task.{k}",
              f"must be one of {', '.join(allowed)}; got {getattr(task, k)!r}")
    for key, size, own in (("val_size", task.val_size, task.val), ("test_size", task.test_size, task.test)):
        number = isinstance(size, (int, float)) and not isinstance(size, bool)
        auto = " or auto" if key == "val_size" else ""
        empty = "nothing to choose winners on" if key == "val_size" else "nothing to score"
        check(own or size == "auto" and auto or number and 0 < size and (size < 1 or size == int(size)), src,
              f"task.{key}", f"must be a fraction in (0, 1) or a whole count ≥ 1{auto}; got {size!r} (an empty "
              f"{key[:-5]} split would leave {empty})")
    check(task.labels is None or (isinstance(task.labels, str) and task.labels.strip() != "")
          or (isinstance(task.labels, list) and task.labels and all(isinstance(x, str) for x in task.labels)),
          src, "task.labels", f"must be a list of strings, auto, a file of labels (one a line) or null; "
                              f"got {task.labels!r}")
    _check_template(task, src)
    _check_prefs(task, src)
    return task


SHIPPED = {"train": "data/raw/tickets.jsonl", "prefs": "data/raw/prefs.jsonl"}  # the default task's own files


def _check_prefs(task: TaskConfig, src: Source) -> None:
    """The shipped preference pairs belong to the shipped tickets task: with another train file, DPO would learn
    another task's preferences in silence."""
    def norm(p):
        return Path(p).as_posix().removeprefix("./") if isinstance(p, str) else p

    check(not (norm(task.prefs) == SHIPPED["prefs"] and norm(task.train) != SHIPPED["train"]), src, "task.prefs",
          f"is the shipped tickets task's preference pairs ({SHIPPED['prefs']}), but task.train is {task.train}: "
          "dpo would train on another task's pairs. Set task.prefs: null (dpo is then skipped) or point it at "
          "your own pairs (their columns: task.prefs_columns)")


ANSWER_FIELDS = ("completion", "output", "chosen", "rejected")  # the answer's columns in the formats bakeoff reads


def _check_template(task: TaskConfig, src: Source) -> None:
    """``task.prompt_template``: well formed (a literal brace doubled), and naming no answer column, which would copy
    each row's reference answer into its own prompt (every arm then scores on a leak)."""
    import string

    if task.prompt_template is None:
        return
    check(isinstance(task.prompt_template, str), src, "task.prompt_template",
          f"must be a string such as 'Classify: {{prompt}}'; got {task.prompt_template!r}")
    try:
        names = {f.split(".")[0].split("[")[0] for _, f, _, _ in string.Formatter().parse(task.prompt_template)
                 if f is not None}
    except ValueError as e:
        raise src.error("task.prompt_template", f"is not a valid template ({e}): fields are {{column}}, and a "
                                                "literal brace is written {{ or }}") from None
    columns = task.columns if isinstance(task.columns, dict) else {}
    answers = {*ANSWER_FIELDS, *(columns.get(k) for k in ANSWER_FIELDS if columns.get(k))}
    leak = sorted(n for n in names if n in answers)
    check(not leak, src, "task.prompt_template",
          f"names {', '.join(repr(x) for x in leak)}, the answer's column: every prompt would carry its own "
          "reference answer and every arm would score on the leak; name only input columns ({prompt} and others)")


def _eval(raw, src: Source) -> EvalConfig:
    ev = build(EvalConfig, raw, "eval", src)
    check(ev.batch_size > 0, src, "eval.batch_size", "must be > 0")
    check(ev.dtype in ("auto", "fp32", "bf16", "fp16"), src, "eval.dtype",
          f"must be one of auto, fp32, bf16, fp16; got {ev.dtype!r}")
    check(ev.latency_requests >= 0, src, "eval.latency_requests", "must be ≥ 0")
    check(ev.bootstrap_resamples >= 100, src, "eval.bootstrap_resamples", "must be ≥ 100")
    check(isinstance(ev.lm_eval_tasks, list) and all(isinstance(x, str) for x in ev.lm_eval_tasks), src,
           "eval.lm_eval_tasks", f"must be a list of lm-eval task names, got {ev.lm_eval_tasks!r}")
    mode = ({True: "reuse", False: "off"}[ev.lm_eval] if isinstance(ev.lm_eval, bool) else ev.lm_eval)
    check(mode in ("reuse", "generate", "off"), src, "eval.lm_eval",
          f"must be reuse, generate or off; got {ev.lm_eval!r}")
    return replace(ev, lm_eval=mode)


def parse_params(raw: dict, src: Source) -> Params:
    if not isinstance(raw, dict):
        raise src.error("(top)", "params must be a mapping")
    for k in raw:
        if k not in SECTIONS:
            raise src.error(str(k), "unknown section" + suggest(str(k), list(SECTIONS)))
    model = build(ModelConfig, raw.get("model"), "model", src)
    task = _task(raw.get("task"), src)
    train = build(TrainConfig, raw.get("train_defaults"), "train_defaults", src)
    _check_train(train, "train_defaults", src)
    ev = _eval(raw.get("eval"), src)

    baselines = {}
    for name, b in (raw.get("baselines") or {}).items():
        _check_name(name, f"baselines.{name}", src)
        obj = build(BaselineConfig, {"name": name, **(b or {})}, f"baselines.{name}", src)
        check(obj.shots >= 0, src, f"baselines.{name}.shots", "must be ≥ 0")
        check(obj.selection in ("fixed", "nearest"), src, f"baselines.{name}.selection",
               f"must be fixed or nearest; got {obj.selection!r}")
        for key, msg in check_prompt_search(obj.search, f"baselines.{name}.search"):
            raise src.error(key, msg)
        for key, msg in check_endpoint(obj, f"baselines.{name}"):
            raise src.error(key, msg)
        baselines[name] = obj

    variants = {}
    for section in ("variants", "derived"):
        for name, v in (raw.get(section) or {}).items():
            if name in variants or name in baselines:
                raise src.error(f"{section}.{name}", "this name is already used by another baseline or variant")
            variants[name] = _variant(section, name, v, train, src)
    for name, v in variants.items():
        if v.parent is not None:
            parent = variants.get(v.parent)
            if parent is None or parent.parent is not None:
                raise src.error(f"derived.{name}.init_from", f"{v.parent!r} is not a variant of `variants:`"
                                + suggest(str(v.parent), [n for n, x in variants.items() if x.parent is None]))

    tracking = build(TrackingConfig, raw.get("tracking"), "tracking", src)
    check_tracking_uri(tracking.uri, src, repo_root())
    verdict = _verdict(raw, src)
    cost = build(CostConfig, raw.get("cost"), "cost", src)
    check(cost.usd_per_1k_prompt_tokens >= 0, src, "cost.usd_per_1k_prompt_tokens", "must be ≥ 0")
    sizing = build(SizingConfig, renamed(raw.get("sizing"), "sizing", RENAMED_SIZING, src,
                                       "it sizes the target card, not this run's training"), "sizing", src)
    check_sizing(sizing, src, cost.serve_gpu)
    tune = build(TuneConfig, raw.get("tune"), "tune", src)
    check_no_password(tune.storage, "tune.storage", src)
    for key, msg in check_spaces(tune, _TRAIN_KEYS, lambda t: technique_options.defaults(t)
                                 if t in technique_options.names()
                                 else {}, list(variants)):
        raise src.error(key, msg)
    export = build(ExportConfig, raw.get("export"), "export", src)
    check_export(export, list(variants), src)
    curve = _curve(raw, baselines, variants, src)
    return Params(model=model, task=task, train_defaults=train, eval=ev, baselines=baselines, variants=variants,
                  tracking=tracking, verdict=verdict, cost=cost, sizing=sizing, tune=tune, export=export, curve=curve,
                  path=src.path)


def _verdict(raw: dict, src: Source) -> VerdictConfig:
    """The verdict's margins, each a share of the primary metric: ``min_gain`` in [0, 1), ``max_loss`` in (0, 1)."""
    verdict = build(VerdictConfig, raw.get("verdict"), "verdict", src)
    for key, x, lo_ok in (("min_gain", verdict.min_gain, True), ("max_loss", verdict.max_loss, False)):
        ok = isinstance(x, (int, float)) and not isinstance(x, bool) and (0 <= x < 1 if lo_ok else 0 < x < 1)
        check(ok, src, f"verdict.{key}", f"must be a share of the primary metric in {'[0' if lo_ok else '(0'}, 1) "
              f"(0.02 = 2 points), got {x!r}")
    return verdict


CURVE_OFF = ("dvc.yaml makes the curve stages from curve.arms × curve.fractions, so it needs both: write "
             "`curve: {fractions: []}` to turn the data-value curve off")


def _curve(raw: dict, baselines: dict, variants: dict, src: Source) -> CurveConfig | None:
    """The data-value curve's section (absent: the defaults); ``fractions: []`` turns it off (None)."""
    if "curve" in raw and raw["curve"] is None:
        raise src.error("curve", CURVE_OFF)
    c = build(CurveConfig, raw.get("curve"), "curve", src)
    check(isinstance(c.arms, list) and c.arms, src, "curve.arms",
          f"a list of {' or '.join(CURVE_ROLES)}, or variant and baseline names; got {c.arms!r}")
    names = [*CURVE_ROLES, *variants, *baselines]
    for a in c.arms:
        check(a in names, src, "curve.arms", f"{a!r} is neither a role ({', '.join(CURVE_ROLES)}) nor a variant or "
              "baseline" + suggest(str(a), names))
    check(isinstance(c.fractions, list) and all(isinstance(f, (int, float)) and not isinstance(f, bool)
                                                 and 0 < f < 1 for f in c.fractions), src, "curve.fractions",
          f"shares of the training split, each in (0, 1) (1.0 is the arm's own run); got {c.fractions!r}")
    check(len(set(c.fractions)) == len(c.fractions), src, "curve.fractions", f"a share is listed twice: {c.fractions}")
    check(c.schedule in ("steps", "epochs"), src, "curve.schedule", f"must be steps or epochs; got {c.schedule!r}")
    check(c.min_steps >= 1, src, "curve.min_steps", f"must be ≥ 1, got {c.min_steps}")
    check(c.resamples >= 100, src, "curve.resamples", f"must be ≥ 100, got {c.resamples}")
    return c if c.fractions else None


def dvc_needs(raw: dict, path: str) -> str | None:
    """What dvc.yaml reads from params.yaml to make its stages and this one lacks (None: nothing), said with the fix:
    DVC would stop on it with only "Could not find 'curve.arms'"."""
    c = raw.get("curve") if isinstance(raw, dict) else None
    if not isinstance(c, dict) or "arms" not in c or "fractions" not in c:
        return (f"{path}: curve: missing or incomplete ({CURVE_OFF}; the default: `curve: {{arms: [recommended, "
                "best_prompt], fractions: [0.125, 0.25, 0.5]}}`)")
    return None


# old name → new name; the old ones still work, with a warning naming the line
RENAMED_SIZING = {"seq_len": "target_seq_len", "micro_batch": "target_micro_batch"}


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path}: file not found")
    text = path.read_text()
    try:
        raw = yaml.safe_load(text) or {}
        lines = key_lines(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ParamsError(f"{where}: not valid YAML: {getattr(e, 'problem', e)}") from None
    return parse_params(raw, Source(str(path), lines))


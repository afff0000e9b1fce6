"""The typed schema of params.yaml and its validation.

    from bakeoff.config import load_params
    p = load_params("params.yaml")
    p.variant("lora").train.lr

Every error names the file, the line and the dotted key at fault, for example
``params.yaml:42: variants.lora.rank: unknown key (did you mean 'r'?)``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from bakeoff.errors import UserError


class ParamsError(UserError):
    """A params.yaml value that cannot be used; the message names file, line and key."""


def _key_lines(text: str) -> dict[str, int]:
    """Map every dotted key of a YAML document to its 1-based line."""
    lines: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                key = f"{prefix}.{k.value}" if prefix else str(k.value)
                lines[key] = k.start_mark.line + 1
                walk(v, key)

    root = yaml.compose(text)
    if root is not None:
        walk(root, "")
    return lines


class _Source:
    """Where params came from, to point errors at a line."""

    def __init__(self, path: str, lines: dict[str, int]):
        self.path, self.lines = path, lines

    def error(self, key: str, msg: str) -> ParamsError:
        probe = key
        while probe and probe not in self.lines:
            probe = probe.rpartition(".")[0]
        where = f"{self.path}:{self.lines[probe]}" if probe else self.path
        return ParamsError(f"{where}: {key}: {msg}")


# names users bring from PEFT, TRL and other tools → ours
_SYNONYMS = {"rank": "r", "lora_r": "r", "lora_alpha": "alpha", "lora_dropout": "dropout",
             "target_modules": "targets", "learning_rate": "lr", "batch_size": "micro_batch",
             "per_device_train_batch_size": "micro_batch", "max_length": "max_seq_len", "optim": "optimizer"}


def _suggest(name: str, known: list[str]) -> str:
    close = [_SYNONYMS[name]] if _SYNONYMS.get(name) in known else difflib.get_close_matches(name, known, n=1)
    return f" (did you mean '{close[0]}'?)" if close else f" (known: {', '.join(sorted(known))})"


def _build(cls, raw: Any, key: str, src: _Source):
    """Build dataclass ``cls`` from a mapping, checking every key and type."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise src.error(key, f"expected a mapping, got {type(raw).__name__}")
    known = {f.name: f for f in fields(cls) if not f.name.startswith("_")}
    values = {}
    for k, v in raw.items():
        if k not in known:
            raise src.error(f"{key}.{k}", "unknown key" + _suggest(str(k), list(known)))
        values[k] = _coerce(v, known[k].type, f"{key}.{k}", src)
    return cls(**values)


_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def _coerce(v: Any, typ: Any, key: str, src: _Source) -> Any:
    t = str(typ).replace(" ", "")
    optional = "None" in t
    base = t.split("|")[0]
    if v is None:
        if optional:
            return None
        raise src.error(key, "must not be empty")
    want = _TYPES.get(base)
    if want is None:  # dict, list: checked by the consumer
        return v
    if want is float and isinstance(v, int) and not isinstance(v, bool):
        return float(v)
    if want is float and isinstance(v, str):  # YAML reads 1e-3 (without a dot) as a string
        try:
            return float(v)
        except ValueError:
            pass
    if not isinstance(v, want) or (want is int and isinstance(v, bool)):
        raise src.error(key, f"expected {base}, got {v!r}")
    return v


def _check(cond: bool, src: _Source, key: str, msg: str) -> None:
    if not cond:
        raise src.error(key, msg)


@dataclass(frozen=True)
class ModelConfig:
    base: str = "smollm2-135m-instruct"  # alias, local folder or hub id
    dtype: str = "auto"  # dtype the weights are stored in: auto | float32 | bfloat16 | float16
    trust_remote_code: bool = False


@dataclass(frozen=True)
class TaskConfig:
    name: str = "task"
    train: str = "data/raw/train.jsonl"
    val: str | None = None
    test: str | None = None
    prefs: str | None = None
    format: str = "auto"  # auto | jsonl | csv | parquet
    columns: dict = field(default_factory=dict)  # canonical name → the user's column
    prompt_template: str | None = None  # e.g. "Classify the review: {prompt}"
    system_prompt: str | None = None
    val_size: float = 0.1  # < 1: a fraction of train; ≥ 1: a count
    test_size: float = 0.1
    metric: str = "exact_match"
    labels: list | None = None  # closed label set for accuracy / macro-F1 (None: the distinct train answers)
    max_new_tokens: int = 48
    seed: int = 0
    overlong: str = "truncate"  # rows longer than train_defaults.max_seq_len: truncate (counted) | drop
    duplicates: str = "drop"  # the same prompt and answer twice: drop (reported) | keep | error
    leakage: str = "drop"  # a test or val prompt also in train: drop it from train (reported) | keep | error


@dataclass(frozen=True)
class TrainConfig:
    max_steps: int = 60
    effective_batch: int = 16
    micro_batch: int = 8
    lr: float = 1e-3
    lr_scheduler: str = "linear"
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    max_seq_len: int = 256
    precision: str = "auto"  # auto | fp32 | bf16 | fp16
    optimizer: str = "adamw_torch"
    gradient_checkpointing: bool = False
    batching: str = "padded"  # padded | group_by_length | padding_free
    memory_budget_gb: float | None = None  # stand-in for a card's memory: passing it ends the run as `oom`
    seed: int = 0
    logging_steps: int = 5
    warmup_steps_excluded: int = 2  # steps left out of the steady-state speed
    checkpoint_steps: int = 0  # save a resumable checkpoint every N steps (0: none)
    processes: int = 1  # training processes (DDP): torchrun on CPU, accelerate launch on GPUs
    accelerate_config: str | None = None  # accelerate config file for several GPUs (FSDP, DeepSpeed), e.g.
    #                                      configs/accelerate/fsdp.yaml

    @property
    def grad_accum(self) -> int:
        return self.effective_batch // (self.micro_batch * self.processes)


@dataclass(frozen=True)
class EvalConfig:
    batch_size: int = 16
    max_examples: int | None = None  # cap the test split (None: all of it)
    latency_requests: int = 16  # requests timed one at a time for latency p50/p95 (0: none)
    lm_eval: bool = True  # score the test split through lm-evaluation-harness too
    lm_eval_tasks: list = field(default_factory=list)  # standard lm-eval tasks (forgetting check)
    lm_eval_limit: int | None = 100  # examples per standard task (None: all)
    bootstrap_resamples: int = 2000


@dataclass(frozen=True)
class BaselineConfig:
    name: str
    shots: int = 0
    selection: str = "fixed"  # fixed: the same k shots for every item | nearest: the k most similar (TF-IDF)
    instruction: str | None = None  # a system prompt for this baseline only (after task.system_prompt)


@dataclass(frozen=True)
class VariantConfig:
    name: str
    technique: str
    train: TrainConfig
    backend: str = "hf"
    options: dict = field(default_factory=dict)  # technique-specific, validated by the technique
    parent: str | None = None  # for `derived:` variants: the variant whose output this one starts from


@dataclass(frozen=True)
class TrackingConfig:
    uri: str | None = None  # None: the sqlite store at the repo root; MLFLOW_TRACKING_URI wins
    experiment: str | None = None  # None: the task's name


@dataclass(frozen=True)
class VerdictConfig:
    min_gain: float = 0.02  # the smallest gain in the primary metric worth fine-tuning for (0.02 = 2 points)


@dataclass(frozen=True)
class CostConfig:
    usd_per_1k_prompt_tokens: float = 0.0  # what a prompt token costs you to serve (your price, per 1,000)
    train_tokens: float | None = None  # tokens of a real training run (None: what this run's variant saw)


@dataclass(frozen=True)
class SizingConfig:
    target: str | None = None  # the model you will really fine-tune: one of targets (None: the first)
    targets: list = field(default_factory=list)  # [{name, layers, hidden, intermediate, heads, kv_heads, vocab, tied}]
    gpus: list = field(default_factory=list)  # [{name, memory_gb, usd_per_hour, bf16_tflops}]
    margin: float = 0.1  # share of a card's memory kept free
    mfu: float = 0.3  # assumed model FLOP utilisation for time estimates (measure yours: benchmarks/gpu.py)
    seq_len: int | None = None  # tokens per row on the target (None: the variant's max_seq_len)
    micro_batch: int | None = None  # rows per forward pass on the target (None: the variant's)
    cuda_overhead_gb: float = 1.0  # CUDA context and library workspaces, per process


@dataclass(frozen=True)
class Params:
    model: ModelConfig
    task: TaskConfig
    train_defaults: TrainConfig
    eval: EvalConfig
    baselines: dict[str, BaselineConfig]
    variants: dict[str, VariantConfig]
    tracking: TrackingConfig
    verdict: VerdictConfig = VerdictConfig()
    cost: CostConfig = CostConfig()
    sizing: SizingConfig = SizingConfig()
    path: str = "params.yaml"

    def variant(self, name: str) -> VariantConfig:
        if name not in self.variants:
            raise ParamsError(f"{self.path}: variants.{name}: no such variant" + _suggest(name, list(self.variants)))
        return self.variants[name]

    def baseline(self, name: str) -> BaselineConfig:
        if name not in self.baselines:
            raise ParamsError(f"{self.path}: baselines.{name}: no such baseline" + _suggest(name, list(self.baselines)))
        return self.baselines[name]


OPTIMIZERS = ("adamw_torch", "adamw_8bit", "paged_adamw_8bit")
SECTIONS = ("model", "task", "train_defaults", "eval", "baselines", "variants", "derived", "tracking", "verdict",
            "cost", "sizing")
_SHAPE_KEYS = ("name", "layers", "hidden", "intermediate", "heads", "kv_heads", "vocab")
_GPU_KEYS = ("name", "memory_gb", "usd_per_hour", "bf16_tflops")
_TRAIN_KEYS = {f.name for f in fields(TrainConfig)}


def _check_train(t: TrainConfig, key: str, src: _Source) -> None:
    _check(t.max_steps > 0, src, f"{key}.max_steps", f"must be > 0, got {t.max_steps}")
    _check(t.lr > 0, src, f"{key}.lr", f"must be > 0, got {t.lr}")
    _check(t.micro_batch > 0, src, f"{key}.micro_batch", f"must be > 0, got {t.micro_batch}")
    _check(t.processes > 0, src, f"{key}.processes", f"must be > 0, got {t.processes}")
    _check(t.effective_batch % (t.micro_batch * t.processes) == 0 and t.effective_batch > 0, src,
           f"{key}.effective_batch", f"must be a positive multiple of micro_batch × processes "
           f"({t.micro_batch} × {t.processes}), got {t.effective_batch}")
    _check(t.checkpoint_steps >= 0, src, f"{key}.checkpoint_steps", f"must be ≥ 0, got {t.checkpoint_steps}")
    _check(t.max_seq_len > 0, src, f"{key}.max_seq_len", f"must be > 0, got {t.max_seq_len}")
    _check(t.precision in ("auto", "fp32", "bf16", "fp16"), src, f"{key}.precision",
           f"must be one of auto, fp32, bf16, fp16; got {t.precision!r}")
    _check(t.optimizer in OPTIMIZERS, src, f"{key}.optimizer",
           f"must be one of {', '.join(OPTIMIZERS)}; got {t.optimizer!r}")
    _check(t.batching in ("padded", "group_by_length", "padding_free", "sequential"), src, f"{key}.batching",
           f"must be padded, group_by_length, padding_free or sequential; got {t.batching!r}")
    _check(t.memory_budget_gb is None or t.memory_budget_gb > 0, src, f"{key}.memory_budget_gb",
           f"must be > 0 (or null), got {t.memory_budget_gb}")


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _check_name(name, key: str, src: _Source) -> None:
    """A run name becomes a folder (runs/<name>, models/variants/<name>): nothing that leaves the repository."""
    _check(isinstance(name, str) and _NAME.fullmatch(name) is not None and ".." not in name, src, key,
           f"{name!r} is not a usable run name: letters, digits, '_', '-', '.', starting with a letter or digit "
           "(it becomes a folder under runs/ and models/variants/)")


def _variant(section: str, name: str, v, train: TrainConfig, src: _Source) -> VariantConfig:
    from bakeoff.techniques import get_technique, technique_names

    key = f"{section}.{name}"
    _check_name(name, key, src)
    if not isinstance(v, dict):
        raise src.error(key, "expected a mapping with at least 'technique'")
    if "technique" not in v:
        raise src.error(key, f"missing 'technique' (one of {', '.join(technique_names())})")
    technique = v["technique"]
    if technique not in technique_names():
        raise src.error(f"{key}.technique", f"unknown technique {technique!r}" + _suggest(str(technique), technique_names()))
    overrides = {k: val for k, val in v.items() if k in _TRAIN_KEYS}
    merged = {**{f.name: getattr(train, f.name) for f in fields(TrainConfig)}, **overrides}
    vtrain = _build(TrainConfig, merged, key, src)
    _check_train(vtrain, key, src)
    tech = get_technique(technique)
    options = {}
    for k, val in v.items():
        if k in _TRAIN_KEYS or k in ("technique", "backend"):
            continue
        if k not in tech.defaults:
            raise src.error(f"{key}.{k}", f"unknown option for technique {technique!r}"
                            + _suggest(str(k), list(tech.defaults) + sorted(_TRAIN_KEYS)))
        options[k] = val
    options = {**tech.defaults, **options}
    for okey, msg in tech.validate(options):
        raise src.error(f"{key}.{okey}", msg)
    backend = v.get("backend", "hf")
    _check(backend in ("hf", "unsloth"), src, f"{key}.backend", f"must be hf or unsloth; got {backend!r}")
    _check(backend == "hf" or technique in ("lora", "qlora"), src, f"{key}.backend",
           f"unsloth runs lora and qlora variants, not {technique!r}")
    parent = options.get("init_from")
    if section == "variants" and parent is not None:
        raise src.error(key, f"a {technique} variant starts from another variant's output: put it under "
                             f"`derived:` so DVC trains {parent!r} first")
    if section == "derived" and parent is None:
        raise src.error(key, f"a `derived:` variant needs init_from (technique {technique!r} has none)")
    return VariantConfig(name=name, technique=technique, train=vtrain, backend=backend, options=options,
                         parent=parent)


def parse_params(raw: dict, src: _Source) -> Params:
    if not isinstance(raw, dict):
        raise src.error("(top)", "params must be a mapping")
    for k in raw:
        if k not in SECTIONS:
            raise src.error(str(k), "unknown section" + _suggest(str(k), list(SECTIONS)))
    model = _build(ModelConfig, raw.get("model"), "model", src)
    task = _build(TaskConfig, raw.get("task"), "task", src)
    _check(task.format in ("auto", "jsonl", "csv", "parquet"), src, "task.format",
           f"must be auto, jsonl, csv or parquet; got {task.format!r}")
    from bakeoff.evaluate import METRICS
    _check(task.metric in METRICS, src, "task.metric", f"unknown metric {task.metric!r}" + _suggest(task.metric, list(METRICS)))
    _check(task.max_new_tokens > 0, src, "task.max_new_tokens", "must be > 0")
    for k, allowed in (("overlong", ("truncate", "drop")), ("duplicates", ("drop", "keep", "error")),
                       ("leakage", ("drop", "keep", "error"))):
        _check(getattr(task, k) in allowed, src, f"task.{k}", f"must be one of {', '.join(allowed)}; got {getattr(task, k)!r}")
    _check(task.labels is None or (isinstance(task.labels, list) and task.labels
                                   and all(isinstance(x, str) for x in task.labels)),
           src, "task.labels", f"must be a non-empty list of strings (or null), got {task.labels!r}")
    train = _build(TrainConfig, raw.get("train_defaults"), "train_defaults", src)
    _check_train(train, "train_defaults", src)
    ev = _build(EvalConfig, raw.get("eval"), "eval", src)
    _check(ev.batch_size > 0, src, "eval.batch_size", "must be > 0")
    _check(ev.latency_requests >= 0, src, "eval.latency_requests", "must be ≥ 0")
    _check(ev.bootstrap_resamples >= 100, src, "eval.bootstrap_resamples", "must be ≥ 100")
    _check(isinstance(ev.lm_eval_tasks, list) and all(isinstance(x, str) for x in ev.lm_eval_tasks), src,
           "eval.lm_eval_tasks", f"must be a list of lm-eval task names, got {ev.lm_eval_tasks!r}")

    baselines = {}
    for name, b in (raw.get("baselines") or {}).items():
        _check_name(name, f"baselines.{name}", src)
        obj = _build(BaselineConfig, {"name": name, **(b or {})}, f"baselines.{name}", src)
        _check(obj.shots >= 0, src, f"baselines.{name}.shots", "must be ≥ 0")
        _check(obj.selection in ("fixed", "nearest"), src, f"baselines.{name}.selection",
               f"must be fixed or nearest; got {obj.selection!r}")
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
                                + _suggest(str(v.parent), [n for n, x in variants.items() if x.parent is None]))

    tracking = _build(TrackingConfig, raw.get("tracking"), "tracking", src)
    _check_tracking_uri(tracking.uri, src)
    verdict = _build(VerdictConfig, raw.get("verdict"), "verdict", src)
    cost = _build(CostConfig, raw.get("cost"), "cost", src)
    _check(cost.usd_per_1k_prompt_tokens >= 0, src, "cost.usd_per_1k_prompt_tokens", "must be ≥ 0")
    sizing = _build(SizingConfig, raw.get("sizing"), "sizing", src)
    _check_sizing(sizing, src)
    return Params(model=model, task=task, train_defaults=train, eval=ev, baselines=baselines,
                  variants=variants, tracking=tracking, verdict=verdict, cost=cost, sizing=sizing, path=src.path)


def _check_tracking_uri(uri: str | None, src: _Source) -> None:
    """A file store named in params must sit inside the repository (a server URI may be anywhere)."""
    if not uri or "://" not in uri or uri.split("://")[0] not in ("sqlite", "file"):
        return
    from bakeoff.tracking import repo_root

    path = uri.split("://", 1)[1]
    path = path[1:] if uri.startswith("sqlite:///") else path
    target = (repo_root() / path).resolve() if not Path(path).is_absolute() else Path(path).resolve()
    _check(target.is_relative_to(repo_root().resolve()), src, "tracking.uri",
           f"{uri!r} writes outside the repository ({repo_root()}); use a path inside it, a server URI, or set "
           "MLFLOW_TRACKING_URI yourself")


def _check_sizing(s: SizingConfig, src: _Source) -> None:
    for section, items, need in (("targets", s.targets, _SHAPE_KEYS), ("gpus", s.gpus, _GPU_KEYS)):
        _check(isinstance(items, list), src, f"sizing.{section}", "must be a list")
        for i, item in enumerate(items):
            key = f"sizing.{section}"
            _check(isinstance(item, dict), src, key, f"item {i + 1} must be a mapping with {', '.join(need)}")
            missing = [k for k in need if k not in item]
            _check(not missing, src, key, f"item {i + 1} ({item.get('name', '?')}) lacks {', '.join(missing)}")
            for k in need[1:]:
                _check(isinstance(item[k], (int, float)) and item[k] > 0, src, key,
                       f"item {i + 1} ({item['name']}): {k} must be a positive number, got {item[k]!r}")
    names = [t["name"] for t in s.targets]
    _check(s.target is None or s.target in names, src, "sizing.target",
           f"{s.target!r} is not one of sizing.targets" + (_suggest(str(s.target), names) if names else ""))
    _check(0 <= s.margin < 1, src, "sizing.margin", f"must be in [0, 1), got {s.margin}")
    _check(0 < s.mfu <= 1, src, "sizing.mfu", f"must be in (0, 1], got {s.mfu}")


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.exists():
        raise ParamsError(f"{path}: file not found")
    text = path.read_text()
    try:
        raw = yaml.safe_load(text) or {}
        lines = _key_lines(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ParamsError(f"{where}: not valid YAML: {getattr(e, 'problem', e)}") from None
    return parse_params(raw, _Source(str(path), lines))


"""params.yaml's arms: every baseline and variant (``variants:`` and ``derived:``) built into its dataclass and checked,
their training settings included; each error names the file, the line and the key."""

from __future__ import annotations

import re
from dataclasses import fields

from bakeoff.core import techniques as technique_options
from bakeoff.core.schema import (
    Source,
    build,
    check,
    check_endpoint,
    suggest,
)
from bakeoff.core.sections import (
    BaselineConfig,
    TrainConfig,
    VariantConfig,
)
from bakeoff.core.spaces import SELECTIONS, check_prompt_search

ATTENTION = ("auto", "eager_fp32", "eager", "sdpa", "flash_attention_2", "flex_attention")  # bakeoff.train.kernels
LOSS_LOGITS = ("auto", "labelled", "all")
OPTIMIZERS = ("adamw_torch_fused", "adamw_torch", "adamw_8bit", "paged_adamw_8bit")
BATCHING = ("padded", "group_by_length", "padding_free", "sequential")  # TrainConfig.batching
TRAIN_KEYS = {f.name for f in fields(TrainConfig)}
RETRIEVAL_KEYS = ("passages", "chunk_words", "raft")  # a variant asked (and with raft, trained) with passages
RETRIEVAL_DEFAULTS = {f.name: f.default for f in fields(VariantConfig) if f.name in RETRIEVAL_KEYS}


def check_train(t: TrainConfig, key: str, src: Source) -> None:
    for k in ("max_steps", "lr", "micro_batch", "processes", "max_seq_len", "seeds"):
        check(getattr(t, k) > 0, src, f"{key}.{k}", f"must be > 0, got {getattr(t, k)}")
    check(
        t.effective_batch % (t.micro_batch * t.processes) == 0 and t.effective_batch > 0,
        src,
        f"{key}.effective_batch",
        f"must be a positive multiple of micro_batch × processes "
        f"({t.micro_batch} × {t.processes}), got {t.effective_batch}",
    )
    for k in ("checkpoint_steps", "eval_steps", "early_stopping_noise"):
        check(getattr(t, k) >= 0, src, f"{key}.{k}", f"must be ≥ 0, got {getattr(t, k)}")
    check(
        0 <= t.early_stopping_patience <= 1,
        src,
        f"{key}.early_stopping_patience",
        "is a share of max_steps in [0, "
        "1] "
        f"(0.3: stop after 30% of the run without a real improvement; 0: never), got {t.early_stopping_patience}",
    )
    check(
        t.seeds == 1 or t.processes == 1,
        src,
        f"{key}.seeds",
        "several seeds train in one process: set "
        f"processes: 1 or seeds: 1 (got seeds {t.seeds}, processes {t.processes})",
    )
    check(0 <= t.improving_drop < 1, src, f"{key}.improving_drop", f"must be in [0, 1), got {t.improving_drop}")
    for k, allowed in (
        ("precision", ("auto", "fp32", "bf16", "fp16")),
        ("optimizer", OPTIMIZERS),
        ("attention", ATTENTION),
        ("loss_logits", LOSS_LOGITS),
        ("batching", BATCHING),
    ):
        check(
            getattr(t, k) in allowed, src, f"{key}.{k}", f"must be one of {', '.join(allowed)}; got {getattr(t, k)!r}"
        )
    check(
        t.gradient_checkpointing in (True, False, "auto"),
        src,
        f"{key}.gradient_checkpointing",
        f"must be true, false or auto; got {t.gradient_checkpointing!r}",
    )
    check(
        t.memory_budget_gb is None or t.memory_budget_gb > 0,
        src,
        f"{key}.memory_budget_gb",
        f"must be > 0 (or null), got {t.memory_budget_gb}",
    )


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(name, key: str, src: Source) -> None:
    """A run name becomes a folder (runs/<name>, models/variants/<name>): nothing that leaves the repository."""
    check(
        isinstance(name, str) and _NAME.fullmatch(name) is not None and ".." not in name,
        src,
        key,
        f"{name!r} is not a usable run name: letters, digits, '_', '-', '.', starting with a letter or digit "
        "(it becomes a folder under runs/ and models/variants/)",
    )


def variant_config(section: str, name: str, v, train: TrainConfig, src: Source) -> VariantConfig:
    key = f"{section}.{name}"
    check_name(name, key, src)
    if not isinstance(v, dict):
        raise src.error(key, "expected a mapping with at least 'technique'")
    if "technique" not in v:
        raise src.error(key, f"missing 'technique' (one of {', '.join(technique_options.names())})")
    technique = v["technique"]
    if technique not in technique_options.names():
        raise src.error(
            f"{key}.technique", f"unknown technique {technique!r}" + suggest(str(technique), technique_options.names())
        )
    overrides = {k: val for k, val in v.items() if k in TRAIN_KEYS}
    merged = {**{f.name: getattr(train, f.name) for f in fields(TrainConfig)}, **overrides}
    vtrain = build(TrainConfig, merged, key, src)
    check_train(vtrain, key, src)
    tech_defaults = technique_options.defaults(technique)
    options = {}
    for k, val in v.items():
        if k in TRAIN_KEYS or k in ("technique", "backend") or k in RETRIEVAL_KEYS:
            continue
        if k not in tech_defaults:
            raise src.error(
                f"{key}.{k}",
                f"unknown option for technique {technique!r}"
                + suggest(str(k), [*tech_defaults, *RETRIEVAL_KEYS, *sorted(TRAIN_KEYS)]),
            )
        options[k] = val
    options = {**tech_defaults, **options}
    for okey, msg in technique_options.check(technique, options):
        raise src.error(f"{key}.{okey}", msg)
    backend = v.get("backend", "hf")
    check(backend in ("hf", "unsloth"), src, f"{key}.backend", f"must be hf or unsloth; got {backend!r}")
    unsloth = [t for t, f in technique_options.FACTS.items() if f.unsloth]
    check(
        backend == "hf" or technique in unsloth,
        src,
        f"{key}.backend",
        f"unsloth runs {' and '.join(unsloth)} variants, not {technique!r}",
    )
    parent = options.get("init_from")
    if section == "variants" and parent is not None:
        raise src.error(
            key,
            f"a {technique} variant starts from another variant's output: put it under "
            f"`derived:` so DVC trains {parent!r} first",
        )
    if section == "derived" and parent is None:
        raise src.error(key, f"a `derived:` variant needs init_from (technique {technique!r} has none)")
    passages = _passages(v, technique, key, src)
    return VariantConfig(
        name=name, technique=technique, train=vtrain, backend=backend, options=options, parent=parent, **passages
    )


def _passages(v: dict, technique: str, key: str, src: Source) -> dict:
    """A variant's ``passages``, ``chunk_words`` and ``raft`` (``bakeoff.data.raft``), checked."""
    got = {k: v[k] for k in RETRIEVAL_KEYS if k in v}
    if not got:
        return {}
    k, words, raft = ({**RETRIEVAL_DEFAULTS, **got}[x] for x in RETRIEVAL_KEYS)
    whole = isinstance(k, int) and not isinstance(k, bool)
    check(whole and k >= 0, src, f"{key}.passages", f"must be a whole number ≥ 0, got {k!r}")
    check(
        isinstance(words, int) and not isinstance(words, bool) and words >= 20,
        src,
        f"{key}.chunk_words",
        f"must be a whole number ≥ 20 words, got {words!r}",
    )
    share = isinstance(raft, (int, float)) and not isinstance(raft, bool) and 0 <= raft <= 1
    check(
        raft is None or share,
        src,
        f"{key}.raft",
        f"is the share of rows with the gold passage, in [0, 1]; got {raft!r}",
    )
    check(
        k > 0 or (raft is None and "chunk_words" not in got),
        src,
        f"{key}.passages",
        "raft and chunk_words need passages: k > 0 (the passages each prompt carries)",
    )
    check(
        not technique_options.facts(technique).pairs,
        src,
        f"{key}.passages",
        f"a {technique} variant trains on preference pairs; passages are for supervised variants (lora, qlora, full)",
    )
    return {"passages": k, "chunk_words": words, "raft": None if raft is None else float(raft)}


def baselines_of(raw: dict, src: Source) -> dict[str, BaselineConfig]:
    """``baselines:``, each built and checked: its shots, its selection, its search and its endpoint."""
    baselines = {}
    for name, b in (raw.get("baselines") or {}).items():
        check_name(name, f"baselines.{name}", src)
        obj = build(BaselineConfig, {"name": name, **(b or {})}, f"baselines.{name}", src)
        check(obj.shots >= 0, src, f"baselines.{name}.shots", "must be ≥ 0")
        for key, ok in (("passages", obj.passages >= 0), ("chunk_words", obj.chunk_words >= 20)):
            check(ok, src, f"baselines.{name}.{key}", "must be ≥ 0" if key == "passages" else "must be ≥ 20 words")
        check(
            obj.selection in SELECTIONS,
            src,
            f"baselines.{name}.selection",
            f"must be one of {', '.join(SELECTIONS)}; got {obj.selection!r}",
        )
        for key, msg in check_prompt_search(obj.search, f"baselines.{name}.search"):
            raise src.error(key, msg)
        for key, msg in check_endpoint(obj, f"baselines.{name}"):
            raise src.error(key, msg)
        baselines[name] = obj
    return baselines


def variants_of(raw: dict, train: TrainConfig, baselines: dict, src: Source) -> dict[str, VariantConfig]:
    """``variants:`` and ``derived:``, each over ``train_defaults`` (``train``), no name used twice, and each derived
    variant's parent a variant of ``variants:``."""
    variants = {}
    for section in ("variants", "derived"):
        for name, v in (raw.get(section) or {}).items():
            if name in variants or name in baselines:
                raise src.error(f"{section}.{name}", "this name is already used by another baseline or variant")
            variants[name] = variant_config(section, name, v, train, src)
    for name, v in variants.items():
        if v.parent is not None:
            parent = variants.get(v.parent)
            if parent is None or parent.parent is not None:
                raise src.error(
                    f"derived.{name}.init_from",
                    f"{v.parent!r} is not a variant of `variants:`"
                    + suggest(str(v.parent), [n for n, x in variants.items() if x.parent is None]),
                )
    return variants

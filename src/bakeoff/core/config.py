"""Reading params.yaml: every section built into its dataclass (``bakeoff.core.sections``) and checked.

    from bakeoff.core.config import load_params
    p = load_params("params.yaml")
    p.variant("lora").train.lr

Every error names the file, the line and the dotted key at fault, for example
``params.yaml:42: variants.lora.rank: unknown key (did you mean 'r'?)``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from bakeoff.core import techniques as technique_options
from bakeoff.core.config_arms import TRAIN_KEYS, baselines_of, check_train, variants_of
from bakeoff.core.config_sizing import check_export, check_sizing
from bakeoff.core.config_task import eval_config, task_config
from bakeoff.core.runs import repo_root
from bakeoff.core.schema import (
    ParamsError,
    Source,
    build,
    check,
    check_no_password,
    check_tracking_uri,
    key_lines,
    renamed,
    suggest,
)
from bakeoff.core.sections import (
    CURVE_ROLES,
    CostConfig,
    CurveConfig,
    ExportConfig,
    ModelConfig,
    Params,
    RetrievalConfig,
    SizingConfig,
    TrackingConfig,
    TrainConfig,
    VerdictConfig,
)
from bakeoff.core.spaces import TuneConfig, check_spaces

SECTIONS = (
    "model",
    "task",
    "train_defaults",
    "eval",
    "baselines",
    "variants",
    "derived",
    "tune",
    "tracking",
    "verdict",
    "cost",
    "sizing",
    "export",
    "curve",
    "retrieval",
)


def parse_params(raw: dict, src: Source) -> Params:
    if not isinstance(raw, dict):
        raise src.error("(top)", "params must be a mapping")
    for k in raw:
        if k not in SECTIONS:
            raise src.error(str(k), "unknown section" + suggest(str(k), list(SECTIONS)))
    model = build(ModelConfig, raw.get("model"), "model", src)
    task = task_config(raw.get("task"), src)
    train = build(TrainConfig, raw.get("train_defaults"), "train_defaults", src)
    check_train(train, "train_defaults", src)
    ev = eval_config(raw.get("eval"), src)
    baselines = baselines_of(raw, src)
    variants = variants_of(raw, train, baselines, src)
    tracking = build(TrackingConfig, raw.get("tracking"), "tracking", src)
    check_tracking_uri(tracking.uri, src, repo_root())
    verdict = _verdict(raw, src)
    cost = build(CostConfig, raw.get("cost"), "cost", src)
    check(cost.usd_per_1k_prompt_tokens >= 0, src, "cost.usd_per_1k_prompt_tokens", "must be ≥ 0")
    sizing = build(
        SizingConfig,
        renamed(raw.get("sizing"), "sizing", RENAMED_SIZING, src, "it sizes the target card, not this run's training"),
        "sizing",
        src,
    )
    check_sizing(sizing, src, cost.serve_gpu)
    tune = build(TuneConfig, raw.get("tune"), "tune", src)
    check_no_password(tune.storage, "tune.storage", src)
    for key, msg in check_spaces(
        tune,
        TRAIN_KEYS,
        lambda t: technique_options.defaults(t) if t in technique_options.names() else {},
        list(variants),
    ):
        raise src.error(key, msg)
    export = build(ExportConfig, raw.get("export"), "export", src)
    check_export(export, list(variants), src)
    curve = _curve(raw, baselines, variants, src)
    return Params(
        model=model,
        task=task,
        train_defaults=train,
        eval=ev,
        baselines=baselines,
        variants=variants,
        tracking=tracking,
        verdict=verdict,
        cost=cost,
        sizing=sizing,
        tune=tune,
        export=export,
        curve=curve,
        retrieval=_retrieval(raw, src),
        path=src.path,
    )


def _retrieval(raw: dict, src: Source) -> RetrievalConfig:
    """How dense and hybrid shots embed: ``embedder`` a built-in alias, a local folder or a hub id."""
    retrieval = build(RetrievalConfig, raw.get("retrieval"), "retrieval", src)
    check(
        isinstance(retrieval.embedder, str) and bool(retrieval.embedder),
        src,
        "retrieval.embedder",
        "must name an embedding model: all-minilm-l6-v2 (shipped), a local folder or a hub id",
    )
    return retrieval


def _verdict(raw: dict, src: Source) -> VerdictConfig:
    """The verdict's margins, each a share of the primary metric: ``min_gain`` in [0, 1), ``max_loss`` in (0, 1)."""
    verdict = build(VerdictConfig, raw.get("verdict"), "verdict", src)
    for key, x, lo_ok in (("min_gain", verdict.min_gain, True), ("max_loss", verdict.max_loss, False)):
        ok = isinstance(x, (int, float)) and not isinstance(x, bool) and (0 <= x < 1 if lo_ok else 0 < x < 1)
        check(
            ok,
            src,
            f"verdict.{key}",
            f"must be a share of the primary metric in {'[0' if lo_ok else '(0'}, 1) (0.02 = 2 points), got {x!r}",
        )
    return verdict


CURVE_OFF = (
    "dvc.yaml makes the curve stages from curve.arms × curve.fractions, so it needs both: write "
    "`curve: {fractions: []}` to turn the data-value curve off"
)


def _curve(raw: dict, baselines: dict, variants: dict, src: Source) -> CurveConfig | None:
    """The data-value curve's section (absent: the defaults); ``fractions: []`` turns it off (None)."""
    if "curve" in raw and raw["curve"] is None:
        raise src.error("curve", CURVE_OFF)
    c = build(CurveConfig, raw.get("curve"), "curve", src)
    check(
        isinstance(c.arms, list) and c.arms,
        src,
        "curve.arms",
        f"a list of {' or '.join(CURVE_ROLES)}, or variant and baseline names; got {c.arms!r}",
    )
    names = [*CURVE_ROLES, *variants, *baselines]
    for a in c.arms:
        check(
            a in names,
            src,
            "curve.arms",
            f"{a!r} is neither a role ({', '.join(CURVE_ROLES)}) nor a variant or baseline" + suggest(str(a), names),
        )
    check(
        isinstance(c.fractions, list)
        and all(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f < 1 for f in c.fractions),
        src,
        "curve.fractions",
        f"shares of the training split, each in (0, 1) (1.0 is the arm's own run); got {c.fractions!r}",
    )
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
        return (
            f"{path}: curve: missing or incomplete ({CURVE_OFF}; the default: `curve: {{arms: [recommended, "
            "best_prompt], fractions: [0.125, 0.25, 0.5]}}`)"
        )
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

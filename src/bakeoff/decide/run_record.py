"""A run's row of the decision's table (``bakeoff.decide.figures.collect``: its records flattened, then its intervals,
gains and rank group) as a typed record, for code that reads runs one at a time. The table itself stays a DataFrame
(its columns are what the report's tables and CSV show); a column only a task names (``field_acc.<field>``, a metric's
own figures) is kept as written and read with ``run[name]`` (OPEN).

    rows = by_name(d.runs)             # name → Run
    rows["lora"].quality, rows["lora"].status, rows["lora"]["field_acc.urgency"]
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from bakeoff.core.record import Record


@dataclass
class Run(Record):
    """One run's figures (NaN where the table has no value for it; None where it has no such column)."""

    OPEN = True
    name: str | None = None
    kind: str | None = None
    technique: str | None = None
    status: str | None = None
    error: str | None = None
    run_id: str | None = None
    quality: float | None = None
    exact_match: float | None = None
    loose_match: float | None = None
    contains_reference: float | None = None
    chrf: float | None = None
    rouge_l: float | None = None
    json_valid: float | None = None
    json_fields: float | None = None
    format_misses: float | None = None
    n_test: float | None = None
    val_loss: float | None = None
    val_ppl: float | None = None
    gen_tokens_per_s: float | None = None
    prompt_tokens_per_request: float | None = None
    gen_wall_s: float | None = None
    val_quality: float | None = None
    retrieval_recall: float | None = None  # a run asked with passages: the share whose passages held the gold document
    n_val: float | None = None
    pref_accuracy: float | None = None
    pref_margin: float | None = None
    n_pref: float | None = None
    pref_margins: list | None = None
    latency_p50_s: float | None = None
    latency_p25_s: float | None = None
    latency_p75_s: float | None = None
    latency_p95_s: float | None = None
    latency_tokens_per_s: float | None = None
    eval_val_loss_wall_s: float | None = None
    eval_val_generate_wall_s: float | None = None
    eval_pref_wall_s: float | None = None
    eval_latency_wall_s: float | None = None
    eval_peak_rss_mb: float | None = None
    serving_dtype: str | None = None
    lm_eval_exact_match: float | None = None
    lm_eval_disagree: float | None = None
    lm_eval_generated: float | None = None
    lm_eval_wall_s: float | None = None
    probe_acc: float | None = None
    n_probe: float | None = None
    probe_wall_s: float | None = None
    general_kl: float | None = None
    trainable_params: float | None = None
    total_params: float | None = None
    train_steps: float | None = None
    tokens_seen: float | None = None
    rows_seen: float | None = None
    padding_share: float | None = None
    train_tokens_per_s: float | None = None
    train_step_s_median: float | None = None
    train_peak_rss_mb: float | None = None
    resumed_from_step: float | None = None
    train_wall_s: float | None = None
    train_loss_final: float | None = None
    train_loss_mean: float | None = None
    adapter_mb: float | None = None
    effective_batch: float | None = None
    micro_batch: float | None = None
    grad_accum: float | None = None
    precision: str | None = None
    loss_scaling: object = None
    gradient_checkpointing: bool | None = None
    kernels: str | None = None
    stopped_at_step: float | None = None
    kept_best: bool | None = None
    best_step: float | None = None
    train_loss_drop_last_quarter: float | None = None
    convergence: str | None = None
    patience_steps: float | None = None
    would_stop_at: object = None
    seeds: float | None = None
    quality_seed_mean: float | None = None
    quality_seed_sd: float | None = None
    quality_seed_min: float | None = None
    quality_seed_max: float | None = None
    served: str | None = None
    latency_p50_s_unmerged: float | None = None
    latency_p25_s_unmerged: float | None = None
    latency_p75_s_unmerged: float | None = None
    latency_p95_s_unmerged: float | None = None
    latency_tokens_per_s_unmerged: float | None = None
    general_kl_wall_s: float | None = None
    general_kl_against: str | None = None
    seed_spread: str | None = None
    batch_split: str | None = None
    held_dtypes: dict | None = None
    best_baseline: str | None = None
    quality_ci_low: float | None = None
    quality_ci_high: float | None = None
    gain: float | None = None
    gain_ci_low: float | None = None
    gain_ci_high: float | None = None
    quality_ci: str | None = None
    quality_label_choice_ci: object = None
    gain_vs_prompting: str | None = None
    flips: str | None = None
    verdict_figure: str | None = None
    rank_group: str | None = None
    engine: object = None
    label_choice_via: object = None
    usd_per_request: object = None
    completion_tokens_per_request: object = None
    n_failed_items: object = None
    latency_how: object = None
    side_checks_failed: object = None
    quality_label_choice: object = None
    val_quality_label_choice: object = None
    tuned: object = None
    tune_tokens: object = None
    tune_wall_s: object = None
    adopted_from_trial: object = None
    control_probe_acc: object = None
    seed_scores: object = None
    train_peak_reserved_mb: object = None
    dtypes: object = None
    gen_tokens_per_s_unmerged: object = None
    control_quality: float | None = None
    control_general_kl: float | None = None


def rows_of(df: pd.DataFrame) -> list[Run]:
    """The table's rows, in order, as typed records."""
    return [Run.from_dict(r) for r in df.to_dict("records")]


def by_name(df: pd.DataFrame) -> dict[str, Run]:
    """The table's rows by run name."""
    return {r.name: r for r in rows_of(df)}


@dataclass
class Pair(Record):
    """One row of the pairwise tests (``bakeoff.decide.recommend.pairwise``; reports/pairwise.csv): two runs on the same
    test items, the difference, the items each gets right alone, the test and its p-values (raw and Holm-adjusted)."""

    a: str | None = None
    b: str | None = None
    n: int | None = None
    quality_a: float | None = None
    quality_b: float | None = None
    diff: float | None = None
    a_better_on: int | None = None
    b_better_on: int | None = None
    test: str | None = None
    p: float | None = None
    p_holm: float | None = None


def pairs_of(pw: pd.DataFrame | None) -> list[Pair]:
    """The pairwise table's rows as typed records ([] without one)."""
    return [] if pw is None else [Pair.from_dict(r) for r in pw.to_dict("records")]


@dataclass
class HeldDtypes(Record):
    """What a run held its weights and saved activations in (the table's ``held_dtypes``; ``bakeoff.train.kernels``)."""

    OPEN = True
    base: str | None = None
    unquantized: str | None = None
    head: str | None = None
    trainable: str | None = None
    compute: str | None = None
    activations: str | None = None
    checkpointed: bool | None = None


@dataclass
class Tuned(Record):
    """What the tune stage chose for a run (the table's ``tuned``), and whose search it was where shared."""

    values: dict | None = None
    shared_from: str | None = None

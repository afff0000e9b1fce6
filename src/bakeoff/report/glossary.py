"""The glossary every report term links to: one line a term, what it means and where it is defined."""

from __future__ import annotations

from bakeoff.decide.rule import ALPHA

GLOSSARY = [
    ("arm", "one contender of the bake-off: a prompting baseline or a trained variant"),
    ("points / pp", "percentage points: a difference of two shares of the test items (90% against 60% is +30 points)"),
    ("quality", "the primary metric (`task.metric`) on the test split"),
    (
        "95% CI / interval",
        (
            "paired percentile bootstrap over test items, `src/bakeoff/core/measure.py`; each arm trained once (one "
            "seed), so it holds the test split's noise, not a training run's (it adds the seeds only where "
            "`train_defaults.seeds` trains several)"
        ),
    ),
    (
        "Δ vs best prompt",
        "a variant's gain over the prompting baseline best on validation, in points, with its interval",
    ),
    ("flips −/+", "test items that went right → wrong / wrong → right against that baseline (`reports/flips/`)"),
    (
        "group (rank group)",
        (
            "runs the test split cannot tell apart from the group's leader: exact McNemar test, "
            f"Holm-adjusted over every pair, p ≥ {ALPHA}; a display, never a reason to recommend"
        ),
    ),
    ("McNemar test", "the exact test of a paired 0/1 difference: it counts only the items where the two runs disagree"),
    ("Holm", f'a step-down adjustment of p-values over all pairs, so every "different" holds at {ALPHA} together'),
    ("cannot be told apart on N items", "the test did not reject a difference; it says nothing of sameness"),
    (
        "shown within k points",
        (
            "a cheaper run's shortfall from the best, shown smaller than `verdict.max_loss`: the lower end of the "
            "paired 90% interval lies above −k (one-sided, Holm over the comparisons with the best); only then does it "
            "replace the best"
        ),
    ),
    ("val quality", "the primary metric on the validation split, which picks every winner"),
    (
        "converged? / still improving",
        (
            "how training ended, from its validation loss: still improving means it was "
            "still falling (beyond noise, where per-row losses exist) at max_steps, so more "
            "steps may change its rank; converged means it had stopped falling"
        ),
    ),
    ("label choice", "the answer chosen among `task.labels` by likelihood instead of free generation"),
    ("format-only misses", "answers right but for case, punctuation or spacing"),
    ("contains ref", "answers that contain the reference, format aside"),
    ("lm-eval EM", "lm-evaluation-harness's exact match on the same split: a cross-check of prompts and metric"),
    (
        "pref acc / pref margin",
        ("held-out preference pairs whose chosen answer is more likely / the mean log-probability margin in nats"),
    ),
    ("tok/s, step s, wall s", "training tokens per second (steady state), median optimizer-step time, whole run"),
    ("peak RSS / reserved MB", "peak resident memory of the process (CPU) / CUDA allocator reserve (GPU)"),
    ("saved MB", "bytes on disk of what a variant saves (adapter or full weights)"),
    ("p25, p50, p75, p95 s", "per-request latency at batch 1: quartiles, median, 95th percentile"),
    ("unmerged", "an adapter served beside its base rather than merged into it"),
    (
        "MFU / HFU",
        ("model / hardware FLOP utilisation: useful (or executed, recompute counted) FLOP/s over the card's peak"),
    ),
    (
        "smallest card / cheapest card",
        (
            "the card with the least memory that holds the job / the one with the "
            "lowest price for the whole job (a faster card can cost less in all)"
        ),
    ),
    ("all in", "training + the arm's share of the search it used + its parent's all-in cost"),
    ("search share", "a search used by k arms (`tune.share`) carries 1/k of its tokens into each"),
    ("adopted trial", "a search trial that is the very run training would do, kept as the training run"),
    (
        "break-even",
        (
            "the daily requests above which serving the fine-tuned model on its own card costs less "
            "than paying per prompt token"
        ),
    ),
    ("probe / Δ probe", "share of the 200 offline general questions right / its change against the base model"),
    ("KL to base", "mean per-token KL divergence from the base model on 24 general instructions (nats)"),
    ("control (quantized base)", "the 4-bit base QLoRA trains on, untrained, scored like every run"),
    (
        "projected",
        ("computed from the sizing model and assumed inputs, or from the data-value curve's fit: not measured"),
    ),
    (
        "data-value curve",
        (
            "an arm's quality against its training rows: the arm again on nested shares of train, "
            "its own run the full size, three forms fitted (`src/bakeoff/decide/curve.py`)"
        ),
    ),
    (
        "back-test",
        (
            "the curve fitted on the smaller shares only, predicting the full size that was measured: a "
            "prediction outside the observed point's 95% interval withholds the curve's projections"
        ),
    ),
    ("last doubling", "the measured gain from the share at half the rows to the full run, with its paired interval"),
    ("gain at 2×", "a projection at twice the rows minus the largest measured point, over every fitted form"),
    ("crossover", "the training rows from which the fine-tuned arm's fitted curve stays above the prompt's"),
]


def glossary_lines() -> list[str]:
    return ["## Glossary", "", *[f"- **{t}**: {d}." for t, d in GLOSSARY], ""]

"""The one definition of every speed, memory and size figure bakeoff reports.

Training speed
    ``train_tokens_per_s``: non-padding tokens fed to the model (attention-mask ones, prompt and completion) divided
    by the wall time of the same optimizer steps, over the steady state: the first ``warmup_steps_excluded`` steps
    (compilation, allocator warm-up) are left out.
    ``train_step_s_median``: median wall time of one optimizer step (all its micro-batches). On a CUDA GPU a step's
    wall time is the elapsed time between two CUDA events recorded on the stream at its ends, read after the run, so
    the loop never waits for the GPU to time itself (``StepLog``).
    ``train_wall_s``: wall time of building the trainer (tokenizing the rows; DPO's reference pass over its pairs) and
    the whole ``trainer.train()`` call. A DPO run that took its reference log-probabilities from an earlier trial of
    its search adds that pass's time, measured there (``ref_pass_reused_s``): the time the run costs on its own.
Memory (never one number that mixes kinds)
    CPU: ``*_peak_rss_mb``, the peak resident set size of the process within the window, read from the
    kernel's high-water mark (VmHWM) after resetting it at the window's start (/proc/self/clear_refs).
    CUDA: ``*_peak_allocated_mb`` (live tensors) and ``*_peak_reserved_mb`` (caching allocator), reset at the
    window's start, after emptying the allocator's cache (an earlier trial's, seed's or step's reserve is not
    counted). Windows: ``train_`` the training run (the model loaded, the trainer not yet built, to the last
    step); ``eval_`` every step of ``evaluate_examples`` (generation, validation loss and answers, label choice,
    preference pairs, latency).
Size
    ``trainable_params``, ``total_params`` (a 4-bit weight counts as its logical element count),
    ``adapter_mb``: bytes on disk of what a variant saves, in MiB.
Serving
    ``gen_tokens_per_s``: generated tokens (up to and including end-of-sequence, padding excluded)
    per second of generation wall time; ``prompt_tokens_per_request``: mean prompt length in tokens.
    ``latency_p50_s``, ``latency_p95_s``: wall time of one request at batch 1 (prompt in, greedy answer out),
    median and 95th percentile (linear interpolation) over the first ``eval.latency_requests`` test prompts;
    ``latency_p25_s``, ``latency_p75_s`` their interquartile range. One run is called faster to serve than another
    only when the ranges separate (``latency_separated``: its p75 below the other's p25); otherwise they tie.
    A ``_merged`` / ``_unmerged`` suffix says how an adapter was served.
    ``<step>_wall_s``: wall time of a whole evaluation step (``eval_val_loss``, ``eval_val_generate``,
    ``eval_label_choice``, ``eval_pref``, ``eval_latency``, ``lm_eval``, ``probe``, ``general_kl``).
Utilisation (one convention, implemented in ``bakeoff.core.flops``, used by gpu_check.py and sizing)
    N is the parameter count without the input embedding (a table lookup, no multiply); a tied embedding counts
    once, as the output head. Model FLOPs per token: 6·N for full fine-tuning, 4·N when the base is frozen
    (adapters: no weight gradients), plus 2·N for DPO's reference forward. ``mfu`` = tokens/s × model FLOPs per
    token ÷ peak FLOP/s. Hardware FLOPs add 2·N for the forward pass gradient checkpointing recomputes; ``hfu``
    uses them. A run without checkpointing has mfu = hfu, and that is the figure ``sizing.mfu`` takes: the time
    estimate divides hardware FLOPs by it, so checkpointing costs its recompute once, not twice.
The statistics below are implemented in ``bakeoff.decide.statistics`` (non-inferiority in ``bakeoff.decide.rule``);
this is their one definition.
Confidence
    ``*_ci_low``, ``*_ci_high``: paired percentile bootstrap, 95%, over test examples (seeded): the
    examples are resampled with replacement, the figure recomputed, the 2.5th and 97.5th percentiles kept.
    For a difference between two runs the same resample is applied to both (the runs saw the same examples). A
    variant trained under several seeds (``train_defaults.seeds``) reports the mean over seeds, and each resample
    draws the seeds with replacement too, so its interval holds the seed-to-seed spread.
Validation and early stopping
    ``se`` of each ``val_curve`` point, the real-improvement rule, ``still improving`` and ``loss_drop``: defined in
    ``bakeoff.train.stopping`` (when a run stops, and how it ended).
Differences between runs (``reports/pairwise.csv``)
    ``p``: for a 0/1 metric, the exact McNemar test: under "no difference" each of the b + c examples that one run
    gets right and the other wrong goes either way with probability 1/2, so p = the two-sided binomial p of
    min(b, c) in b + c trials. For any other metric, a paired permutation test of the figure's difference: each
    resample swaps the two runs' items on each example with probability 1/2 (seeded); p = (k + 1) / (R + 1) with
    k the resamples at least as far from zero as observed. ``p_holm``: Holm's step-down adjustment over every pair
    of the report (the family), so a "different" claim holds at the stated level for all pairs together. The
    bootstrap intervals above are each one pair's, unadjusted: an interval may exclude 0 where the Holm-adjusted test
    does not reject, and the report then says the test decides.
Non-inferiority (``bakeoff.decide.rule.shortfall``; the recommendation's one rule, ``choose``)
    A cheaper run (or a prompt) against the best run, picked on validation, on the same test examples, d = cheaper −
    best per example, H0 "mean d ≤ −margin" (``verdict.max_loss``), one-sided. For 0/1 scores: the Wald interval of
    the difference of matched proportions with Agresti and Min's adjustment (Stat. Med. 2005: 0.5 added to each cell
    of the paired 2×2 table, so with w items won and l lost of n, centre (w − l)/(n + 2) over w + 0.5, l + 0.5), p =
    P(Z ≥ (centre + margin) / se); it does not collapse when few items disagree. Other scores: a paired t-test on d.
    Holm's adjustment runs over the k−1 comparisons with the best (not every pair). "Shown within the margin" when
    the adjusted p < 0.05; unadjusted, that is the lower end of the 90% interval lying above −margin.
    ``items_needed``: the test items at which the observed mean difference and spread would show it, (1.645 · sd /
    (mean d + margin))², none where mean d ≤ −margin. Not rejecting a difference is never read as "as good as":
    without this bound a cheaper run is "not shown".
Rounding
    ``round_sig``: estimates built on an assumed input (MFU, prices) are shown to two significant figures.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bakeoff.core.step_timing import _cuda  # training speed (StepLog) is implemented there

MB = 1024 * 1024


def _cuda_sync() -> None:
    if _cuda():
        import torch

        torch.cuda.synchronize()


# ---------------------------------------------------------------- memory


def _read_status_kb(key: str) -> int | None:
    try:
        lines = Path("/proc/self/status").read_text().splitlines()
    except OSError:
        return None
    return next((int(line.split()[1]) for line in lines if line.startswith(key + ":")), None)


def _current_rss_bytes() -> int:
    kb = _read_status_kb("VmRSS")
    if kb is not None:
        return kb * 1024
    import psutil

    return psutil.Process().memory_info().rss


def _malloc_trim() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class PeakMemory:
    """Peak memory inside a ``with`` window, on CUDA and on CPU, kept apart.

    On Linux the RSS high-water mark is reset at entry (``echo 5 > /proc/self/clear_refs``) so the peak belongs
    to the window alone; where that is not possible a 20 ms sampling thread stands in (``rss_method`` says which).
    """

    def __init__(self):
        self.cuda = _cuda()
        self.peak_rss_bytes = 0
        self.peak_allocated_bytes = 0
        self.peak_reserved_bytes = 0
        self.rss_method = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self):
        gc.collect()
        _malloc_trim()  # start from a trimmed heap: memory freed before the window is not counted in it
        if self.cuda:  # the caching allocator emptied first: what an earlier trial, seed or step reserved is not
            import torch  # counted in this window (nor trips memory_budget_gb)

            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            Path("/proc/self/clear_refs").write_text("5")
            self.rss_method = "vmhwm"
        except OSError:
            self.rss_method = "sampled"
            self.peak_rss_bytes = _current_rss_bytes()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(0.02):
            self.peak_rss_bytes = max(self.peak_rss_bytes, _current_rss_bytes())

    def __exit__(self, *exc):
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            self.peak_allocated_bytes = torch.cuda.max_memory_allocated()
            self.peak_reserved_bytes = torch.cuda.max_memory_reserved()
        if self.rss_method == "vmhwm":
            self.peak_rss_bytes = (_read_status_kb("VmHWM") or 0) * 1024
        else:
            self._stop.set()
            self._thread.join()
        return False

    def peak_now_bytes(self) -> int:
        """The peak so far inside the window: reserved CUDA memory on a GPU, resident memory on CPU."""
        if self.cuda:
            import torch

            return torch.cuda.max_memory_reserved()
        if self.rss_method == "vmhwm":
            return (_read_status_kb("VmHWM") or 0) * 1024
        return self.peak_rss_bytes

    def metrics(self, prefix: str) -> dict[str, float]:
        out = {f"{prefix}_peak_rss_mb": round(self.peak_rss_bytes / MB, 1)}
        if self.cuda:
            out[f"{prefix}_peak_allocated_mb"] = round(self.peak_allocated_bytes / MB, 1)
            out[f"{prefix}_peak_reserved_mb"] = round(self.peak_reserved_bytes / MB, 1)
        return out


# ---------------------------------------------------------------- training speed


# non_padding_tokens and StepLog: bakeoff.core.step_timing (the figures above, on CPU and on a CUDA GPU)


# ---------------------------------------------------------------- sizes


def count_params(model) -> dict[str, int]:
    """Trainable and total parameters; packed 4-bit weights count as their logical number of elements."""
    import torch

    total = trainable = 0
    for p in model.parameters():
        n = p.numel()
        shape = getattr(p, "quant_state", None)
        if shape is not None and getattr(shape, "shape", None) is not None:
            n = int(torch.Size(shape.shape).numel())
        total += n
        if p.requires_grad:
            trainable += n
    return {"trainable_params": trainable, "total_params": total}


def dir_mb(path: str | Path) -> float:
    """Size on disk of every file under ``path``, in MiB."""
    path = Path(path)
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return round(sum(p.stat().st_size for p in files) / MB, 3)


# ---------------------------------------------------------------- serving


@dataclass
class GenerationLog:
    prompt_tokens: list[int] = field(default_factory=list)
    generated_tokens: int = 0
    seconds: float = 0.0
    resumed: int = 0  # answers taken from an interrupted evaluation's stream, not generated (nor timed) here

    def metrics(self) -> dict[str, float]:
        """The speed of what this call generated: none at all when every answer was resumed (no figure, not 0)."""
        n = max(len(self.prompt_tokens), 1)
        timed = self.generated_tokens and self.seconds
        return {
            **({"gen_tokens_per_s": round(self.generated_tokens / self.seconds, 2)} if timed else {}),
            "prompt_tokens_per_request": round(sum(self.prompt_tokens) / n, 1),
            "gen_wall_s": round(self.seconds, 2),
            **({"gen_resumed": self.resumed} if self.resumed else {}),
        }


@dataclass
class LatencyLog:
    """Per-request wall times at batch 1."""

    seconds: list[float] = field(default_factory=list)
    generated_tokens: int = 0

    def metrics(self, suffix: str = "") -> dict[str, float]:
        if not self.seconds:
            return {}
        import numpy as np

        s = np.asarray(self.seconds)
        return {
            f"latency_p50_s{suffix}": round(float(np.percentile(s, 50)), 4),
            f"latency_p25_s{suffix}": round(float(np.percentile(s, 25)), 4),
            f"latency_p75_s{suffix}": round(float(np.percentile(s, 75)), 4),
            f"latency_p95_s{suffix}": round(float(np.percentile(s, 95)), 4),
            f"latency_tokens_per_s{suffix}": round(self.generated_tokens / float(s.sum()), 2),
        }


# ---------------------------------------------------------------- utilisation


def speed_probe() -> float | None:
    """This machine's speed now in seconds (about 1 s; None without torch): the median of 15 runs, 3 more to warm up,
    of a 2048² matmul (bf16 with bf16 units, else fp32: emulated bf16 took 56 s) and a 64 MB pass."""
    try:
        import torch

        from bakeoff.core.models import cpu_bf16_fast
    except Exception:  # no torch, no probe: estimates stay unscaled
        return None
    dtype = torch.bfloat16 if cpu_bf16_fast() else torch.float32  # what a run computes in here (models.run_dtype)
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(2048, 2048, generator=g).to(dtype) for _ in range(2))
    x = torch.empty(16 * 2**20)
    times = []
    for _ in range(18):
        t = time.perf_counter()
        (a @ b).float().sum()
        x.fill_(1.0)
        x.mul_(1.0001).sum()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times[3:]), 5)

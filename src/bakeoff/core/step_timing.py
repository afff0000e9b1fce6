"""Training speed as ``bakeoff.core.measure`` defines it (``train_tokens_per_s``, ``train_step_s_median``,
``padding_share``): each optimizer step's non-padding tokens and wall time, recorded by the trainer's hooks
(``bakeoff.train.callbacks``). Imported through ``bakeoff.core.measure``; no torch at import.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field


def _cuda() -> bool:
    import torch  # on first use: importing this module (for its definitions and the bootstrap) needs no torch

    return torch.cuda.is_available()


def non_padding_tokens(batch: dict):
    """Tokens the model really computed on in one micro-batch (attention-mask ones; all tokens when packed): an int,
    or on a GPU a 0-d tensor there, summed without waiting for it (``StepLog.settle`` reads it)."""
    mask = batch.get("attention_mask")
    if mask is None:
        return int(batch["input_ids"].numel())
    total = mask.sum()
    return total if total.is_cuda else int(total.item())


def _event():
    """A CUDA event that records its time on the stream; None on CPU."""
    if not _cuda():
        return None
    import torch

    e = torch.cuda.Event(enable_timing=True)
    e.record()
    return e


@dataclass
class StepLog:
    """Per-optimizer-step tokens and wall time, filled by the trainer hooks in bakeoff.train.trainer. On CPU each
    step's time is ``time.perf_counter`` at its ends. On CUDA nothing here makes the loop wait for the GPU: each step
    is timed by two CUDA events recorded on the stream at its ends and its token count summed on the device, and both
    are read once, by ``settle`` (called by ``metrics``), after the last step."""

    warmup_steps_excluded: int = 2
    step_seconds: list[float] = field(default_factory=list)
    step_tokens: list[int] = field(default_factory=list)
    step_padded_tokens: list[int] = field(default_factory=list)
    step_rows: list[int] = field(default_factory=list)
    _t0: float | None = None
    _start: object = None  # CUDA: the step's first event
    _tokens: object = 0  # an int, or a 0-d tensor on the GPU
    _padded: int = 0
    _rows: int = 0
    _pending: list = field(default_factory=list)  # CUDA: (start, end, tokens, padded, rows) of steps not yet read

    def add_micro_batch(self, batch: dict) -> None:
        self._tokens = self._tokens + non_padding_tokens(batch)
        self._padded += int(batch["input_ids"].numel())
        self._rows += int(batch["input_ids"].shape[0])

    def begin_step(self) -> None:
        self._start = _event()
        self._t0 = time.perf_counter()
        self._tokens = self._padded = self._rows = 0

    def end_step(self) -> None:
        if self._t0 is None:
            return
        if self._start is not None:
            self._pending.append((self._start, _event(), self._tokens, self._padded, self._rows))
        else:
            self._append(time.perf_counter() - self._t0, self._tokens, self._padded, self._rows)
        self._t0 = self._start = None

    def _append(self, seconds: float, tokens, padded: int, rows: int) -> None:
        self.step_seconds.append(seconds)
        self.step_tokens.append(int(tokens))
        self.step_padded_tokens.append(padded)
        self.step_rows.append(rows)

    def settle(self) -> None:
        """The GPU's steps read: one wait, for the newest step's end event, then every elapsed time and count."""
        if self._pending:
            self._pending[-1][1].synchronize()
        for start, end, tokens, padded, rows in self._pending:
            self._append(start.elapsed_time(end) / 1000, tokens, padded, rows)
        self._pending.clear()

    def metrics(self) -> dict[str, float]:
        self.settle()
        n = len(self.step_seconds)
        skip = min(self.warmup_steps_excluded, max(n - 1, 0))
        secs, toks = self.step_seconds[skip:], self.step_tokens[skip:]
        out = {
            "train_steps": n,
            "tokens_seen": sum(self.step_tokens),
            "rows_seen": sum(self.step_rows),  # sequences fed to the model (a DPO pair is two)
            "padding_share": round(1 - sum(self.step_tokens) / max(sum(self.step_padded_tokens), 1), 4),
        }
        if secs:
            out["train_tokens_per_s"] = round(sum(toks) / sum(secs), 2)
            out["train_step_s_median"] = round(statistics.median(secs), 4)
        return out

"""TRL's DPOTrainer with its reference pass kept for the process (``CachedRefDPOTrainer``): the reference's
log-probabilities of a set of pairs, once computed, are reused by every later trainer on the same pairs, weights
and precision (a search's trials). Imports TRL when loaded: ``bakeoff.train.techniques.dpo`` loads it when a run
starts.
"""

from __future__ import annotations

import hashlib
import json
import time

from trl import DPOTrainer

_REF_LOGPS: dict[str, tuple[list, list, float]] = {}  # key (``_ref_key``) → (chosen, rejected, seconds the pass took)


def _ref_key(dataset, model_hash: str, args) -> str:
    """What the reference's log-probabilities of ``dataset`` depend on: its tokenized pairs (truncation included),
    the reference's weights (TRL's hash of the module) and the precision the forward pass runs in."""
    cols = [c for c in dataset.column_names if c not in ("ref_chosen_logps", "ref_rejected_logps")]
    h = hashlib.sha256(json.dumps([model_hash, bool(args.bf16), bool(args.fp16), cols]).encode())
    for row in dataset.select_columns(cols).to_list():
        h.update(json.dumps(row, sort_keys=True, default=str).encode())
    return h.hexdigest()


class CachedRefDPOTrainer(DPOTrainer):
    """TRL's DPOTrainer whose precomputed reference log-probabilities are reused within the process: TRL's own cache
    is keyed by the dataset's fingerprint, which is new for every trainer (its tokenizing map is not hashable), so a
    search's every trial would pass over the reference again."""

    reused_ref_s = 0.0  # the measured seconds of the reference passes this run took from an earlier one

    def _precompute_ref_logps(self, dataset, name, batch_size):
        key = _ref_key(dataset, self._precompute_model_hash, self.args)
        if key in _REF_LOGPS:
            chosen, rejected, seconds = _REF_LOGPS[key]
            self.reused_ref_s += seconds
            return dataset.add_column("ref_chosen_logps", chosen).add_column("ref_rejected_logps", rejected)
        t0 = time.perf_counter()
        out = super()._precompute_ref_logps(dataset, name, batch_size)
        _REF_LOGPS[key] = (list(out["ref_chosen_logps"]), list(out["ref_rejected_logps"]), time.perf_counter() - t0)
        return out

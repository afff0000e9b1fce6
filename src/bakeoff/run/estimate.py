"""How long each stage will take: its last measured time here (scaled by the machine's speed now), its search's trials'
recorded time, or a throughput estimate from the default on the reference machine."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core.clock_record import ClockRecord, StageTime
from bakeoff.core.techniques import facts

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


@dataclass(frozen=True)
class Costs:
    """The last resort when nothing was measured here: seconds of each part of a stage for the default model
    (SmolLM2-135M) on the reference machine (REFERENCE_CPU, whose speed probe took REFERENCE_PROBE s), fitted to its
    `make repro` (every stage) and `make quick` (the small budget) and scaled by the probe here now. merge, gguf and
    serve are the export's parts; rescore a test item re-scored there."""

    start: float = 10.0  # a stage's process start, imports and model load
    model: float = 28.0
    data: float = 6.0
    compare: float = 12.0
    other: float = 30.0
    answer: float = 0.28  # an item answered by the base without shots (test or validation), greedy to its end
    shot: float = 0.08  # each shot in the prompt adds this to an answer
    tuned_answer: float = 0.17  # an item answered by a trained variant (short answers), with its loss on validation
    prefs: float = 9.0
    probe: float = 7.5
    lm_eval: float = 0.5  # the side checks, when on
    latency: float = 16.0  # eval.latency_requests timed one at a time (16 there), per timing
    interleaved: float = 7.5  # the export's timing of each evaluated arm again, interleaved in one process
    row_step: float = 0.14  # a row through one supervised optimizer step, and the validation passes at its rate
    dpo_row_step: float = 0.45  # a preference pair through one DPO step (chosen, rejected, the reference model)
    trial: float = 8.0  # a search trial's own start: its model load and its first validation pass
    dpo_trial: float = 20.0  # a DPO trial's: the reference model too, and the task metric on validation
    merge: float = 3.0
    gguf: float = 11.0
    serve: float = 32.0
    rescore: float = 0.13


COST = Costs()
LOWMEM_SLOWER = 2.6  # a row-step against LoRA's with checkpointing and an 8-bit optimizer (each technique's own:
#                     bakeoff.core.techniques.FACTS' cpu_slower)


REFERENCE_PROBE = 0.0254


REFERENCE_PARAMS = 134_515_008


REFERENCE_CPU = "AMD EPYC, 2 cores (AVX512-BF16, no AMX)"


SPEED_BAND = 0.2  # the speed probe (bakeoff.core.measure.speed_probe) varies up to 18% between processes here


def _kind(name: str) -> tuple[str, str | None]:
    kind, _, key = name.partition("@")
    return kind, key or None


def _study_stored(tuned: dict, storage_url: str | None) -> bool | None:
    """Is the study a search recorded still in its storage (then a rerun reuses its trials)? None: cannot tell."""
    study = tuned.get("study")
    if not study:
        return None
    if storage_url and not storage_url.startswith("sqlite:///"):
        return None
    db = Path(storage_url[len("sqlite:///") :]) if storage_url else Path(".bakeoff_tmp/tune.db")
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            return con.execute("select 1 from studies where study_name = ?", (study,)).fetchone() is not None
    except sqlite3.Error:
        return None


class Estimator:
    """Each stage's estimate in seconds and what it rests on; ``probe``: ``bakeoff.core.measure.speed_probe()`` now."""

    def __init__(self, record: dict, params: Params | None = None, probe: float | None = None):
        self.record, self.params, self.probe = ClockRecord.from_dict(record), params, probe
        self.size = 1.0
        source = Path("models/base/bakeoff_source.json")
        try:
            self.size = max(0.05, json.loads(source.read_text())["params"] / REFERENCE_PARAMS)
        except (OSError, ValueError, KeyError, TypeError):
            pass
        try:
            splits = json.loads(Path("data/prepared/stats.json").read_text())["splits"]
            self.n_test, self.n_val = splits["test"], splits["val"]
        except (OSError, ValueError, KeyError, TypeError):
            self.n_test = self.n_val = None

    def __call__(self, name: str) -> tuple[float, str]:
        kind, key = _kind(name)
        if kind in ("tune", "tune_prompt", "tune_from") and key:
            search = self._search(name, key)
            if search is not None:
                return search
        entry = self._stage(name)
        if entry.actual_s is not None:
            where = entry.machine
            f, said = self.speed(entry)
            return float(entry.actual_s) * f, "last run" + (
                f", on {where}" if where and where != self.record.machine else ""
            ) + said
        f, said = self.speed(StageTime(probe_s=REFERENCE_PROBE))
        return self._throughput(kind, key) * f, "throughput estimate" + said.replace("speed now", "speed")

    def _stage(self, name: str) -> StageTime:
        return (self.record.stages or {}).get(name) or StageTime()

    def speed(self, entry: StageTime) -> tuple[float, str]:
        """(factor, words): the probe now over the probe when ``entry`` was timed, within 0.4 to 2.5; 1 within
        ``SPEED_BAND`` (the probe's own spread from one process to the next)."""
        then = entry.probe_s
        if not (self.probe and then):
            return 1.0, ""
        f = min(2.5, max(0.4, self.probe / then))
        return (1.0, "") if abs(f - 1.0) < SPEED_BAND else (f, f", x{f:.2f} for this machine's speed now")

    def _search(self, name: str, key: str) -> tuple[float, str] | None:
        share = getattr(getattr(self.params, "tune", None), "share", None) or {}
        if share.get(key, key) != key:  # it reads another arm's study, searched before it in the same run
            last = self._stage(name).actual_s
            return (float(last) if last is not None else 10.0), f"it takes {share[key]}'s search, which runs first"
        try:
            tuned = json.loads(Path(f"runs/{key}/tuned.json").read_text())
        except (OSError, ValueError):
            return None
        storage = getattr(getattr(self.params, "tune", None), "storage", None)
        stored = _study_stored(tuned, storage)
        if stored is False and tuned.get("tune_wall_s"):
            overhead = 15.0
            f, said = self.speed(self._stage(name))
            return (
                float(tuned["tune_wall_s"]) * f + overhead,
                "its trials' recorded time (its study is not stored here)" + said,
            )
        if stored and name not in (self.record.stages or {}):
            return 10.0, "its study is stored here, so reused"
        return None

    def _rows(self, split: str) -> float:
        """The items of a split the stages answer: the data stage's count, else what params.yaml asks (the default's
        60 test and 46 validation rows where it does not say); the test split capped at eval.max_examples."""
        p, got = self.params, self.n_test if split == "test" else self.n_val
        if got is None:
            want = getattr(p.task, f"{split}_size", None) if p is not None else None
            got = want if isinstance(want, int | float) and want >= 1 else (60 if split == "test" else 46)
        if split == "test" and p is not None and p.eval.max_examples:
            got = min(got, p.eval.max_examples)
        return float(got)

    def _row_steps(self, key: str | None) -> float:
        """A training run's rows through optimizer steps (steps × effective batch; the default's 40 × 16 for a role
        or a name that is no variant)."""
        v = self.params.variants.get(key) if self.params is not None and key else None
        return float(v.train.max_steps * v.train.effective_batch) if v is not None else 640.0

    def _side(self, zero_shot: bool, timings: int) -> float:
        """The side checks an evaluation runs: the probe, lm-eval, latency (``timings`` timings of it), and the
        preference pairs (scored on the base's zero-shot run and on each variant)."""
        p = self.params
        if p is None:
            return COST.probe + COST.lm_eval + COST.latency * timings + COST.prefs
        latency = COST.latency * timings * p.eval.latency_requests / 16.0
        return (
            COST.probe * bool(p.eval.probe)
            + COST.lm_eval * (p.eval.lm_eval != "off")
            + latency
            + COST.prefs * (bool(p.task.prefs) and zero_shot)
        )

    def _answers(self, shots: float, items: float) -> float:
        return items * (COST.answer + COST.shot * shots)

    def _throughput(self, kind: str, key: str | None) -> float:
        """A stage's seconds on the reference machine, added up from its parts (``COST``), for the model's size."""
        p = self.params
        trials = p.tune.trials if p is not None else 4
        if kind in ("model", "data", "compare"):
            return getattr(COST, kind) * (self.size if kind == "model" else 1.0)
        if kind == "export":
            return self._export() * self.size
        if kind in ("baseline", "tune_prompt"):
            b = p.baselines.get(key) if p is not None and key else None
            if b is not None and getattr(b, "endpoint", None):
                return COST.other
            if kind == "tune_prompt":
                if b is None or not b.search or not trials:
                    return 1.0
                grid = b.search.get("shots") or [b.shots]
                return (COST.start + trials * self._answers(sum(grid) / len(grid), self._rows("val"))) * self.size
            shots = b.shots if b is not None else 0
            work = self._answers(shots, self._rows("test") + self._rows("val"))
            return (COST.start + work + self._side(key == "zero_shot", 1)) * self.size
        if kind == "curve" and key:
            return self._curve(key)
        if self._skipped(key):
            return 6.0
        dpo = kind.endswith("_from")
        if kind in ("tune", "tune_from"):
            if not trials:
                return 5.0
            trial = (COST.dpo_trial if dpo else COST.trial) + self._train(key, dpo)
            return (COST.start + trials * trial) * self.size
        if kind in ("train", "train_from"):
            share = getattr(getattr(p, "tune", None), "share", None) or {}
            if trials and share.get(key, key) == key:  # it adopts its search's trial at its own values
                return 6.0
            return (COST.start + self._train(key, dpo)) * self.size
        if kind in ("evaluate", "evaluate_from"):
            work = COST.tuned_answer * (self._rows("test") + self._rows("val"))
            return (COST.start + work + self._side(True, 2)) * self.size
        return COST.other

    def _train(self, key: str | None, dpo: bool) -> float:
        v = self.params.variants.get(key) if self.params is not None and key else None
        slower = 1.0
        if v is not None:
            lowmem = v.train.gradient_checkpointing is True and "8bit" in v.train.optimizer
            slower = LOWMEM_SLOWER if lowmem else facts(v.technique).cpu_slower
        return self._row_steps(key) * (COST.dpo_row_step if dpo else COST.row_step) * slower

    def _skipped(self, key: str | None) -> bool:
        """A variant whose backend needs CUDA (Unsloth), on a machine without an NVIDIA driver: its stages record
        `skipped` in seconds."""
        v = self.params.variants.get(key) if self.params is not None and key else None
        return v is not None and v.backend == "unsloth" and not Path("/proc/driver/nvidia").exists()

    def _export(self) -> float:
        """Merge, GGUF, the merged model re-scored, the served re-score, and every evaluated arm's latency timed
        again interleaved."""
        p = self.params
        if p is None:
            return COST.start + COST.merge + COST.gguf + COST.serve + 60 * COST.rescore
        arms = sum(not self._skipped(n) for n in p.variants) + len(p.baselines)
        return (
            COST.start
            + COST.merge
            + COST.gguf * bool(p.export.gguf)
            + COST.serve * bool(p.export.serve)
            + self._rows("test") * COST.rescore
            + COST.interleaved * arms * p.eval.latency_requests / 16.0
        )

    def _curve(self, key: str) -> float:
        """A share's training run (its part of the arm's under curve.schedule epochs, at least curve.min_steps; the
        arm's whole run under steps) and its answers to the test split; a prompt's share trains nothing."""
        p = self.params
        arm, _, share = key.rpartition("-")
        try:
            f = float(share)
        except ValueError:
            return COST.other
        trains = arm != "best_prompt" and (p is None or arm not in p.baselines)
        epochs = p is not None and getattr(p.curve, "schedule", "steps") == "epochs"
        v = p.variants.get(arm) if p is not None else None
        most = (v.train.max_steps if v is not None else p.train_defaults.max_steps) if p is not None else 0
        part = min(1.0, max(f, p.curve.min_steps / most)) if epochs and most else 1.0
        train = self._train(arm if v is not None else None, False) * part if trains else 0.0
        return (COST.start + train + COST.tuned_answer * 4 * self._rows("test")) * self.size

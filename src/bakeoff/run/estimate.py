"""How long each stage will take: its last measured time here (scaled by the machine's speed now), its search's trials'
recorded time, or a throughput estimate from the default on the reference machine."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

# seconds per stage kind for the default (SmolLM2-135M, 414 train / 46 val / 60 test rows, 40 steps, 4 trials) on the
# reference machine (AMD EPYC, 2 cores, AVX512-BF16): the last resort when nothing was measured here
REFERENCE = {"model": 25, "data": 8, "tune_prompt": 170, "baseline": 72, "baseline_shots": 210, "tune": 350,
             "tune_from": 900, "train": 160, "train_from": 230, "evaluate": 72, "export": 60, "compare": 8, "other": 30}


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
    db = Path(storage_url[len("sqlite:///"):]) if storage_url else Path(".bakeoff_tmp/tune.db")
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            return con.execute("select 1 from studies where study_name = ?", (study,)).fetchone() is not None
    except sqlite3.Error:
        return None


class Estimator:
    """Each stage's estimate in seconds and what it rests on; ``probe``: ``bakeoff.core.measure.speed_probe()`` now."""

    def __init__(self, record: dict, params=None, probe: float | None = None):
        self.record, self.params, self.probe = record, params, probe
        self.size = 1.0
        source = Path("models/base/bakeoff_source.json")
        try:
            self.size = max(0.05, json.loads(source.read_text())["params"] / REFERENCE_PARAMS)
        except (OSError, ValueError, KeyError, TypeError):
            pass
        try:
            self.n_test = json.loads(Path("data/prepared/stats.json").read_text())["splits"]["test"]
        except (OSError, ValueError, KeyError, TypeError):
            self.n_test = None

    def __call__(self, name: str) -> tuple[float, str]:
        kind, key = _kind(name)
        if kind in ("tune", "tune_prompt", "tune_from") and key:
            search = self._search(name, key)
            if search is not None:
                return search
        entry = self.record["stages"].get(name) or {}
        if entry.get("actual_s") is not None:
            where = entry.get("machine")
            f, said = self.speed(entry)
            return float(entry["actual_s"]) * f, "last run" + (
                f", on {where}" if where and where != self.record.get("machine") else "") + said
        return self._throughput(kind, key), "throughput estimate"

    def speed(self, entry: dict) -> tuple[float, str]:
        """(factor, words): the probe now over the probe when ``entry`` was timed, within 0.4 to 2.5; 1 within
        ``SPEED_BAND`` (the probe's own spread from one process to the next)."""
        then = entry.get("probe_s")
        if not (self.probe and then):
            return 1.0, ""
        f = min(2.5, max(0.4, self.probe / then))
        return (1.0, "") if abs(f - 1.0) < SPEED_BAND else (f, f", x{f:.2f} for this machine's speed now")

    def _search(self, name: str, key: str) -> tuple[float, str] | None:
        share = getattr(getattr(self.params, "tune", None), "share", None) or {}
        if share.get(key, key) != key:  # it reads another arm's study, searched before it in the same run
            entry = self.record["stages"].get(name) or {}
            last = entry.get("actual_s")
            return (float(last) if last is not None else 10.0), f"it takes {share[key]}'s search, which runs first"
        try:
            tuned = json.loads(Path(f"runs/{key}/tuned.json").read_text())
        except (OSError, ValueError):
            return None
        storage = getattr(getattr(self.params, "tune", None), "storage", None)
        stored = _study_stored(tuned, storage)
        if stored is False and tuned.get("tune_wall_s"):
            overhead = 15.0
            f, said = self.speed(self.record["stages"].get(name) or {})
            return (float(tuned["tune_wall_s"]) * f + overhead,
                    "its trials' recorded time (its study is not stored here)" + said)
        if stored and name not in self.record["stages"]:
            return 10.0, "its study is stored here, so reused"
        return None

    def _steps(self, key: str | None) -> float:
        """The variant's optimizer steps over the reference's (a derived variant, DPO, has 20 there, the others 40);
        1 for a role or a name that is no variant."""
        v = self.params.variants.get(key) if self.params is not None and key else None
        return (v.train.max_steps / (20.0 if v.parent else 40.0)) if v is not None else 1.0

    def _throughput(self, kind: str, key: str | None) -> float:
        p = self.params
        test = (self.n_test or 60) / 60.0
        if p is not None and p.eval.max_examples:
            test = min(test, p.eval.max_examples / 60.0)
        trials = (p.tune.trials if p is not None else 4) / 4.0
        if kind in ("model", "data", "export", "compare"):
            return REFERENCE[kind] * (self.size if kind in ("model", "export") else 1.0)
        if kind in ("baseline", "tune_prompt"):
            b = (p.baselines.get(key) if p is not None and key else None)
            if b is not None and getattr(b, "endpoint", None):
                return REFERENCE["other"]
            if kind == "tune_prompt":
                return REFERENCE["tune_prompt"] * trials * self.size if b is not None and b.search else 5.0
            shots = b.shots if b is not None else 0
            return REFERENCE["baseline_shots" if shots else "baseline"] * test * self.size
        if kind == "curve" and key:  # a share's training run and its answers to the test split
            arm, _, share = key.rpartition("-")
            try:
                f = float(share)
            except ValueError:
                return REFERENCE["other"]
            trains = arm != "best_prompt" and (p is None or arm not in p.baselines)
            # curve.schedule steps: every share trains the arm's own steps, so it costs the arm's whole training
            # run whatever its share; epochs (the default): the share's part of it, at least curve.min_steps (as
            # bakeoff.evaluate.curve.steps_at trains it)
            epochs = p is not None and getattr(p.curve, "schedule", "steps") == "epochs"
            v = p.variants.get(arm) if p is not None else None
            most = (v.train.max_steps if v is not None else p.train_defaults.max_steps) if p is not None else 0
            part = min(1.0, max(f, p.curve.min_steps / most)) if epochs and most else 1.0
            return ((REFERENCE["train"] * self._steps(arm) * part if trains else 0.0) + REFERENCE["evaluate"] * test / 3
                    + 15.0) * self.size
        steps = self._steps(key)
        if kind in ("tune", "tune_from"):
            return REFERENCE[kind] * trials * steps * self.size if (p is None or p.tune.trials) else 5.0
        if kind in ("train", "train_from"):
            return REFERENCE[kind] * steps * self.size
        if kind in ("evaluate", "evaluate_from"):
            return REFERENCE["evaluate"] * test * self.size
        return REFERENCE["other"]

"""Every path the stages share, where each run's record lives, and how a failure becomes a status.

    models/base/                  the resolved base model (stage `model`)
    data/prepared/                the checked, split task (stage `data`)
    .bakeoff_tmp/<name>/          a run's scratch: checkpoints to resume from, lm-eval task files
    runs/<name>/train.json        training record of a variant (status, MLflow run id, measured figures)
    runs/<name>/eval.json         evaluation record of a baseline or variant
    runs/<name>/predictions.jsonl per-example outputs
    models/variants/<name>/       what a variant saved (adapter or full weights)

Records are written atomically (temporary file, then rename), so a killed stage never leaves a half-written
record that a later stage would take as valid.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import traceback
from enum import StrEnum
from pathlib import Path

BASE = Path("models/base")
PREPARED = Path("data/prepared")
RUNS = Path("runs")
VARIANTS = Path("models/variants")
TMP = Path(".bakeoff_tmp")
CURVE = Path("reports/curve")  # the curve stage's points: reports/curve/<arm>-<share>/{point.json,predictions.jsonl}


class Status(StrEnum):
    """The one vocabulary of a run's outcome (its record's ``status``; the JSON holds the plain word)."""

    OK = "ok"
    OOM = "oom"  # out of memory, or past memory_budget_gb: the peak it reached is kept
    SKIPPED = "skipped"  # the platform cannot run it (fp16 on CPU, Unsloth without a GPU): the reason is kept
    FAILED = "failed"  # any other exception: its message and the last frames


STATUSES = tuple(Status)


def repo_root() -> Path:
    """The project's root; inside a DVC temporary experiment, the workspace it was started from."""
    here = Path.cwd().resolve()
    parts = here.parts
    if ".dvc" in parts:  # .dvc/tmp/exps/<name>/... → the workspace that owns .dvc
        return Path(*parts[: parts.index(".dvc")])
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True)
        return Path(top.stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        return here


def git_commit() -> str:
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        return r.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


STACK = (
    "torch",
    "transformers",
    "peft",
    "trl",
    "accelerate",
    "datasets",
    "bitsandbytes",
    "unsloth",
    "lm_eval",
    "mlflow",
    "dvc",
    "pandas",
    "numpy",
)


def provenance(data_hash: str | None, base_dir: Path | None = None) -> dict:
    """What a result traces back to: library versions, the data's hash (the data stage's ``data_hash``), the git
    commit, the machine and the base model's source."""
    import importlib.metadata as md
    import platform

    versions = {}
    for name in STACK:
        try:
            versions[name] = md.version(name.replace("_", "-"))
        except md.PackageNotFoundError:
            versions[name] = None
    source = read_json(Path(base_dir) / "bakeoff_source.json") if base_dir else None
    return {
        "data_hash": data_hash,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "device": device_name(),
        "versions": versions,
        "base_model": source,
    }


def device_name() -> str:
    """What the figures were measured on, in words: the CUDA card, else the CPU's model name, its physical cores (and
    logical CPUs where they differ) and the bf16 features that change its speed (AMX, AVX512-BF16), read from
    /proc/cpuinfo (no torch import). The threads torch computes with are a record's ``torch_threads`` and the
    clock's machine line (``machine_line``), so a record's device names the hardware alone."""
    import shutil

    from bakeoff.core import threads

    if shutil.which("nvidia-smi"):
        try:
            r = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
            if r.returncode == 0 and r.stdout.strip():
                return r.stdout.strip().splitlines()[0]
        except (OSError, subprocess.SubprocessError):
            pass
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{threads.logical()}-CPU machine"
    name = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), "CPU")
    flags = next((ln.split(":", 1)[1].split() for ln in info.splitlines() if ln.startswith("flags")), [])
    feats = "AMX" if "amx_bf16" in flags else "AVX512-BF16, no AMX" if "avx512_bf16" in flags else "no bf16 units"
    n, cpus = threads.cores(info), threads.logical()
    where = f"{n} {'core' if n == 1 else 'cores'}" + ("" if n == cpus else f", {cpus} logical CPUs")
    return f"{name}, {where} ({feats})"


def stamp_device(record: dict) -> dict:
    """What a record's figures were measured on: ``device`` (the hardware) and ``torch_threads``."""
    from bakeoff.core import threads

    record["device"], record["torch_threads"] = device_name(), threads.in_use()
    return record


def machine_line() -> str:
    """The device and the threads torch computes with in this process: the clock's machine line."""
    from bakeoff.core import threads

    n = threads.in_use()
    return f"{device_name()}, {n} torch {'thread' if n == 1 else 'threads'}"


SEVERAL = "several machines: "


def measured_on(names: list[str], here: str) -> str:
    """The machine the runs' figures were measured on: ``here`` when every record (``device``, written by the stage
    that measured it) names it or none does; else "several machines: X (lora, dpo); Y (full)" (bakeoff.run.worker)."""
    by: dict[str, list[str]] = {}
    for n in names:
        for path in (train_record(n), eval_record(n)):
            device = (read_json(path) or {}).get("device")
            if device and n not in by.setdefault(device, []):
                by[device].append(n)
    if len(by) <= 1:
        return next(iter(by), here)
    return SEVERAL + "; ".join(f"{d} ({', '.join(ns)})" for d, ns in by.items())


def work_dir(name: str) -> Path:
    """A run's scratch folder (checkpoints, lm-eval task files); not a stage output."""
    return TMP / name


def train_record(name: str) -> Path:
    return RUNS / name / "train.json"


def eval_record(name: str) -> Path:
    return RUNS / name / "eval.json"


def tuned_record(name: str) -> Path:
    """What the tune stage chose for ``name`` (``values``), and what the search cost."""
    return RUNS / name / "tuned.json"


def predictions(name: str) -> Path:
    return RUNS / name / "predictions.jsonl"


def variant_dir(name: str) -> Path:
    return VARIANTS / name


def curve_point_dir(arm: str, share: float) -> Path:
    """A data-value curve's point: curve arm ``arm`` (a role or a run) at ``share`` of the training split."""
    return CURVE / f"{arm}-{share}"


def seed_dir(name: str, seed: int) -> Path:
    """Where a variant's extra training seed saves its model (inside the variant's folder, so one DVC output)."""
    return VARIANTS / name / "seeds" / f"seed-{seed}"


def write_json(path: str | Path, obj) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    os.replace(tmp, path)


def read_json(path: str | Path) -> dict | None:
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def fresh_dir(path: str | Path) -> Path:
    """Empty ``path`` (this stage's own output) before writing it again."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


class Skipped(Exception):
    """Raised by a technique the platform cannot run; becomes status ``skipped`` with the reason."""


def classify(exc: BaseException) -> tuple[Status, str]:
    """(status, reason) for an exception raised while a run was training or evaluating."""
    import torch

    from bakeoff.core.secrets import scrub

    text = scrub(f"{type(exc).__name__}: {exc}".strip())
    if isinstance(exc, Skipped):
        return Status.SKIPPED, str(exc)
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or "out of memory" in str(exc).lower():
        return Status.OOM, text[:2000]
    return Status.FAILED, text[:2000] + "\n" + scrub("".join(traceback.format_tb(exc.__traceback__, limit=-3)))


def guarded(record: dict, work) -> dict:
    """Run ``work()`` (returns metrics) and record ``ok`` with them, or the status and reason it failed with."""
    try:
        record.update(status=Status.OK, metrics=work())
    except Exception as e:  # any failure is this run's result, not the pipeline's end
        status, reason = classify(e)
        # an `oom` keeps the peak it reached (and the steps it managed); the others keep nothing half-measured
        kept = getattr(e, "partial_metrics", {}) if status == Status.OOM else {}
        record.update(status=status, error=reason, metrics=kept)
    return record


def finish(record: dict, path: Path) -> None:
    """A stage's last step: the machine its figures were measured on (``bakeoff.run.worker``: per machine), the
    record written to ``path``, its one line printed."""
    stamp_device(record)
    write_json(path, record)
    print(f"[{record['name']}] {record['status']}: {summary(record)}")


def summary(
    record: dict,
    keys=(
        "quality",
        "val_loss",
        "gen_tokens_per_s",
        "latency_p50_s",
        "lm_eval_exact_match",
        "pref_accuracy",
        "train_tokens_per_s",
    ),
) -> str:
    """A one-line summary of a record for the stage's last line of output."""
    if record.get("status") != "ok":
        return str(record.get("error", "")).split("\n")[0]
    m = record.get("metrics") or {}
    return ", ".join(f"{k}={m[k]}" for k in keys if k in m)


class Resume:
    """Answers streamed to ``path`` as each batch finishes, so a killed evaluation resumes without generating them
    again. ``key`` names what produced them (the trained run, the serving dtype, the generation budget): a file
    written under another key is discarded. An answer is reused only for the same rendered prompt."""

    def __init__(self, path, key: str):
        self.path, self.key, self.done = Path(path), key, {}
        cut = False  # the stream ends inside a line the kill cut short: the next answer starts a line of its own
        if self.path.exists():
            text = self.path.read_text()
            cut = bool(text) and not text.endswith("\n")
            lines = text.splitlines()
            head = json.loads(lines[0]) if lines else {}
            if head.get("key") == key:
                for line in lines[1:]:
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:  # the line the kill cut short
                        continue
                    self.done[row["prompt"]] = row["answer"]
        if not self.done:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"key": key}) + "\n")
        self._f = open(self.path, "a")  # noqa: SIM115  held open for the run: one line appended per answer
        if cut and self.done:
            self._f.write("\n")

    def add(self, prompt: str, answer: str) -> None:
        self._f.write(json.dumps({"prompt": prompt, "answer": answer}) + "\n")

    def flush(self) -> None:
        self._f.flush()

    def finish(self) -> None:
        """All answers are in the caller's hands: the stream is no longer needed."""
        self._f.close()
        self.path.unlink(missing_ok=True)

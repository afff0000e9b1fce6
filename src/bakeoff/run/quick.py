"""A quick look: the same pipeline on a small budget, for a first answer in minutes (``make quick``).

    python -m bakeoff.run.quick          builds quick/ from params.yaml, then runs `python -m bakeoff.run.clock` there

The same dvc.yaml, stages and code as the full run, in a workspace of its own (``quick/``, ignored by git), so it
never touches the full run's results, dvc.lock or searches. Its params.yaml is yours with a smaller budget:

- the base as it is and your prompting baselines (endpoint baselines left out: they cost money per call), each search
  at most 3 shots, as written (``TRIALS`` trials: no search);
- one LoRA variant (your ``lora``, else your first LoRA variant, else a default one), as written but at most ``STEPS``
  steps of ``BATCH`` rows at the top of its searched learning-rate range (a short schedule wants it), no search;
  no derived variants (DPO, so no preference pairs), no other techniques;
- ``EXAMPLES`` test items and ``VAL`` validation rows (when val is carved from train), no forgetting probe and no
  lm-eval cross-check, no latency timing, the export without its GGUF and served re-score.

The report and the MLflow experiment (``<experiment> (quick look)``) say it is a quick look, with the interval that
shows why; the full bake-off is ``make repro``. DVC's cache is shared with the project (``.dvc/cache``), so the
model and data stages are restored from it when the full run already made them.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

QUICK_DIR = Path("quick")
OVERLAY = Path(__file__).resolve().parents[3] / "configs" / "quick.yaml"  # the quick look's budget, one file
SPEC = yaml.safe_load(OVERLAY.read_text())
TRIALS = SPEC["at_most"]["tune"]["trials"]
STEPS = SPEC["lora"]["max_steps"]
BATCH = SPEC["lora"]["batch"]
VAL = SPEC["val_rows"]
EXAMPLES = SPEC["at_most"]["eval"]["max_examples"]
SHOTS = SPEC["max_shots"]
SUFFIX = SPEC["experiment_suffix"]


def overlay(raw: dict, spec: dict = SPEC) -> dict:
    """A copy of ``raw`` (params.yaml as read) with configs/quick.yaml's changes: every key under ``set`` replaced (a
    mapping with keys merged key by key, an empty one replacing the section), every dotted key in ``drop`` removed,
    every key under ``at_most`` capped (unset or null takes the cap; 0 stays 0)."""
    q = copy.deepcopy(raw)

    def put(into: dict, changes: dict) -> None:
        for k, val in changes.items():
            if isinstance(val, dict) and val and isinstance(into.get(k), dict):
                put(into[k], val)
            else:
                into[k] = copy.deepcopy(val) if not (isinstance(val, dict) and val) else dict(val)

    def cap(into: dict, caps: dict) -> None:
        for k, val in caps.items():
            if isinstance(val, dict):
                into[k] = dict(into.get(k) or {})
                cap(into[k], val)
            else:
                into[k] = val if into.get(k) is None else min(type(val)(into[k]), val)

    put(q, spec.get("set") or {})
    for dotted in spec.get("drop") or []:
        *path, last = dotted.split(".")
        node = q
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            node.pop(last, None)
    cap(q, spec.get("at_most") or {})
    return q


def pick_lora(variants: dict) -> tuple[str, dict]:
    """The one LoRA variant a quick look trains: ``lora``, else the first PEFT LoRA variant, else a default."""

    def is_peft_lora(v):
        return isinstance(v, dict) and v.get("technique") == "lora" and v.get("backend", "peft") == "peft"

    if is_peft_lora(variants.get("lora")):
        return "lora", dict(variants["lora"])
    for name, v in variants.items():
        if is_peft_lora(v):
            return name, dict(v)
    return "lora", {"technique": "lora"}


def quick_baselines(raw: dict, changes: list[str]) -> dict:
    """Your prompting baselines on the quick budget: at most ``SHOTS`` shots, no paid endpoint; each change said in
    ``changes``."""
    baselines = {}
    for name, b in (raw.get("baselines") or {}).items():
        b = dict(b or {})
        if b.get("endpoint"):
            changes.append(f"`{name}` left out (an endpoint: it costs money per call)")
            continue
        search = b.get("search")
        if isinstance(search, dict) and isinstance(search.get("shots"), list):
            small = [s for s in search["shots"] if isinstance(s, int) and s <= SHOTS]
            b["search"] = {**search, "shots": small or [min(search["shots"])]}
            if b["search"]["shots"] != search["shots"] and TRIALS:  # no search: the shots as written
                changes.append(f"`{name}` searched {b['search']['shots']} shots of your {search['shots']}")
        if isinstance(b.get("shots"), int) and b["shots"] > SHOTS:
            changes.append(f"`{name}` at {SHOTS} shots, not your {b['shots']}")
            b["shots"] = SHOTS
        baselines[name] = b
    return baselines or {"zero_shot": {"shots": 0}}


def overrides(raw: dict) -> dict:
    """Your params (as read from params.yaml) on the quick look's budget: configs/quick.yaml's overlay, then the
    choices that depend on your params (your baselines capped, one LoRA variant, the split, the experiment)."""
    q, changes = overlay(raw), []
    q["baselines"] = quick_baselines(raw, changes)
    name, v = pick_lora(raw.get("variants") or {})
    defaults = raw.get("train_defaults") or {}
    steps = v.get("max_steps") or defaults.get("max_steps") or STEPS
    v["max_steps"] = min(int(steps), STEPS)
    v["eval_steps"] = max(1, v["max_steps"] // 2)  # two judgements a run: enough to stop early, half the cost
    # fewer, smaller steps: a batch of BATCH rows (no accumulation) and the rate it trains at raised to the
    # top of the technique's searched range (a short schedule wants the higher end; the full run searches lower)
    v["effective_batch"] = v["micro_batch"] = min(
        int(v.get("effective_batch") or defaults.get("effective_batch") or BATCH), BATCH
    )
    high = (((raw.get("tune") or {}).get("spaces") or {}).get("lora") or {}).get("lr", {}).get("high")
    lr = float(v.get("lr") or defaults.get("lr") or 1e-3)
    v["lr"] = float(high) if high and float(high) > lr else lr
    if v["lr"] != lr:
        changes.append(
            f"`{name}`'s rate raised to {v['lr']:g} (your {lr:g}), the top of its searched range, for "
            f"its short schedule"
        )
    changes.append(f"`{name}` at most {v['max_steps']} steps of {v['effective_batch']} rows")
    q["variants"] = {name: v}
    task = q["task"]
    if not task.get("val") and (task.get("val_size", "auto") == "auto" or float(task["val_size"]) > VAL):
        task["val_size"] = VAL  # the split searches and winners are judged on, carved from train: smaller, quicker
    q["verdict"]["quick_look_changes"] = changes
    tracking = dict(raw.get("tracking") or {})
    tracking["experiment"] = (tracking.get("experiment") or (raw.get("task") or {}).get("name") or "bakeoff") + SUFFIX
    q["tracking"] = tracking
    return q


def _copy(src: Path, dest: Path) -> None:
    if src.is_dir():
        shutil.copytree(
            src,
            dest,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "prepared", "prepared.tmp"),
        )
    elif src.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)


HEADER = (
    "# The quick look's params (python -m bakeoff.run.quick wrote this from ../params.yaml; edit that one):\n"
    "# the same pipeline on a small budget. The full bake-off: make repro in the project's root.\n"
)


def build(
    root: Path = Path("."), dest: Path | None = None, source: Path | None = None, transform=None, header: str = HEADER
) -> Path:
    """quick/ (or ``dest``) with the project's pipeline, code and data, and a params.yaml: ``source`` (default the
    project's params.yaml) through ``transform`` (default the quick look's ``overrides``); returns it."""
    from bakeoff.core.config import load_params
    from bakeoff.decide.sizing import GPU_CHECK

    root = root.resolve()
    dest = (dest or root / QUICK_DIR).resolve()
    source = Path(source) if source else root / "params.yaml"
    load_params(source)  # your params' own errors, with their lines, before anything is copied
    raw = yaml.safe_load(source.read_text()) or {}
    dest.mkdir(parents=True, exist_ok=True)
    for part in ("dvc.yaml", "stages", "src", "data", "configs"):
        _copy(root / part, dest / part)
    (dest / "reports" / "curve").mkdir(parents=True, exist_ok=True)  # compare reads the curve's points there
    (dest / "reports" / "curve" / ".gitkeep").touch()
    if (root / GPU_CHECK).exists():  # the GPU check's record: the report says which sizing figures it measured
        _copy(root / GPU_CHECK, dest / GPU_CHECK)
    for key in ("train", "val", "test", "prefs"):  # task files outside data/
        path = (raw.get("task") or {}).get(key)
        if isinstance(path, str) and not Path(path).is_absolute() and not path.startswith("data/"):
            _copy(root / path, dest / path)
    (dest / "params.yaml").write_text(header + yaml.safe_dump((transform or overrides)(raw), sort_keys=False))
    load_params(dest / "params.yaml")
    if not (dest / ".dvc").exists():
        subprocess.run(["dvc", "init", "--no-scm", "--quiet"], cwd=dest, check=True)
    cache = root / ".dvc" / "cache"
    if (root / ".dvc").exists():
        subprocess.run(["dvc", "config", "--local", "cache.dir", str(cache)], cwd=dest, check=True)
    return dest


def absolute_uri(params_path: Path) -> str:
    """The MLflow tracking URI ``params_path`` names, a relative SQLite file made absolute (a workspace of its own
    runs in another folder and logs to the same store)."""
    from bakeoff.core import tracking
    from bakeoff.core.config import load_params

    uri = tracking.tracking_uri(load_params(params_path))
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///") :]).is_absolute():
        uri = f"sqlite:///{Path(uri[len('sqlite:///') :]).resolve()}"
    return uri


def main(params: str | Path = "params.yaml") -> int:
    """The quick look of ``params`` (``bakeoff quick [--params FILE]``), in quick/."""
    from bakeoff.core.schema import without_secret

    t0 = time.perf_counter()
    uri = absolute_uri(Path(params))
    dest = build(source=Path(params))
    print(
        f"[quick] a quick look in {dest}: {EXAMPLES} test items, the base, your prompting baselines (as written, "
        f"no search) and one LoRA (≤ {STEPS} steps of {BATCH} rows, no search); MLflow: "
        f"{without_secret(uri)}",
        flush=True,
    )
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    rc = subprocess.run([sys.executable, "-m", "bakeoff.run.clock"], cwd=dest, env=env, check=False).returncode
    print(
        f"[quick] {'done' if rc == 0 else 'FAILED'} in {time.perf_counter() - t0:.0f} s: "
        f"{dest / 'reports' / 'comparison.md'}; the full bake-off (every technique, full searches): make repro",
        flush=True,
    )
    return rc


if __name__ == "__main__":
    sys.exit(main())

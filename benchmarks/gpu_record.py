"""The GPU check's record (``benchmarks/gpu_check.py``): its targets, its table, sizing's figures from it, several
device calls' records merged and rescored by today's memory model."""

from __future__ import annotations

import subprocess

from gpu_step import ROOT, SETUP_FIELDS, SHAPES, predict
from targets import Targets

# the model shape each part trained (its rows keep the rest of what ran: ``setup``)
PART_SHAPES = {"8b": "8b", "mfu": "1b", "unsloth": "1b"}


def rescored_from(paths: list[str], records: list[dict]) -> list[str]:
    """The device calls a rescored record came from: a record rescored before names its own calls, not its path."""
    return [f for p, r in zip(paths, records) for f in ((r.get("rescored") or {}).get("from") or [p])]


def rescore(res: dict) -> dict:
    """Every CUDA row's prediction again with today's memory model (the figures as run kept in ``as_run``): a
    recalibration is checked against the peaks already measured, without the GPU."""
    for part, shape in PART_SHAPES.items():
        for r in ((res.get(part) or {}).get("rows") or {}).values():
            if not r.get("measured_gb"):
                continue
            r.setdefault("as_run", {"predicted_gb": r.get("predicted_gb"), "error_vs_model": r.get("error_vs_model")})
            predicted = predict(
                SHAPES[shape], {k: v for k, v in r["setup"].items() if k in SETUP_FIELDS}, r["context_mb"]
            )
            r["predicted_gb"] = round(predicted, 2)
            r["error_vs_model"] = round((predicted - r["measured_gb"]) / r["measured_gb"], 3)
    return res


# what the GPU run must show (README "On a GPU"); torchtune measured 7.4 GiB for Llama-3 8B QLoRA at 2 x 2048 packed
GIB = 1024**3 / 1e9  # measured_gb is in 1e9 bytes; the targets are in GiB


EXPECTED_NOT_OK = {"full_oom": "oom"}  # the pipeline's forced fault: its run must end `oom`


def check_targets(res: dict, targets: Targets, tiny: bool) -> None:
    """Every target, printed as met or MISSED (``targets.exit()`` exits 1 on a miss). On CPU (``tiny``) the CUDA
    figures do not exist: what is checked there is that every part ran and every pipeline status is as expected
    (Unsloth skipped without CUDA)."""
    failed = [
        p
        for p in ("env", "pipeline", "8b", "unsloth", "mfu", "profile")
        if p in res and str(res[p].get("status", "")).startswith(("failed", "not run", "timeout"))
    ]
    targets.at_most("parts_failed", len(failed), 0)
    if failed:
        for p in failed:
            print(f"  part {p}: {res[p].get('status')}")
    runs_ = (res.get("pipeline") or {}).get("runs") or {}
    allowed = {**EXPECTED_NOT_OK, **({"unsloth": "skipped"} if tiny else {})}
    wrong = [
        n
        for n, r in runs_.items()
        if r.get("train") != allowed.get(n, "ok") or (n not in allowed and r.get("eval") != "ok")
    ]
    if runs_:
        targets.at_most("pipeline_statuses_wrong", len(wrong), 0)
        for n in wrong:
            got = runs_[n]
            print(f"  pipeline {n}: train {got.get('train')}, eval {got.get('eval')}: {got.get('error')}")
    if tiny:
        return
    eight = (res.get("8b") or {}).get("rows") or {}
    one = (res.get("mfu") or {}).get("rows") or {}
    gb = lambda r: (r or {}).get("measured_gb")
    if gb(eight.get("qlora")) is not None:
        targets.at_most("qlora_8b_peak_gib", round(gb(eight["qlora"]) / GIB, 2), 22.0)
    if gb(eight.get("qlora + checkpointing")) is not None:
        targets.at_most("qlora_8b_checkpointed_peak_gib", round(gb(eight["qlora + checkpointing"]) / GIB, 2), 10.0)
    for shape, rows_ in (("8b", eight), ("1b", one)):
        if gb(rows_.get("qlora")) is not None and gb(rows_.get("lora")):
            targets.at_most(f"qlora_over_lora_peak_{shape}", round(gb(rows_["qlora"]) / gb(rows_["lora"]), 3), 0.6)
    for shape, rows_ in (("8b", eight), ("1b", one)):
        for name, r in rows_.items():
            if isinstance(r.get("error_vs_model"), (int, float)):
                targets.at_most(
                    f"sizing_error_{shape}_{name.replace(' ', '_')}", round(abs(r["error_vs_model"]), 3), 0.10
                )
    for name, floor in (("full", 0.35), ("lora", 0.25)):
        if isinstance((one.get(name) or {}).get("mfu"), (int, float)):
            targets.at_least(f"mfu_1b_{name}", one[name]["mfu"], floor)
        else:
            targets.at_least(f"mfu_1b_{name}", 0.0, floor)  # not measured: a miss, never a silent pass
    u = (res.get("unsloth") or {}).get("rows") or {}
    targets.equal("unsloth_ran", (u.get("unsloth") or {}).get("status"), "ok")


def table(res: dict) -> str:
    lines = [
        (
            f"{'part':<10} {'row':<24} {'status':<8} {'peak GB':>8} {'model GB':>8} {'err':>6} {'tok/s':>9} "
            f"{'loss':>7} {'mfu':>6}  dtypes / notes"
        )
    ]

    def row(part, name, r):
        f = lambda k, fmt: format(r[k], fmt) if isinstance(r.get(k), (int, float)) else "-"
        dt = r.get("dtypes") or {}
        note = ", ".join(f"{k} {v}" for k, v in dt.items()) if dt else (r.get("error") or "")[:60]
        lines.append(
            f"{part:<10} {name:<24} {str(r.get('status') or r.get('train'))[:8]:<8} "
            f"{f('measured_gb', '.2f'):>8} "
            f"{f('predicted_gb', '.2f'):>8} {f('error_vs_model', '+.0%'):>6} {f('tokens_per_s', ',.0f'):>9} "
            f"{f('loss_final', '.3f'):>7} {f('mfu', '.1%'):>6}  {note}"
        )

    e = res.get("env", {})
    lines.append(
        f"{'env':<10} {e.get('device', 'CPU')} cc {e.get('capability', '-')} bf16 native "
        f"{e.get('bf16_native', '-')} auto → {e.get('precision_auto')}"
    )
    for part in ("pipeline", "8b", "unsloth", "mfu"):
        p = res.get(part) or {}
        if "rows" not in p and "runs" not in p:
            lines.append(f"{part:<10} {'':<24} {p.get('status', 'not run')}")
            continue
        for name, r in (p.get("rows") or p.get("runs")).items():
            row(part, name, r)
    for name, r in ((res.get("profile") or {}).get("rows") or {}).items():
        if r.get("busy_s") is None:
            lines.append(f"{'profile':<10} {name:<24} {str(r.get('status'))[:8]:<8} {r.get('error') or ''}")
            continue
        groups = ", ".join(f"{g} {x:.0%}" for g, x in list(r["groups"].items())[:5])
        lines.append(
            f"{'profile':<10} {name:<24} {r['on']} busy {r['busy_s']:.3f} s of a {r['step_wall_s']:.3f} s "
            f"step ({r['busy_share']:.0%}): {groups}"
        )
    return "\n".join(lines)


def sizing_figures(res: dict) -> dict:
    """What sizing takes from this card: per technique the utilisation its time estimate divides by (the 1B rows'
    HFU: the MFU of a run without checkpointing, recompute counted in one with it; ``sizing.mfu``) and the CUDA
    context one process holds (``sizing.cuda_overhead_gb``), each to two decimals as params.yaml takes them."""
    from bakeoff.core.flops import hfu

    mfu = res.get("mfu") or {}
    peak = (mfu.get("peak_tflops") or 0) * 1e12
    out: dict = {"mfu": {}}
    for name in ("full", "lora", "qlora"):
        r = (mfu.get("rows") or {}).get(name) or {}
        if peak and r.get("tokens_per_s") and r.get("flop_params"):
            out["mfu"][name] = round(
                hfu(r["tokens_per_s"], r["flop_params"], name, peak, bool(r.get("gradient_checkpointing"))), 2
            )
    contexts = [
        r["context_mb"]
        for p in ("8b", "mfu", "unsloth")
        for r in ((res.get(p) or {}).get("rows") or {}).values()
        if r.get("context_mb")
    ]
    if contexts:
        out["cuda_overhead_gb"] = round(max(contexts) * 2**20 / 1e9, 2)
    return out


def merged(records: list[dict]) -> dict:
    """Several calls' records as one: each later record's parts over the earlier ones', except a part it did not
    run. What is worked out from the parts (table, targets, sizing) and a rescoring's provenance are left out."""
    out: dict = {}
    for rec in records:
        for k, v in rec.items():
            if k in ("table", "targets", "sizing", "sizing_mfu", "rescored"):
                continue
            if isinstance(v, dict) and str(v.get("status", "")).startswith("not run") and k in out:
                continue
            out[k] = v
    return out


def git_head() -> str | None:
    try:
        r = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError:
        return None
    return r.stdout.strip() or None

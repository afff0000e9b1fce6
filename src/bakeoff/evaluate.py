"""The one evaluation every baseline and variant goes through: generation, log-probabilities (validation loss,
preference pairs, label choice), latency at batch 1.

Greedy decoding, batched with left padding (prompts sorted by length so a batch pads little), in the base
model's chat template. The primary metric (``bakeoff.metrics``) is named by ``task.metric``; every run also gets the validation
loss of the completion given that run's own prompt (a few-shot baseline is scored with its shots).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from typing import Callable

import torch
from tqdm.auto import tqdm

from bakeoff.data import Example, Pair
from bakeoff.measure import GenerationLog, LatencyLog
from bakeoff.metrics import all_metrics, exact_match, loose_match, preference_metrics, score
from bakeoff.prompts import encode, prompt_and_full, render_prompt

# ---------------------------------------------------------------- generation

@torch.inference_mode()
def generate(model, tok, prompts: list[list[dict]], max_new_tokens: int, batch_size: int = 16,
             desc: str = "generate", progress: bool = True) -> tuple[list[str], GenerationLog]:
    """Greedy completions for chat prompts, in the input order."""
    log = GenerationLog()
    encoded = [encode(tok, render_prompt(tok, m)) for m in prompts]
    log.prompt_tokens = [len(e) for e in encoded]
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
    outputs: list[str | None] = [None] * len(encoded)
    eos = tok.convert_tokens_to_ids(tok.eos_token) if tok.eos_token else None
    configured = getattr(model.generation_config, "eos_token_id", None)
    configured = configured if isinstance(configured, list) else [configured]
    stop = {t for t in [eos, *configured] if isinstance(t, int)}
    pad = tok.pad_token_id
    dev = next(model.parameters()).device
    bar = tqdm(total=len(encoded), desc=desc, unit="ex", leave=False, disable=not progress)
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


# ---------------------------------------------------------------- log-probabilities

@torch.inference_mode()
def completion_logprobs(model, tok, prompts: list[list[dict]], completions: list[str],
                        batch_size: int = 8) -> list[tuple[float, int]]:
    """Per row: (sum of the completion tokens' log-probabilities given the prompt, number of those tokens)."""
    dev = next(model.parameters()).device
    rows = [prompt_and_full(tok, m, c) for m, c in zip(prompts, completions)]
    out: list[tuple[float, int]] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        width = max(len(f) for f, _ in chunk)
        ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
        labels = torch.full((len(chunk), width), -100, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, (f, n_prompt) in enumerate(chunk):
            ids[r, :len(f)] = torch.tensor(f)
            mask[r, :len(f)] = 1
            labels[r, n_prompt:len(f)] = torch.tensor(f[n_prompt:])
        logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits.float()[:, :-1]
        target = labels[:, 1:].to(dev)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
        keep = target != -100
        for r in range(len(chunk)):
            out.append((float(logp[r][keep[r]].sum()), int(keep[r].sum())))
    return out


def completion_loss(model, tok, prompts: list[list[dict]], completions: list[str], batch_size: int = 8) -> float:
    """Mean cross-entropy per completion token (end-of-turn included) given each prompt."""
    rows = completion_logprobs(model, tok, prompts, completions, batch_size)
    return -sum(s for s, _ in rows) / max(sum(n for _, n in rows), 1)


def preference_margins(model, tok, pairs: list[Pair], to_prompt: Callable = lambda m: m,
                       batch_size: int = 8) -> list[float]:
    """Per held-out pair: log p(chosen | prompt) - log p(rejected | prompt), summed over completion tokens."""
    prompts = [to_prompt(p.messages) for p in pairs]
    chosen = completion_logprobs(model, tok, prompts, [p.chosen for p in pairs], batch_size)
    rejected = completion_logprobs(model, tok, prompts, [p.rejected for p in pairs], batch_size)
    return [c - r for (c, _), (r, _) in zip(chosen, rejected)]


def choose_labels(model, tok, prompts: list[list[dict]], labels: list[str], batch_size: int = 8) -> list[str]:
    """Per prompt, the label the model finds most likely as the whole answer (summed log-probability, as
    lm-eval's ``multiple_choice`` ``acc``): prompting with the output constrained to the label set."""
    flat_p = [p for p in prompts for _ in labels]
    flat_c = [c for _ in prompts for c in labels]
    scores = completion_logprobs(model, tok, flat_p, flat_c, batch_size)
    out = []
    for i in range(len(prompts)):
        row = [s for s, _ in scores[i * len(labels):(i + 1) * len(labels)]]
        out.append(labels[max(range(len(labels)), key=lambda j: (row[j], -j))])
    return out


# ---------------------------------------------------------------- one run

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
                      label_choice: bool = False) -> tuple[dict, list[dict]]:
    """Score ``model``: generation on the test split, loss and the primary metric on val (the split that picks
    winners), preference pairs, latency at batch 1; with ``label_choice`` and a label set, also the answer chosen
    among the labels by likelihood (on both splits).

    Returns the run's metrics (``quality`` is the primary metric) and one row per test example.
    """
    from bakeoff.measure import PeakMemory

    prompts = [to_prompt(e) for e in test]
    refs = [e.completion for e in test]
    with PeakMemory() as mem:
        preds, gen = generate(model, tok, prompts, plan.max_new_tokens, plan.batch_size, desc=desc)
    value, items = score(plan.metric, preds, refs, plan.labels)
    val_prompts, val_refs = [to_prompt(e) for e in val], [e.completion for e in val]
    val_loss = completion_loss(model, tok, val_prompts, val_refs)
    metrics = {"quality": round(value, 4), **all_metrics(preds, refs, plan.labels), "n_test": len(test),
               "val_loss": round(val_loss, 4), "val_ppl": round(math.exp(min(val_loss, 50)), 3),
               **gen.metrics(), **mem.metrics("eval")}
    if val:  # the split that chooses the verdict's winners (bakeoff.verdict): the test split only reports
        val_preds, _ = generate(model, tok, val_prompts, plan.max_new_tokens, plan.batch_size, desc=f"{desc} val")
        metrics.update(val_quality=round(score(plan.metric, val_preds, val_refs, plan.labels)[0], 4), n_val=len(val))
        if label_choice and plan.labels:
            chosen = choose_labels(model, tok, val_prompts, plan.labels)
            metrics["val_quality_label_choice"] = round(score(plan.metric, chosen, val_refs, plan.labels)[0], 4)
    if pairs:
        margins = preference_margins(model, tok, pairs, lambda m: to_prompt(Example(m, "")))
        metrics.update(preference_metrics(margins))
    if plan.latency_requests:
        metrics.update(latency(model, tok, prompts, plan.max_new_tokens, plan.latency_requests,
                               desc=f"{desc} latency").metrics())
    rows = [{"id": e.id, "source": e.source, "prompt": e.messages[-1]["content"] if e.messages else "",
             "prediction": p, "reference": e.completion, "score": i if not isinstance(i, tuple) else list(i),
             "exact_match": exact_match(p, e.completion), "loose_match": loose_match(p, e.completion)}
            for e, p, i in zip(test, preds, items)]
    if label_choice and plan.labels:
        chosen = choose_labels(model, tok, prompts, plan.labels)
        c_value, c_items = score(plan.metric, chosen, refs, plan.labels)
        metrics["quality_label_choice"] = round(c_value, 4)
        for r, c, i in zip(rows, chosen, c_items):
            r.update(choice=c, choice_score=i if not isinstance(i, tuple) else list(i))
    return metrics, rows


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


def run_lm_eval(inputs: EvalInputs, rows: list[dict], model, tok, work_dir, to_prompt=None,
                dtype: str = "float32") -> dict:
    """lm-eval's exact match on the test split, and on how many examples it disagrees with bakeoff's ``rows``."""
    from bakeoff import lmeval

    task = lmeval.write_task(inputs.test, tok, work_dir, inputs.plan.max_new_tokens, to_prompt)
    out = lmeval.run_task(task, model, tok, inputs.plan.batch_size, dtype=dtype)
    # lm-eval's exact_match ignores case, punctuation and spacing: the like-for-like figure is bakeoff's loose_match
    return lmeval.agreement([r["loose_match"] for r in rows], out["per_example"])

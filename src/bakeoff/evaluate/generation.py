"""Greedy generation in the base model's chat template, batched with left padding (prompts sorted by length), and
latency at batch 1, one model or several in turn."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass

import torch

from bakeoff import progress as progress_bar
from bakeoff.core.measure import GenerationLog, LatencyLog
from bakeoff.core.runs import Resume
from bakeoff.data.prompts import encode, render_prompt


@dataclass(frozen=True)
class Decoding:
    """Greedy decoding's budget: at most ``max_new_tokens`` per answer, ``batch_size`` prompts a batch (an
    evaluation's ``EvalPlan.decoding``)."""

    max_new_tokens: int
    batch_size: int = 16


@torch.inference_mode()
def stop_ids(model, tok) -> set[int]:
    """The token ids that end an answer: the tokenizer's end of sequence and the model's configured ones."""
    eos = tok.convert_tokens_to_ids(tok.eos_token) if tok.eos_token else None
    configured = getattr(model.generation_config, "eos_token_id", None)
    configured = configured if isinstance(configured, list) else [configured]
    return {t for t in [eos, *configured] if isinstance(t, int)}


def left_padded(encoded: list[list[int]], width: int, pad: int):
    """A batch of prompts padded on the left to ``width`` (generation continues from the right): ids and mask."""
    ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, e in enumerate(encoded):
        ids[row, width - len(e) :] = torch.tensor(e)
        mask[row, width - len(e) :] = 1
    return ids, mask


def generate(
    model,
    tok,
    prompts: list[list[dict]],
    decoding: Decoding,
    desc: str | None = "generate",
    resume: Resume | None = None,
) -> tuple[list[str], GenerationLog]:
    """Greedy completions for chat prompts, in the input order, with a progress bar labelled ``desc`` (None: no bar).
    With ``resume``, answers already streamed there are taken as they are (``log.resumed`` counts them; speed figures
    cover only what this call generated) and each new batch's answers are streamed to it."""
    max_new_tokens, batch_size = decoding.max_new_tokens, decoding.batch_size
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
    stop = stop_ids(model, tok)
    pad = tok.pad_token_id
    dev = next(model.parameters()).device
    bar = progress_bar(
        total=len(encoded), initial=len(encoded) - len(order), desc=desc, unit="ex", leave=False, show=desc is not None
    )
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        width = max(len(encoded[i]) for i in idx)
        ids, mask = left_padded([encoded[i] for i in idx], width, pad)
        t0 = time.perf_counter()
        out = model.generate(
            input_ids=ids.to(dev),
            attention_mask=mask.to(dev),
            max_new_tokens=max_new_tokens,
            do_sample=False,
            pad_token_id=pad,
            eos_token_id=sorted(stop) or None,
            temperature=None,
            top_p=None,
            top_k=None,
        )
        log.seconds += time.perf_counter() - t0
        for row, i in enumerate(idx):
            new = out[row, width:].tolist()
            n = next((j + 1 for j, t in enumerate(new) if t in stop), len(new))  # up to its first stop token
            log.generated_tokens += n
            outputs[i] = tok.decode(new[:n], skip_special_tokens=True).strip()
            if resume is not None:
                resume.add(rendered[i], outputs[i])
        if resume is not None:
            resume.flush()
        bar.update(len(idx))
    bar.close()
    return outputs, log


def latency(
    model, tok, prompts: list[list[dict]], max_new_tokens: int, requests: int, desc: str = "latency"
) -> LatencyLog:
    """One request at a time over the first ``requests`` prompts, after one untimed warm-up request."""
    log = LatencyLog()
    prompts = prompts[:requests]
    if not prompts:
        return log
    generate(model, tok, prompts[:1], Decoding(max_new_tokens, 1), None)
    for p in progress_bar(prompts, desc=desc, unit="req", leave=False):
        _, g = generate(model, tok, [p], Decoding(max_new_tokens, 1), None)
        log.seconds.append(g.seconds)
        log.generated_tokens += g.generated_tokens
    return log


def interleaved_latency(
    models: dict, tok, prompts: list[list[dict]], max_new_tokens: int, requests: int, desc: str = "latency, interleaved"
) -> dict[str, LatencyLog]:
    """Each model's latency at batch 1, timed in turn in this one process: request i of every model before request
    i + 1 of any (the order rotated each round), after one untimed warm-up each. A machine that drifts (another
    process, an hour's slowdown) then slows every model alike instead of whichever was timed in a slow stage."""
    names, prompts = list(models), prompts[:requests]
    logs = {n: LatencyLog() for n in names}
    for n in names:
        generate(models[n], tok, prompts[:1], Decoding(max_new_tokens, 1), None)
    for i, p in enumerate(progress_bar(prompts, desc=desc, unit="round", leave=False)):
        for n in names[i % len(names) :] + names[: i % len(names)]:
            _, g = generate(models[n], tok, [p], Decoding(max_new_tokens, 1), None)
            logs[n].seconds.append(g.seconds)
            logs[n].generated_tokens += g.generated_tokens
    return logs


class StepTimes:
    """``with times("eval_val_loss"): ...``; ``times.metrics()`` → ``{"eval_val_loss_wall_s": 1.23}``
    (``bakeoff.core.measure``'s ``<step>_wall_s``)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str):
        t0 = time.perf_counter()
        yield
        self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def metrics(self) -> dict[str, float]:
        return {f"{k}_wall_s": round(v, 2) for k, v in self.seconds.items()}

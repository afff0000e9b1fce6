"""Generation, metrics and validation loss: the one evaluation every baseline and variant goes through.

Greedy decoding, batched with left padding (prompts sorted by length so a batch pads little), in the base
model's chat template. The primary metric is named by ``task.metric``; every run also gets the validation
loss of the completion given that run's own prompt (a few-shot baseline is scored with its shots).
"""

from __future__ import annotations

import math
import string
import time
from typing import Callable

import torch
from tqdm.auto import tqdm

from bakeoff.data import Example
from bakeoff.measure import GenerationLog

# ---------------------------------------------------------------- metrics

_PUNCT = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    """Lower case, punctuation removed, whitespace collapsed."""
    return " ".join(text.lower().translate(_PUNCT).split())


def exact_match(prediction: str, reference: str) -> float:
    """1.0 when prediction and reference are equal after ``normalize``."""
    return float(normalize(prediction) == normalize(reference))


METRICS: dict[str, Callable[[str, str], float]] = {"exact_match": exact_match}


def score(metric: str, predictions: list[str], references: list[str]) -> tuple[float, list[float]]:
    per = [METRICS[metric](p, r) for p, r in zip(predictions, references)]
    return (sum(per) / len(per) if per else 0.0), per


# ---------------------------------------------------------------- prompts

def render_prompt(tok, messages: list[dict]) -> str:
    return tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def _encode(tok, text: str) -> list[int]:
    return tok(text, add_special_tokens=False)["input_ids"]


# ---------------------------------------------------------------- generation

@torch.inference_mode()
def generate(model, tok, prompts: list[list[dict]], max_new_tokens: int, batch_size: int = 16,
             desc: str = "generate") -> tuple[list[str], GenerationLog]:
    """Greedy completions for chat prompts, in the input order."""
    log = GenerationLog()
    encoded = [_encode(tok, render_prompt(tok, m)) for m in prompts]
    log.prompt_tokens = [len(e) for e in encoded]
    order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
    outputs: list[str | None] = [None] * len(encoded)
    eos = tok.convert_tokens_to_ids(tok.eos_token) if tok.eos_token else None
    configured = getattr(model.generation_config, "eos_token_id", None)
    configured = configured if isinstance(configured, list) else [configured]
    stop = {t for t in [eos, *configured] if isinstance(t, int)}
    pad = tok.pad_token_id
    dev = next(model.parameters()).device
    bar = tqdm(total=len(encoded), desc=desc, unit="ex", leave=False)
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


# ---------------------------------------------------------------- loss

@torch.inference_mode()
def completion_loss(model, tok, prompts: list[list[dict]], completions: list[str], batch_size: int = 8) -> float:
    """Mean cross-entropy per completion token (end-of-turn included) given each prompt."""
    total, count = 0.0, 0
    dev = next(model.parameters()).device
    rows = []
    for msgs, comp in zip(prompts, completions):
        prompt = render_prompt(tok, msgs)
        full = tok.apply_chat_template(msgs + [{"role": "assistant", "content": comp}], tokenize=False)
        p_ids, f_ids = _encode(tok, prompt), _encode(tok, full)
        if f_ids[:len(p_ids)] != p_ids:  # the template rendered the prompt differently: fall back to concat
            f_ids = p_ids + _encode(tok, full[len(prompt):])
        rows.append((f_ids, len(p_ids)))
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
        logits = model(input_ids=ids.to(dev), attention_mask=mask.to(dev)).logits.float()
        shift_logits, shift_labels = logits[:, :-1], labels[:, 1:].to(dev)
        loss = torch.nn.functional.cross_entropy(shift_logits.reshape(-1, shift_logits.size(-1)),
                                                 shift_labels.reshape(-1), ignore_index=-100, reduction="sum")
        total += loss.item()
        count += int((shift_labels != -100).sum())
    return total / max(count, 1)


# ---------------------------------------------------------------- one run

def evaluate_examples(model, tok, test: list[Example], val: list[Example], metric: str, max_new_tokens: int,
                      batch_size: int, to_prompt: Callable[[Example], list[dict]] = lambda e: e.messages,
                      desc: str = "evaluate") -> tuple[dict, list[dict]]:
    """Score ``model`` on the test split (generation) and the val split (loss); return metrics and rows."""
    from bakeoff.measure import PeakMemory

    prompts = [to_prompt(e) for e in test]
    with PeakMemory() as mem:
        preds, gen = generate(model, tok, prompts, max_new_tokens, batch_size, desc=desc)
    value, per = score(metric, preds, [e.completion for e in test])
    val_loss = completion_loss(model, tok, [to_prompt(e) for e in val], [e.completion for e in val])
    metrics = {metric: round(value, 4), "quality": round(value, 4), "n_test": len(test),
               "val_loss": round(val_loss, 4), "val_ppl": round(math.exp(min(val_loss, 50)), 3),
               **gen.metrics(), **mem.metrics("eval")}
    rows = [{"id": e.id, "source": e.source, "prediction": p, "reference": e.completion, "score": s}
            for e, p, s in zip(test, preds, per)]
    return metrics, rows


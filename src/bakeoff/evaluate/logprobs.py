"""Log-probabilities of given answers: validation loss, preference margins, label choice, divergence from the base.

    completion_logprobs(model, tok, prompts, completions)   # per row: (summed log-prob of the answer, its tokens)
    label_logprobs(model, tok, prompts, labels)             # per prompt: every label's, the prompt encoded once
    choose_labels(model, tok, prompts, labels)              # the most likely label per prompt

Every log-probability is taken from the output head applied in fp32 to the decoder's last hidden states, only at
the positions that score an answer token, whatever the serving dtype (a bf16 head rounds a logit of 20 by up to 0.06);
the decoder runs as served, and no fp32 copy of the model or of its head is held. Model families whose logits are not
the plain head of the hidden state (soft-capped, scaled) are scored from their own logits.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import torch

from bakeoff import progress
from bakeoff.data.examples import Example, Pair
from bakeoff.data.prompts import prompt_and_full

HEAD_CHUNK = 8192  # vocabulary rows of the output head cast to fp32 at a time (128 MB at hidden 4096)
FULL_SEQUENCES_PER_BATCH = 8  # (prompt, label) sequences a batch when label choice scores each pair whole


class Head:
    """The decoder and the output head of ``model`` (under PEFT's wrapper too), applied in fp32 at the scored
    positions only, a slice of the head's rows at a time (no fp32 copy of the head, nor of the model, is held); for a
    model family whose logits are not the plain head, the model itself."""

    def __init__(self, model):
        from bakeoff.core.models import PLAIN_HEAD

        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        out = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
        plain = (
            getattr(inner.config, "model_type", "") in PLAIN_HEAD
            and hasattr(inner, "get_decoder")
            and out is not None
            and getattr(out, "bias", None) is None
            and type(getattr(out, "weight", None)).__name__ not in ("Params4bit", "Int8Params")
        )
        self.model, self.device = model, next(model.parameters()).device
        self.decoder = inner.get_decoder() if plain else None
        self.weight = out.weight if plain else None

    def logits(self, ids, mask, positions, position_ids=None):
        """(fp32 logits at each distinct (row, column) of ``positions``, the index of each pair's row in them)."""
        kw = {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device)}
        if position_ids is not None:
            kw["position_ids"] = position_ids.to(self.device)
        rows, cols = positions
        where, inv = torch.unique(rows * ids.shape[1] + cols, return_inverse=True)  # each position's head once
        rows, cols = (where // ids.shape[1]).to(self.device), (where % ids.shape[1]).to(self.device)
        if self.decoder is None:
            logits = self.model(**kw).logits[rows, cols].float()
        else:
            hidden = self.decoder(**kw, use_cache=False).last_hidden_state[rows, cols].float()
            logits = torch.cat(
                [
                    torch.nn.functional.linear(hidden, self.weight[i : i + HEAD_CHUNK].float())
                    for i in range(0, self.weight.shape[0], HEAD_CHUNK)
                ],
                dim=-1,
            )
        return logits, inv.to(logits.device)

    def logprobs(self, ids, mask, positions, targets, position_ids=None):
        """log p(targets[k] | the sequence up to positions[k]) for index pairs ``positions`` (row, column)."""
        logits, inv = self.logits(ids, mask, positions, position_ids)
        return logits[inv, targets.to(logits.device)] - torch.logsumexp(logits, dim=-1)[inv]


@torch.inference_mode()
def completion_logprobs(
    model, tok, prompts: list[list[dict]], completions: list[str], batch_size: int = 8, desc: str | None = None
) -> list[tuple[float, int]]:
    """Per row: (sum of the completion tokens' log-probabilities given the prompt, number of those tokens); with
    ``desc``, a progress bar."""
    head = Head(model)
    rows = [prompt_and_full(tok, m, c) for m, c in zip(prompts, completions)]
    out: list[tuple[float, int]] = []
    bar = progress(total=len(rows), desc=desc, unit="ex", leave=False, show=desc is not None)
    for start in range(0, len(rows), batch_size):
        chunk = rows[start : start + batch_size]
        width = max(len(f) for f, _ in chunk)
        ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        r_idx, c_idx, targets, owner = [], [], [], []
        for r, (f, n_prompt) in enumerate(chunk):
            ids[r, : len(f)] = torch.tensor(f)
            mask[r, : len(f)] = 1
            for c in range(n_prompt, len(f)):  # token c is scored from position c - 1
                r_idx.append(r), c_idx.append(c - 1), targets.append(f[c]), owner.append(r)
        logp = (
            head.logprobs(
                ids,
                mask,
                (torch.tensor(r_idx, dtype=torch.long), torch.tensor(c_idx, dtype=torch.long)),
                torch.tensor(targets, dtype=torch.long),
            ).cpu()
            if targets
            else torch.zeros(0)
        )
        sums = (
            torch.zeros(len(chunk)).index_add_(0, torch.tensor(owner, dtype=torch.long), logp)
            if targets
            else torch.zeros(len(chunk))
        )
        for r, (f, n_prompt) in enumerate(chunk):
            out.append((float(sums[r]), len(f) - n_prompt))
        bar.update(len(chunk))
    bar.close()
    return out


def completion_loss(
    model, tok, prompts: list[list[dict]], completions: list[str], batch_size: int = 8, desc: str | None = None
) -> float:
    """Mean cross-entropy per completion token (end-of-turn included) given each prompt."""
    rows = completion_logprobs(model, tok, prompts, completions, batch_size, desc)
    return -sum(s for s, _ in rows) / max(sum(n for _, n in rows), 1)


def preference_margins(
    model, tok, pairs: list[Pair], to_prompt: Callable = lambda m: m, batch_size: int = 8, desc: str | None = None
) -> list[float]:
    """Per held-out pair: log p(chosen | prompt) - log p(rejected | prompt), summed over completion tokens."""
    prompts = [to_prompt(p.messages) for p in pairs]
    chosen = completion_logprobs(
        model, tok, prompts, [p.chosen for p in pairs], batch_size, desc and f"{desc} (chosen)"
    )
    rejected = completion_logprobs(
        model, tok, prompts, [p.rejected for p in pairs], batch_size, desc and f"{desc} (rejected)"
    )
    return [c - r for (c, _), (r, _) in zip(chosen, rejected)]


@torch.inference_mode()
def label_logprobs(
    model, tok, prompts: list[list[dict]], labels: list[str], desc: str | None = None
) -> list[list[float]]:
    """Per prompt, every label's summed log-probability as the whole answer (end-of-turn included): the numbers
    ``completion_logprobs`` gives for each (prompt, label) pair, with each prompt encoded once.

    One sequence per prompt: the prompt, then the labels' tokens as a tree (a prefix several labels share, such as
    ``card_`` in ``card_cancel`` and ``card_fee``, is fed once; a label's last token is only scored, never fed),
    each token at the position that follows its prefix and seeing, through the attention mask, the prompt and its
    own prefix only. A label's first token is scored from the prompt's last position."""
    head = Head(model)
    dtype = next(p for p in model.parameters() if p.is_floating_point()).dtype
    dtype = dtype if dtype in (torch.float32, torch.bfloat16, torch.float16) else torch.float32
    sdpa = str(getattr(model.config, "_attn_implementation", "")) == "sdpa"  # takes a boolean mask: True attends
    out = []
    for msgs in progress(prompts, desc=desc, unit="ex", leave=False, show=desc is not None):
        rows = [prompt_and_full(tok, msgs, c) for c in labels]
        n = rows[0][1]  # the same prompt ids start every row (prompt_and_full)
        tails = [f[n:] for f, _ in rows]
        node: dict[tuple, int] = {}  # a fed prefix → its position in the sequence
        ids, pos, parent = list(rows[0][0][:n]), list(range(n)), []
        for t in tails:
            for d in range(len(t) - 1):
                if tuple(t[: d + 1]) not in node:
                    node[tuple(t[: d + 1])] = len(ids)
                    ids.append(t[d])
                    pos.append(n + d)
                    parent.append(node[tuple(t[:d])] if d else -1)
        cols = [n - 1 if k == 0 else node[tuple(t[:k])] for t in tails for k in range(len(t))]
        targets = [x for t in tails for x in t]
        allow = torch.zeros((len(ids), len(ids)), dtype=torch.bool)
        allow[:n, :n] = torch.ones((n, n), dtype=torch.bool).tril()
        allow[n:, :n] = True
        for i, up in enumerate(parent, start=n):  # each tree token sees itself and its ancestors
            allow[i, i] = True
            while up >= 0:
                allow[i, up] = True
                up = parent[up - n]
        mask = (
            allow[None, None]
            if sdpa
            else torch.zeros((1, 1, len(ids), len(ids)), dtype=dtype).masked_fill(~allow, torch.finfo(dtype).min)
        )
        logp = head.logprobs(
            torch.tensor([ids]),
            mask,
            (torch.zeros(len(cols), dtype=torch.long), torch.tensor(cols)),
            torch.tensor(targets),
            position_ids=torch.tensor([pos]),
        ).cpu()
        bounds = torch.tensor([0] + [len(t) for t in tails]).cumsum(0)
        out.append([float(logp[bounds[j] : bounds[j + 1]].sum()) for j in range(len(tails))])
    return out


def choose_labels(
    model, tok, prompts: list[list[dict]], labels: list[str], desc: str | None = None, shared: bool = True
) -> list[str]:
    """Per prompt, the label the model finds most likely as the whole answer (summed log-probability, as
    lm-eval's ``multiple_choice`` ``acc``; a tie goes to the label listed first): prompting with the output
    constrained to the label set. ``shared`` (default) encodes each prompt once (``label_logprobs``); without it,
    every (prompt, label) pair is scored as a full sequence (``completion_logprobs``).

    The model scores as it is served (its serving dtype, or its 4-bit base), with the output head and the
    log-softmax in fp32 at the scored positions (``Head``): nothing is copied to fp32 but those logits, so label
    choice fits wherever generation fits."""
    table = label_scores(model, tok, prompts, labels, desc, shared)
    return [labels[max(range(len(labels)), key=lambda j: (row[j], -j))] for row in table]


def label_scores(
    model, tok, prompts: list[list[dict]], labels: list[str], desc: str | None = None, shared: bool = True
) -> list[list[float]]:
    """Per prompt, every label's summed log-probability as the whole answer (what ``choose_labels`` picks from);
    without ``shared``, ``FULL_SEQUENCES_PER_BATCH`` (prompt, label) sequences a batch."""
    if shared:
        return label_logprobs(model, tok, prompts, labels, desc=desc)
    flat = completion_logprobs(
        model,
        tok,
        [p for p in prompts for _ in labels],
        [c for _ in prompts for c in labels],
        FULL_SEQUENCES_PER_BATCH,
        desc,
    )
    return [[s for s, _ in flat[i * len(labels) : (i + 1) * len(labels)]] for i in range(len(prompts))]


def general_instructions() -> list[Example]:
    """The fixed general instructions and answers ``general_kl`` reads (``data/probe/instructions.jsonl``, CC0)."""
    from bakeoff.evaluate.lmeval import probe_dir

    with open(probe_dir() / "instructions.jsonl") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return [Example([{"role": "user", "content": r["prompt"]}], r["completion"], id=i) for i, r in enumerate(rows)]


@torch.inference_mode()
def answer_distributions(
    model, tok, items: list[Example], batch_size: int = 8, desc: str | None = None
) -> list[torch.Tensor]:
    """Per batch of ``items``, the fp32 next-token log-distributions (on the CPU) at every position that predicts an
    answer token: what ``general_kl`` compares. Computed with one model resident; the next may be loaded after."""
    rows = [prompt_and_full(tok, e.messages, e.completion) for e in items]
    head, out = Head(model), []
    for start in progress(range(0, len(rows), batch_size), desc=desc, unit="batch", leave=False, show=desc is not None):
        chunk = rows[start : start + batch_size]
        width = max(len(f) for f, _ in chunk)
        ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(chunk), width), dtype=torch.long)
        r_idx, c_idx = [], []
        for r, (f, n_prompt) in enumerate(chunk):
            ids[r, : len(f)] = torch.tensor(f)
            mask[r, : len(f)] = 1
            for c in range(n_prompt - 1, len(f) - 1):  # positions that predict an answer token
                r_idx.append(r), c_idx.append(c)
        logits, inv = head.logits(
            ids, mask, (torch.tensor(r_idx, dtype=torch.long), torch.tensor(c_idx, dtype=torch.long))
        )
        out.append(torch.log_softmax(logits, dim=-1)[inv].cpu())
    return out


def kl_of(base: list[torch.Tensor], model: list[torch.Tensor]) -> float:
    """Mean per-token KL(base ‖ model) of two ``answer_distributions`` of the same items, in nats."""
    total, count = 0.0, 0
    for b, m in zip(base, model):
        kl = (b.exp() * (b - m)).sum(-1)
        total += float(kl.sum())
        count += int(kl.numel())
    return total / max(count, 1)


def general_kl(model, base, tok, items: list[Example], batch_size: int = 8, desc: str | None = None) -> float:
    """Mean per-token KL(base ‖ model) of the next-token distributions over the answer tokens of ``items`` (general
    instructions with fixed answers, ``data/probe/instructions.jsonl``), in nats: how far a run moved from the base
    model on text that is not its task. 0 for the base model itself. ``base``: a model, or a function that loads it
    (called once ``model``'s distributions are taken, so the caller may have freed ``model`` by then)."""
    ours = answer_distributions(model, tok, items, batch_size, desc)
    theirs = answer_distributions(
        base() if callable(base) and not isinstance(base, torch.nn.Module) else base, tok, items, batch_size, desc
    )
    return kl_of(theirs, ours)

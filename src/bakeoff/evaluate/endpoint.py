"""The second serving kind: an OpenAI-compatible endpoint (a hosted API, vLLM, Ollama, llama.cpp's server).

Messages in; answers, token counts and timings out, as the in-framework ``generation.generate`` gives them, so
metrics, statistics and the report see answers only. Keys, retries, caching and concurrency stay in here:

    ep = Endpoint.from_spec({"base_url": "http://127.0.0.1:8080/v1", "model": "m", "api_key_env": "OPENAI_API_KEY"})
    ep.preflight()                                  # a missing key or a dead URL fails here, before a paid request
    answers = ep.complete(prompts, max_tokens=48)   # greedy; cached on disk, so a rerun sends nothing

- The key is read from the named environment variable only, and never stored: the cache key is the endpoint's
  URL, model, messages and decoding parameters.
- Retries: the maintained ``openai`` client's own (exponential backoff on 408, 409, 429 and 5xx, ``max_retries``).
- A request that still fails, or whose response is malformed, is that item's failure (``Answer.error``).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bakeoff import progress
from bakeoff.core.errors import UserError
from bakeoff.core.schema import SPEC_KEYS

CACHE = Path(".bakeoff_tmp") / "endpoint_cache"


@dataclass
class Answer:
    text: str = ""
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float | None = None  # wall time of the request that produced it (when first fetched)
    cached: bool = False
    error: str | None = None  # the item's failure: the request failed after retries, or its response was malformed
    top: list | None = None  # [[token, logprob], ...] of the first answer token, when log-probabilities were asked


@dataclass
class Endpoint:
    base_url: str
    model: str
    api_key_env: str | None = None
    concurrency: int = 4
    timeout_s: float = 60.0
    max_retries: int = 4
    cache_dir: Path | None = field(default=CACHE)

    @classmethod
    def from_spec(cls, spec: dict, cache_dir: Path | None = CACHE) -> Endpoint:
        return cls(**{k: spec.get(k, d) for k, d in SPEC_KEYS.items()}, cache_dir=cache_dir)

    def _key(self) -> str:
        if not self.api_key_env:
            return "not-needed"  # a local server without authentication
        key = os.environ.get(self.api_key_env)
        if not key:
            raise UserError(
                f"the endpoint {self.base_url} reads its API key from the environment variable "
                f"{self.api_key_env}, which is not set: export {self.api_key_env}=... and run again"
            )
        return key

    def client(self):
        from openai import OpenAI

        return OpenAI(base_url=self.base_url, api_key=self._key(), timeout=self.timeout_s, max_retries=self.max_retries)

    def check_key(self) -> None:
        """The key's variable is set (UserError naming it otherwise): a user's error, said before anything runs."""
        self._key()

    def preflight(self) -> list[str]:
        """The key is set and the server answers its model list (free: no completion is requested). Returns the
        served model ids; raises UserError naming an unset key variable, EndpointDown naming the URL when the
        server does not answer or refuses the key (that baseline's recorded failure, not the run's end)."""
        import openai

        client = self.client().with_options(max_retries=1, timeout=min(self.timeout_s, 10.0))
        try:
            ids = [m.id for m in client.models.list()]
        except openai.AuthenticationError as e:
            raise EndpointDown(
                f"the endpoint {self.base_url} refused the key in {self.api_key_env} ({e.status_code}); "
                "no request was sent"
            ) from None
        except openai.APIStatusError as e:  # a server without /models still serves completions
            return [] if e.status_code == 404 else _raise_down(self.base_url, e)
        except Exception as e:  # connection refused, timeout, not an OpenAI-compatible server
            _raise_down(self.base_url, e)
        return ids

    def _cache_path(self, messages: list[dict], params: dict) -> Path | None:
        if self.cache_dir is None:
            return None
        blob = json.dumps(
            {"base_url": self.base_url.rstrip("/"), "model": self.model, "messages": messages, "params": params},
            sort_keys=True,
            ensure_ascii=False,
        )
        h = hashlib.sha256(blob.encode()).hexdigest()
        return Path(self.cache_dir) / h[:2] / f"{h}.json"

    def _one(self, client, messages: list[dict], params: dict) -> Answer:
        path = self._cache_path(messages, params)
        if path is not None and path.exists():
            try:
                return Answer(**{**json.loads(path.read_text()), "cached": True})
            except (ValueError, TypeError):
                pass  # a torn entry: ask again
        t0 = time.perf_counter()
        try:
            r = client.chat.completions.create(model=self.model, messages=messages, **params)
            text = r.choices[0].message.content
            if not isinstance(text, str):
                msg = f"no text in the response's first choice: {str(r)[:200]}"
                raise ValueError(msg)  # noqa: TRY004  a bad answer, not a wrong argument type
        except Exception as e:  # after the client's retries: this item's failure, not the run's
            return Answer(
                error=f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
                seconds=round(time.perf_counter() - t0, 4),
            )
        usage = getattr(r, "usage", None)
        a = Answer(
            text=text.strip(),
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            seconds=round(time.perf_counter() - t0, 4),
            top=_top(r) if params.get("logprobs") else None,
        )
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({k: v for k, v in a.__dict__.items() if k not in ("cached", "error")}))
            tmp.replace(path)
        return a

    def complete(
        self,
        prompts: list[list[dict]],
        max_tokens: int,
        sequential: int = 0,
        desc: str = "endpoint",
        concurrency: int | None = None,
    ) -> list[Answer]:
        """Greedy answers in input order. The first ``sequential`` prompts go one at a time (their wall times are
        the batch-1 latency); the rest ``concurrency`` at a time."""
        return self._many(prompts, {"max_tokens": max_tokens, "temperature": 0}, sequential, desc, concurrency)

    def choose(self, prompts: list[list[dict]], labels: list[str], desc: str = "label choice") -> tuple[list, str]:
        """Label choice through the server's log-probabilities of the answer's first token: each label scores the
        best log-probability among the top 20 first tokens that begin it (case and spacing ignored); the best
        label wins, a tie or no match leaves the item unchosen (None, scored as wrong). Returns (choices, mode):
        mode says "generation only" with the reason when the server gives no log-probabilities."""
        params = {"max_tokens": 1, "temperature": 0, "logprobs": True, "top_logprobs": 20}
        first = self._many(prompts[:1], params, 1, desc, 1)
        if not first or first[0].error or not first[0].top:
            why = first[0].error if first and first[0].error else "the server returned no log-probabilities"
            return [None] * len(prompts), f"generation only: {why}"
        got = first + self._many(prompts[1:], params, 0, desc)
        return [_pick(a.top or [], labels) for a in got], "log-probabilities of the first answer token"

    def _many(self, prompts, params: dict, sequential: int, desc: str, concurrency: int | None = None) -> list[Answer]:
        client = self.client()
        out: list[Answer | None] = [None] * len(prompts)
        bar = progress(total=len(prompts), desc=desc, unit="req", leave=False)
        for i in range(min(sequential, len(prompts))):
            out[i] = self._one(client, prompts[i], params)
            bar.update(1)
        rest = list(range(min(sequential, len(prompts)), len(prompts)))
        with ThreadPoolExecutor(max_workers=max(1, concurrency or self.concurrency)) as pool:
            for i, a in zip(rest, pool.map(lambda j: self._one(client, prompts[j], params), rest)):
                out[i] = a
                bar.update(1)
        bar.close()
        return out  # type: ignore[return-value]


def _top(r) -> list | None:
    lp = getattr(r.choices[0], "logprobs", None)
    content = getattr(lp, "content", None) or []
    return [[t.token, t.logprob] for t in (content[0].top_logprobs or [])] if content else None


def _pick(top: list, labels: list[str]) -> str | None:
    """The label whose start the most likely first token spells (None on a tie or when none does)."""
    best: dict[str, float] = {}
    for token, logprob in top:
        t = token.strip().lower()
        if not t:
            continue
        for label in labels:
            if label.strip().lower().startswith(t):
                best[label] = max(best.get(label, float("-inf")), logprob)
    if not best:
        return None
    top_lp = max(best.values())
    winners = [label for label, v in best.items() if v == top_lp]
    return winners[0] if len(winners) == 1 else None


class EndpointDown(RuntimeError):
    """The endpoint did not answer its preflight, or refused the key: nothing was sent, and that baseline fails."""


def _raise_down(url: str, e: Exception):
    raise EndpointDown(
        f"the endpoint {url} does not answer ({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
        "start the server or fix baselines.<name>.endpoint.base_url. No request was sent"
    )


def price_per_request(price: dict | None, prompt_tokens: float, completion_tokens: float) -> float | None:
    """Dollars per request at the endpoint's prices ($ per million input and output tokens), from measured means."""
    if not price:
        return None
    return (
        prompt_tokens * float(price.get("usd_per_1m_input") or 0)
        + completion_tokens * float(price.get("usd_per_1m_output") or 0)
    ) / 1e6


def answer_metrics(answers: list[Answer], sequential: int, price: dict | None) -> dict:
    """Token counts (the server's own count), cost, failures and latency of one split's answers. The latency is
    that of the first ``sequential`` requests, sent one at a time when first fetched (a cached answer keeps the wall
    time it was fetched in); throughput under concurrency is the export stage's serving figure, not this one."""
    from bakeoff.core.measure import GenerationLog, LatencyLog

    ok = [a for a in answers if a.error is None]
    gen = GenerationLog(
        prompt_tokens=[a.prompt_tokens or 0 for a in ok], generated_tokens=sum(a.completion_tokens or 0 for a in ok)
    )
    lat = LatencyLog(
        seconds=[a.seconds for a in answers[:sequential] if a.error is None and a.seconds],
        generated_tokens=sum(a.completion_tokens or 0 for a in answers[:sequential] if a.error is None),
    )
    n = max(len(ok), 1)
    m = {
        **{k: v for k, v in gen.metrics().items() if k == "prompt_tokens_per_request"},
        **lat.metrics(),
        "n_failed_items": len(answers) - len(ok),
        "requests_sent": sum(not a.cached for a in answers),
        "requests_cached": sum(a.cached for a in answers),
        "completion_tokens_per_request": round(gen.generated_tokens / n, 1),
    }
    usd = price_per_request(price, m["prompt_tokens_per_request"], m["completion_tokens_per_request"])
    if usd is not None:
        m["usd_per_request"] = round(usd, 8)
    return m


def evaluate(ep: Endpoint, inputs, ask, price: dict | None) -> tuple[dict, list[dict]]:
    """An endpoint arm scored like a local one (``inputs``: ``bakeoff.evaluate.local.EvalInputs``; asked as ``ask``,
    an ``Ask``, says): the same prompts, greedy, the same metrics on test and val, and with a label set, label choice
    through the server's log-probabilities where it gives them (``label_choice`` says which). Validation loss and
    preference pairs need every token's log-probability: left out."""
    from bakeoff.core.scoring import all_metrics, score
    from bakeoff.evaluate.local import rows_of

    test, val, plan, to_prompt, desc = inputs.test, inputs.val, inputs.plan, ask.to_prompt, ask.desc
    prompts, refs = [to_prompt(e) for e in test], [e.completion for e in test]
    answers = ep.complete(prompts, plan.max_new_tokens, sequential=plan.latency_requests, desc=desc)
    if answers and all(a.error for a in answers):
        raise RuntimeError(f"every request to {ep.base_url} failed; the first: {answers[0].error}")
    preds = [a.text for a in answers]
    value, items = score(plan.metric, preds, refs, plan.labels)
    metrics = {
        "quality": round(value, 4),
        **all_metrics(preds, refs, plan.labels),
        "n_test": len(test),
        **answer_metrics(answers, plan.latency_requests, price),
    }
    if val:
        got = ep.complete([to_prompt(e) for e in val], plan.max_new_tokens, desc=f"{desc} val")
        metrics.update(
            val_quality=round(
                score(plan.metric, [a.text for a in got], [e.completion for e in val], plan.labels)[0], 4
            ),
            n_val=len(val),
            val_failed_items=sum(a.error is not None for a in got),
        )
    rows = rows_of(test, preds, items)
    for r, a in zip(rows, answers):
        if a.error:
            r["error"] = a.error
    if plan.labels:  # the better of free generation and label choice decides, as for a local baseline
        metrics["label_choice"] = _label_choice(ep, inputs, ask, rows, metrics)
    return metrics, rows


def _label_choice(ep: Endpoint, inputs, ask, rows: list[dict], metrics: dict) -> str:
    from bakeoff.core.scoring import score

    val, plan, to_prompt, desc = inputs.val, inputs.plan, ask.to_prompt, ask.desc
    prompts, refs = [to_prompt(e) for e in inputs.test], [e.completion for e in inputs.test]
    chosen, mode = ep.choose(prompts, plan.labels, desc=f"{desc} label choice")
    if mode.startswith("generation only"):
        return mode
    value, items = score(plan.metric, [c or "" for c in chosen], refs, plan.labels)
    metrics.update(quality_label_choice=round(value, 4), label_choice_unchosen=sum(c is None for c in chosen))
    for r, c, i in zip(rows, chosen, items):
        r.update(choice=c or "", choice_score=i if not isinstance(i, tuple) else list(i))
    if val:
        got, _ = ep.choose([to_prompt(e) for e in val], plan.labels, desc=f"{desc} val label choice")
        metrics["val_quality_label_choice"] = round(
            score(plan.metric, [c or "" for c in got], [e.completion for e in val], plan.labels)[0], 4
        )
    return mode

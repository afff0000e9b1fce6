"""The one evaluation every baseline and variant goes through: generation, log-probabilities (validation loss,
preference pairs, label choice), latency at batch 1.

Greedy decoding, batched with left padding (prompts sorted by length so a batch pads little), in the base
model's chat template. The primary metric (``bakeoff.core.scoring``) is named by ``task.metric``; every run also
gets the validation
loss of the completion given that run's own prompt (a few-shot baseline is scored with its shots).
"""

from __future__ import annotations

import gc
import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bakeoff.core.records import DataStats, Generation
from bakeoff.core.runs import Resume
from bakeoff.core.scoring import all_metrics, exact_match, loose_match, preference_metrics, score
from bakeoff.data.examples import Example, Pair
from bakeoff.data.prompts import render_prompt
from bakeoff.evaluate.generation import Decoding, StepTimes, generate, latency
from bakeoff.evaluate.logprobs import (
    answer_distributions,
    choose_labels,
    completion_loss,
    general_instructions,
    kl_of,
    preference_margins,
)

if TYPE_CHECKING:
    from bakeoff.core.sections import Params

# ---------------------------------------------------------------- generation


# ---------------------------------------------------------------- serving at batch 1


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
    def from_params(cls, params: Params, labels: list[str] | None = None) -> EvalPlan:
        return cls(
            params.task.metric, params.task.max_new_tokens, params.eval.batch_size, labels, params.eval.latency_requests
        )

    @property
    def decoding(self) -> Decoding:
        return Decoding(self.max_new_tokens, self.batch_size)


def as_written(e: Example) -> list[dict]:
    """An example's own messages: the prompt of every run that adds no shots or instruction."""
    return e.messages


@dataclass
class Ask:
    """How one run is asked: ``to_prompt`` turns an example into its messages (a few-shot baseline adds its shots);
    ``pairs``: the preference pairs it is also scored on; ``desc``: its name in the progress lines; ``label_choice``:
    with a label set, the answer is also chosen among the labels by likelihood (on both splits); ``resume``: the test
    split's answers stream there (a killed evaluation picks them up again; the caller ends it once the predictions
    are saved)."""

    to_prompt: Callable[[Example], list[dict]] = as_written
    pairs: list[Pair] | None = None
    desc: str = "evaluate"
    label_choice: bool = False
    resume: Resume | None = None


def evaluate_examples(
    model, tok, test: list[Example], val: list[Example], plan: EvalPlan, ask: Ask | None = None
) -> tuple[dict, list[dict]]:
    """Score ``model``, asked as ``ask`` says: generation on the test split, loss and the primary metric on val (the
    split that picks winners), preference pairs, latency at batch 1, label choice.

    Returns the run's metrics (``quality`` is the primary metric) and one row per test example. The peak memory
    (``eval_peak_*``) covers every one of these steps, not generation alone.
    """
    from bakeoff.core.measure import PeakMemory

    with PeakMemory() as mem:
        metrics, rows = _evaluate(model, tok, test, val, plan, ask or Ask())
    return {**metrics, **mem.metrics("eval")}, rows


def _evaluate(model, tok, test, val, plan: EvalPlan, ask: Ask):
    to_prompt, pairs, desc, label_choice = ask.to_prompt, ask.pairs, ask.desc, ask.label_choice
    times = StepTimes()
    prompts = [to_prompt(e) for e in test]
    refs = [e.completion for e in test]
    preds, gen = generate(model, tok, prompts, plan.decoding, desc=desc, resume=ask.resume)
    value, items = score(plan.metric, preds, refs, plan.labels)
    val_prompts, val_refs = [to_prompt(e) for e in val], [e.completion for e in val]
    with times("eval_val_loss"):
        val_loss = completion_loss(model, tok, val_prompts, val_refs, desc=f"{desc} val loss")
    metrics = {
        "quality": round(value, 4),
        **all_metrics(preds, refs, plan.labels),
        "n_test": len(test),
        "val_loss": round(val_loss, 4),
        "val_ppl": round(math.exp(min(val_loss, 50)), 3),
        **gen.metrics(),
    }
    if val:  # the split that chooses the verdict's winners (bakeoff.decide.verdict): the test split only reports
        with times("eval_val_generate"):
            val_preds, _ = generate(model, tok, val_prompts, plan.decoding, desc=f"{desc} val")
        metrics.update(val_quality=round(score(plan.metric, val_preds, val_refs, plan.labels)[0], 4), n_val=len(val))
        if label_choice and plan.labels:
            with times("eval_label_choice"):
                chosen = choose_labels(model, tok, val_prompts, plan.labels, desc=f"{desc} val label choice")
            metrics["val_quality_label_choice"] = round(score(plan.metric, chosen, val_refs, plan.labels)[0], 4)
    if pairs:
        with times("eval_pref"):
            margins = preference_margins(
                model, tok, pairs, lambda m: to_prompt(Example(m, "")), desc=f"{desc} preference pairs"
            )
        metrics.update(preference_metrics(margins), pref_margins=[round(m, 4) for m in margins])
    if plan.latency_requests:
        with times("eval_latency"):
            metrics.update(
                latency(
                    model, tok, prompts, plan.max_new_tokens, plan.latency_requests, desc=f"{desc} latency"
                ).metrics()
            )
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
    return [
        {
            "id": e.id,
            "source": e.source,
            "prompt": e.messages[-1]["content"] if e.messages else "",
            "prediction": p,
            "reference": e.completion,
            "score": i if not isinstance(i, tuple) else list(i),
            "exact_match": exact_match(p, e.completion),
            "loose_match": loose_match(p, e.completion),
        }
        for e, p, i in zip(test, preds, items)
    ]


def quantized_control(model, tok, test: list[Example], plan: EvalPlan, probe=None) -> dict:
    """The untrained quantized base, scored like every run: ``model`` (an adapter on a 4-bit base) with its adapter
    disabled answers the test split zero-shot (``control_quality``) and, with ``probe(model) → {probe_acc}``, the
    general probe (``control_probe_acc``). Quantization and training then show apart in the forgetting table."""
    with model.disable_adapter():
        preds, _ = generate(model, tok, [e.messages for e in test], plan.decoding, desc="quantized base (control)")
        out = {"control_quality": round(score(plan.metric, preds, [e.completion for e in test], plan.labels)[0], 4)}
        if probe is not None:
            got = probe(model)
            if "probe_acc" in got:
                out["control_probe_acc"] = got["probe_acc"]
    return out


def score_seed(model, tok, inputs: EvalInputs, rows: list[dict], seed: int, desc: str) -> float:
    """Another training seed of a variant on the test split: its answers and primary-metric items go into the primary
    seed's ``rows`` (``seed_predictions`` / ``seed_scores``, keyed by seed); returns its quality."""
    test, plan = inputs.test, inputs.plan
    preds, _ = generate(model, tok, [e.messages for e in test], plan.decoding, desc=desc)
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
    corpus: list | None = None  # task.corpus's documents (data/prepared/corpus.jsonl), where the task has one
    retrieval: object | None = None  # a variant asked with passages: its bakeoff.data.raft.VariantPassages

    @classmethod
    def load(cls, data_dir, params: Params) -> EvalInputs:
        from pathlib import Path

        from bakeoff.data.corpus import prepared
        from bakeoff.data.examples import load_examples, load_pairs

        d = Path(data_dir)
        train, val, test = (load_examples(d / f"{s}.jsonl") for s in ("train", "val", "test"))
        if params.eval.max_examples:
            test = test[: params.eval.max_examples]
        pairs = load_pairs(d / "prefs_test.jsonl") if (d / "prefs_test.jsonl").exists() else []
        stats = DataStats.from_dict(json.loads((d / "stats.json").read_text()))
        plan = EvalPlan.from_params(params, stats.labels)
        gen = stats.generation or Generation()
        plan.max_new_tokens = gen.max_new_tokens if gen.has("max_new_tokens") else plan.max_new_tokens  # auto
        return cls(train, val, test, pairs, plan, prepared(d))

    def as_asked(self, v, embedder: str) -> EvalInputs:
        """The inputs as variant ``v`` is asked them: its validation and test prompts with their retrieved passages
        where it has ``passages`` (``bakeoff.data.raft``; ``Skipped`` without a corpus), else these."""
        from dataclasses import replace

        from bakeoff.data.raft import VariantPassages

        use = VariantPassages.of(v, self.corpus, embedder)
        if use is None:
            return self
        return replace(self, val=use.asked(self.val), test=use.asked(self.test), retrieval=use)


def side_check(record: dict, metrics: dict, name: str, fn) -> bool:
    """Run one side check (lm-eval, the forgetting probe, KL to the base, unmerged latency): its figures go into
    ``metrics``; its failure is its own, recorded in ``record["side_checks"][name]`` with the reason, never the
    arm's, whose quality and test answers stand. Returns whether it ran."""
    from bakeoff.core.runs import classify

    try:
        metrics.update(fn() or {})
        return True
    except Exception as e:  # any failure of a side figure is that figure's, not the run's
        status, reason = classify(e)
        record.setdefault("side_checks", {})[name] = {"status": status, "error": reason.splitlines()[0][:300]}
        print(f"[{record.get('name')}] side check {name} {status}: {reason.splitlines()[0][:200]}", flush=True)
        return False


@dataclass(frozen=True)
class LmEvalRun:
    """How lm-eval checks a run: ``mode`` ``reuse``, it scores the run's own answers (the model is not used);
    ``generate``, it generates them again with the model, in ``dtype``; ``to_prompt`` as the run was asked."""

    mode: str = "reuse"
    dtype: str = "float32"
    to_prompt: Callable[[Example], list[dict]] | None = None


def run_lm_eval(inputs: EvalInputs, rows: list[dict], model, tok, work_dir, how: LmEvalRun = LmEvalRun()) -> dict:
    """lm-eval's exact match on the test split, and on how many examples it disagrees with bakeoff's ``rows``."""
    from bakeoff.evaluate import lmeval

    to_prompt, dtype, mode = how.to_prompt, how.dtype, how.mode

    task = lmeval.write_task(inputs.test, tok, work_dir, inputs.plan.max_new_tokens, to_prompt)
    if mode == "reuse":
        to_prompt = to_prompt or (lambda e: e.messages)
        model = lmeval.replay({render_prompt(tok, to_prompt(e)): r["prediction"] for e, r in zip(inputs.test, rows)})
    t0 = time.perf_counter()
    out = lmeval.run_task(task, model, tok, inputs.plan.batch_size, dtype=dtype)
    # lm-eval's exact_match ignores case, punctuation and spacing: the like-for-like figure is bakeoff's loose_match
    return {
        **lmeval.agreement([r["loose_match"] for r in rows], out["per_example"]),
        "lm_eval_generated": float(mode == "generate"),
        "lm_eval_wall_s": round(time.perf_counter() - t0, 2),
    }


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
        from bakeoff.core.models import load_for_eval

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
        self.metrics = {
            "general_kl": round(kl, 5),
            "general_kl_wall_s": round(time.perf_counter() - t0, 2),
            "general_kl_against": against,
        }

"""The prompting baseline's search: tune.trials points of its grid (shots, selection, instruction), each scored on the
validation split, the best kept."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from bakeoff.search.space import SearchDirs
from bakeoff.search.study import Draws, grid_order, open_study, run_study, seeded, values_drawn
from bakeoff.search.trials import trial_failure, with_recipe

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def search_prompt(params: Params, name: str, dirs: SearchDirs, log_trial=None) -> dict:
    """The prompting arm searched like a variant: ``tune.trials`` points of baseline ``name``'s ``search`` space
    (shots, selection, instruction), each scored on the validation split with the base model in the serving dtype
    (the better of free generation and label choice where labels exist). A shot count whose prompts do not fit the
    model's context is pruned."""
    tc, b = params.tune, params.baseline(name)
    recipe = {k: getattr(b, k, None) for k in b.search or {}}  # trial 0: the baseline as params.yaml writes it
    space = with_recipe({k: {"choices": v} for k, v in (b.search or {}).items()}, recipe)
    no_corpus = (b.passages or any((b.search or {}).get("passages") or [])) and not (
        dirs.data / "corpus.jsonl"
    ).exists()
    if not tc.trials or not space or no_corpus:
        return {
            "baseline": name,
            "values": {},
            "trials": [],
            "searched": b.search,
            "skipped": "tune.trials is 0"
            if not tc.trials
            else f"baselines.{name} has no search"
            if not space
            else "no task.corpus: its passages have nothing to come from",
        }
    s = PromptSearch(params, name, space, dirs, log_trial)
    study, storage = open_study(params, name, space, dirs, "maximize")
    rec = run_study(
        study,
        s.objective,
        tc.trials,
        draws=Draws(storage, sampler_for=seeded(tc, space), recipe=recipe, grid=grid_order(space, tc.seed, recipe)),
    )
    twin = next((t for t in rec["trials"] if t.get("recipe")), None)
    return {
        "baseline": name,
        "storage": storage.split("://")[0],
        "searched": b.search,
        "objective": params.task.metric,
        **rec,
        **({"recipe": {"values": recipe, "state": twin["state"], "value": twin.get("value")}} if twin else {}),
    }


class PromptSearch:
    """The base model loaded once for every trial of one prompting baseline's search."""

    def __init__(self, params: Params, name: str, space: dict, dirs: SearchDirs, log_trial):
        from bakeoff.core.models import load_for_eval, load_tokenizer, resolve_precision
        from bakeoff.evaluate.local import EvalInputs

        self.params, self.name, self.space, self.log_trial = params, name, space, log_trial
        self.b = params.baseline(name)
        self.inputs = EvalInputs.load(dirs.data, params)
        self.model = load_for_eval(dirs.base, precision=resolve_precision(params.eval.dtype))
        self.tok = load_tokenizer(dirs.base)
        self.context = getattr(self.model.config, "max_position_embeddings", None) or 10**9

    def prompts(self, cfg: dict) -> list[list[dict]]:
        """The validation prompts at this trial's shots, selection, instruction, passages and passage length."""
        from dataclasses import replace

        from bakeoff.data.prompts import Prompter

        p, inputs = self.params, self.inputs
        to_prompt = Prompter(replace(self.b, **cfg), inputs.train, p.task.seed, p.retrieval.embedder, inputs.corpus)
        return [to_prompt(e) for e in inputs.val]

    def objective(self, trial):
        import optuna

        from bakeoff.data.prompts import encode, render_prompt

        cfg = {k: trial.suggest_categorical(k, spec["choices"]) for k, spec in self.space.items()}
        values_drawn()
        t_start = time.perf_counter()
        prompts = self.prompts(cfg)
        tokens = [len(encode(self.tok, render_prompt(self.tok, p))) for p in prompts]
        trial.set_user_attr("prompt_tokens_per_request", round(sum(tokens) / len(tokens), 1))
        result = {"state": "pruned"}
        try:
            if max(tokens) + self.inputs.plan.max_new_tokens > self.context:
                shots = cfg.get("shots", self.b.shots)
                raise optuna.TrialPruned(
                    f"{shots} shots do not fit the context ({max(tokens)} prompt tokens, {self.context} at most)"
                )
            value = self.score(trial, prompts)
            result = {"state": "complete", "value": value}
            return value
        except optuna.TrialPruned:
            raise
        except Exception as e:  # out of memory on long prompts, a crash: this trial's result
            result.update(trial_failure(e))
            for k in ("status", "error", "peak_mb"):
                trial.set_user_attr(k, result[k])
            raise
        finally:
            result["wall_s"] = round(time.perf_counter() - t_start, 1)
            trial.set_user_attr("wall_s", result["wall_s"])
            if self.log_trial:
                self.log_trial(trial.number, cfg, result)

    def score(self, trial, prompts: list[list[dict]]) -> float:
        """The primary metric on validation: free generation, or label choice where labels exist and it is better."""
        from bakeoff.core.scoring import score
        from bakeoff.evaluate.generation import generate
        from bakeoff.evaluate.logprobs import choose_labels

        plan, metric, refs = self.inputs.plan, self.params.task.metric, [e.completion for e in self.inputs.val]
        preds, _ = generate(self.model, self.tok, prompts, plan.decoding, desc=f"{self.name} trial")
        value = free = score(metric, preds, refs, plan.labels)[0]
        if plan.labels:
            choice = score(metric, choose_labels(self.model, self.tok, prompts, plan.labels), refs, plan.labels)[0]
            trial.set_user_attr("label_choice", choice)
            value = max(free, choice)
        trial.set_user_attr("free_generation", free)
        return value

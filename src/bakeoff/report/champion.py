"""The champion in MLflow's model registry with the transformers flavour: ``mlflow.pyfunc.load_model(
"models:/<experiment>@champion")`` answers a chat request as the evaluated model answered it.

A fine-tuned variant is logged into its own run as an MLflow model: a full fine-tune as its whole checkpoint, an
adapter (LoRA, QLoRA, DPO) as the PEFT adapter over the base, the base referenced by its folder (``base_model_path``:
MLflow's way for a base no hub serves; nothing of it is copied, and the folder must be there when it is loaded). A
prompting baseline's champion is the base itself with its prompt (``prompt.json``: the instruction and shots to send
before every request). The pyfunc is MLflow's ``llm/v1/chat``: it takes ``{"messages": [...]}``, applies the
tokenizer's chat template and decodes greedily up to ``task.max_new_tokens``, as the evaluation does, in the dtype
the run was evaluated in. A QLoRA adapter is served over the 16-bit base, not the 4-bit one it trained on: its
answers may differ from the evaluated ones, and the version's description says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from bakeoff.core import runs
from bakeoff.core.records import read_run
from bakeoff.core.techniques import facts

if TYPE_CHECKING:
    from bakeoff.core.sections import Params


def _requirements() -> list[str]:
    """The packages the model needs, pinned to this run's (given, so MLflow does not load the model again to infer
    them)."""
    from importlib.metadata import version

    return [f"{p}=={version(p)}" for p in ("torch", "transformers", "peft", "accelerate", "mlflow")]


def log_model(params: Params, name: str, run_id: str, dtype: str) -> tuple[object, str]:
    """The run's model as an MLflow model in run ``run_id``; (its ModelInfo, a description for the version)."""
    import mlflow

    from bakeoff.core.models import DTYPES, load_model, load_tokenizer

    chat = {
        "task": "llm/v1/chat",
        "model_config": {"max_new_tokens": params.task.max_new_tokens, "do_sample": False},
        "pip_requirements": _requirements(),
        "name": "model",
        "torch_dtype": DTYPES[dtype],
    }
    folder = runs.variant_dir(name) if name in params.variants else None
    base = runs.BASE.resolve()
    technique = params.variants[name].technique if folder else "prompting"
    with mlflow.start_run(run_id=run_id):
        if folder is not None and (folder / "config.json").exists():  # a full fine-tune: its whole checkpoint
            return mlflow.transformers.log_model(str(folder), **chat), (
                f"`{name}` ({technique}): the whole fine-tuned checkpoint, served in {dtype}"
            )
        tok = load_tokenizer(base)
        model = load_model(base, dtype=DTYPES[dtype])
        if folder is None:  # a prompting baseline: the base, and the prompt to send with every request
            prompt = read_run(runs.eval_record(name)).prompt_sent or {}
            mlflow.log_text(json.dumps(prompt, indent=2), "model_prompt/prompt.json")
            return mlflow.transformers.log_model({"model": model, "tokenizer": tok}, **chat), (
                f"`{name}` (prompting): the base model; send the instruction and shots of model_prompt/prompt.json "
                "before each request, as the evaluation did"
            )
        from peft import PeftModel

        peft = PeftModel.from_pretrained(model, folder)
        note = (
            " Served over the 16-bit base: it trained on the 4-bit one, so answers may differ from the evaluated ones."
            if facts(technique).quantized
            else ""
        )
        return mlflow.transformers.log_model({"model": peft, "tokenizer": tok}, base_model_path=str(base), **chat), (
            f"`{name}` ({technique}): the PEFT adapter over the base at {base} (not copied), served in {dtype}.{note}"
        )


def register(params: Params, name: str, run_id: str, dtype: str, files: dict[str, Path]) -> dict:
    """Log the run's model and its records (``files``), register it as a version of the model named after the
    experiment, alias ``champion``; {name, version, source, flavour}."""
    import mlflow

    from bakeoff.core.tracking import experiment_name

    client = mlflow.MlflowClient()
    before = client.get_run(run_id).info  # the run's own end: logging the model into it later does not move it
    info, description = log_model(params, name, run_id, dtype)
    if before.end_time:
        client.set_terminated(run_id, before.status, end_time=before.end_time)
    for path in files.values():
        client.log_artifact(run_id, str(path), "records")
    registered = experiment_name(params)
    version = mlflow.register_model(info.model_uri, registered, tags={"bakeoff.name": name})
    client.update_model_version(registered, version.version, description=description)
    client.set_registered_model_alias(registered, "champion", version.version)
    return {"name": registered, "version": version.version, "source": info.model_uri, "flavour": "transformers"}

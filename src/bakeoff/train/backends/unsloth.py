"""``backend: unsloth`` on a LoRA or QLoRA variant: the model and adapters come from Unsloth's FastLanguageModel.

Unsloth patches transformers, PEFT and TRL when imported, so it must be imported before them, in its own
process: ``stages/train.py`` calls ``preload()`` first thing for such a variant (each DVC stage is a process).
On a machine without a CUDA GPU the variant ends ``skipped`` at once (``cpu_reason``), before Unsloth is imported.
What Unsloth says it cannot run (``unsupported``) ends as status ``skipped`` with Unsloth's own message; any other
exception is a failure (status ``failed``, with its traceback).
"""

from __future__ import annotations

import torch

from bakeoff.core.models import DTYPES
from bakeoff.core.runs import Skipped


def preload() -> None:
    """Import Unsloth before anything imports transformers; a failure is kept for ``build`` to report."""
    global _IMPORT_ERROR
    try:
        import unsloth  # noqa: F401
    except Exception as e:  # no GPU it supports, missing compiler, ...: the variant is skipped, not crashed
        _IMPORT_ERROR = f"{type(e).__name__}: {e}"


_IMPORT_ERROR: str | None = None


def linear_targets(model) -> list[str]:
    """Names of the linear layers 'all-linear' means (every nn.Linear but the output head)."""
    names = {
        n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and "lm_head" not in n
    }
    return sorted(names)


def evidence(model) -> dict:
    """What shows that Unsloth's own code runs this model: its version and the forward functions it put in place,
    on the module or on its class (on CPU: the causal-LM forward with its chunked cross-entropy, from
    ``unsloth_zoo.cpu.ops``), rather than transformers' or PEFT's."""
    import unsloth

    patched = set()
    for m in model.modules():
        for owner, fn in (("instance", vars(m).get("forward")), ("class", getattr(type(m), "forward", None))):
            where = getattr(getattr(fn, "__func__", fn), "__module__", "") or ""
            if where.startswith("unsloth"):
                patched.add(f"{type(m).__name__}.forward ({owner}) ← {where}")
    return {"unsloth_version": getattr(unsloth, "__version__", "?"), "patched": sorted(patched)}


def build(base_dir, variant, precision: str, load_in_4bit: bool):
    preload()
    if _IMPORT_ERROR:
        raise Skipped(f"Unsloth cannot be imported here: {_IMPORT_ERROR}")
    try:
        from unsloth import FastLanguageModel

        o, t = variant.options, variant.train
        model, _ = FastLanguageModel.from_pretrained(
            model_name=str(base_dir),
            max_seq_length=t.max_seq_len,
            dtype=DTYPES[precision],
            load_in_4bit=load_in_4bit,
            use_gradient_checkpointing="unsloth" if t.gradient_checkpointing else False,
        )
        targets = linear_targets(model) if o["targets"] == "all-linear" else o["targets"]
        model = FastLanguageModel.get_peft_model(
            model,
            r=o["r"],
            lora_alpha=o["alpha"],
            lora_dropout=o["dropout"],
            target_modules=targets,
            use_gradient_checkpointing="unsloth" if t.gradient_checkpointing else False,
            random_state=t.seed,
        )
        model.bakeoff_backend_evidence = evidence(model)  # into the run record (bakeoff.train.trainer.train)
        return model
    except Exception as e:
        if unsupported(e):  # what Unsloth refuses on this platform or model, in its own words
            raise Skipped(f"Unsloth cannot run this variant here: {type(e).__name__}: {e}") from e
        raise  # anything else is a failure (status failed, with its traceback), not "unsupported"


UNSUPPORTED = (
    "not supported",
    "unsupported",
    "does not support",
    "not yet support",
    "only supports",
    "cannot find any torch accelerator",
    "requires a gpu",
    "no gpu",
    "not available on",
)


def unsupported(e: BaseException) -> bool:
    """Whether an exception from Unsloth says it cannot run here (an unsupported model, dtype or device) rather than
    a crash: NotImplementedError or ImportError, or Unsloth's words for it."""
    if isinstance(e, (NotImplementedError, ImportError)):
        return True
    return (
        isinstance(e, (ValueError, RuntimeError, TypeError))
        and any(w in str(e).lower() for w in UNSUPPORTED)
        and not isinstance(e, torch.OutOfMemoryError)
    )


def cpu_reason() -> str | None:
    """Why ``backend: unsloth`` does not run on this machine (no CUDA GPU), or None where it does."""
    if torch.cuda.is_available():
        return None
    return (
        "Unsloth's kernels need a CUDA GPU and this machine has none; its CPU fallback would measure nothing of "
        "them. On a GPU this variant trains with no edit"
    )

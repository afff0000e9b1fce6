"""Ship the winner: the artifacts a serving engine loads, and a llama.cpp server to prove they still answer alike.

    adapter(variant_dir, out / "adapter")        # PEFT's format, as vLLM's --lora-modules loads it
    merge(base_dir, variant_dir, out / "merged")  # bf16 safetensors with the tokenizer and chat template
    to_gguf(out / "merged", out / "model-f16.gguf", "f16")   # llama.cpp's own converter, not a copy of it
    with LlamaServer(gguf) as srv: srv.base_url  # llama-cpp-python's OpenAI-compatible server on 127.0.0.1

The converter ships in llama-cpp-python's source distribution (vendor/llama.cpp); `make setup` unpacks
convert_hf_to_gguf.py with its conversion/ and gguf-py/ folders into <venv>/share/llama.cpp
(``BAKEOFF_LLAMA_CPP`` names another llama.cpp checkout).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Self

from bakeoff.core.errors import UserError

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "README.md")


def converter() -> Path:
    root = Path(os.environ.get("BAKEOFF_LLAMA_CPP") or Path(sys.prefix) / "share" / "llama.cpp")
    script = root / "convert_hf_to_gguf.py"
    if not script.exists():
        raise UserError(
            f"llama.cpp's converter is not at {script}: run `make setup` (it unpacks it from "
            "llama-cpp-python's source) or set BAKEOFF_LLAMA_CPP to a llama.cpp checkout"
        )
    return script


def is_adapter(variant_dir: Path) -> bool:
    return (Path(variant_dir) / "adapter_config.json").exists()


def adapter(variant_dir: Path, out: Path) -> Path | None:
    """The trained LoRA adapter as PEFT saved it (None for a full fine-tune: its merged model is the artifact)."""
    if not is_adapter(variant_dir):
        return None
    out.mkdir(parents=True, exist_ok=True)
    for f in ADAPTER_FILES:
        if (Path(variant_dir) / f).exists():
            shutil.copy2(Path(variant_dir) / f, out / f)
    return out


def merge(base_dir: Path, variant_dir: Path, out: Path) -> Path:
    """The variant as one bf16 model: an adapter merged into the base (PEFT's merge_and_unload, in bf16 as the
    evaluation serves it), or a full fine-tune's weights cast to bf16; tokenizer, chat template and generation
    config beside it."""
    import torch

    from bakeoff.core.models import load_for_eval, load_tokenizer

    model = load_for_eval(base_dir, variant_dir, precision="bf16")
    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    load_tokenizer(base_dir).save_pretrained(out)
    for f in ("chat_template.jinja",):
        if (Path(base_dir) / f).exists() and not (out / f).exists():
            shutil.copy2(Path(base_dir) / f, out / f)
    return out


def own_code(folder: Path) -> list[str]:
    """What in a model folder would make llama.cpp's converter run the model's own code: it loads some tokenizers with
    ``trust_remote_code=True`` whatever bakeoff says, which runs Python files the folder holds or ``auto_map`` names."""
    import json

    found = sorted(p.name for p in Path(folder).glob("*.py"))
    for name in ("config.json", "tokenizer_config.json"):
        path = Path(folder) / name
        if path.exists() and "auto_map" in (json.loads(path.read_text()) or {}):
            found.append(f"{name}: auto_map")
    return found


def to_gguf(merged: Path, out: Path, outtype: str = "f16", trust_remote_code: bool = False) -> Path:
    """llama.cpp's convert_hf_to_gguf.py on the merged folder (run as a program: its code is not copied here). A
    folder with code of its own is refused unless ``model.trust_remote_code`` allows it (``own_code``)."""
    code = own_code(merged)
    if code and not trust_remote_code:
        raise UserError(
            f"{merged} carries code of its own ({', '.join(code)}), which llama.cpp's converter would run "
            "(it loads some tokenizers with trust_remote_code=True): set model.trust_remote_code: true "
            "if you trust it, or export without GGUF"
        )
    script = converter()
    cmd = [sys.executable, str(script), str(merged), "--outfile", str(out), "--outtype", outtype]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0 or not out.exists():
        raise RuntimeError(f"llama.cpp's converter failed ({' '.join(cmd)}):\n{(r.stderr or r.stdout)[-2000:]}")
    return out


def source_gguf(base_dir: Path) -> Path | None:
    """The GGUF the base model was read from (a built-in alias), or None for a hub or local model."""
    import json

    from bakeoff.core.models import fetch_alias_gguf

    meta = Path(base_dir) / "bakeoff_source.json"
    src = json.loads(meta.read_text()) if meta.exists() else {}
    return fetch_alias_gguf(src["alias"]) if src.get("kind") == "alias" else None


def with_tokenizer_of(converted: Path, source: Path, out: Path, name: str) -> Path:
    """``converted`` with every ``tokenizer.*`` key taken from ``source``, through gguf's own metadata copier.

    A base read from a GGUF comes back from transformers with a tokenizer.json that llama.cpp's converter takes for
    a SentencePiece vocabulary (wrong token types, wrong end-of-turn id); the base's GGUF holds the tokenizer
    llama.cpp was built for, and the weights are the converter's."""
    import gguf
    from gguf.scripts.gguf_new_metadata import MetadataDetails, copy_with_new_metadata

    conv, src = gguf.GGUFReader(converted), gguf.GGUFReader(source)
    arr = gguf.GGUFValueType.ARRAY
    new = {
        f.name: MetadataDetails(f.types[0], f.contents(), sub_type=f.types[-1] if f.types[0] == arr else None)
        for f in src.fields.values()
        if f.name.startswith("tokenizer.")
    }
    new[gguf.Keys.General.NAME] = MetadataDetails(gguf.GGUFValueType.STRING, name)
    drop = [k for k in conv.fields if k.startswith("tokenizer.") and k not in new]
    writer = gguf.GGUFWriter(out, arch=conv.fields[gguf.Keys.General.ARCHITECTURE].contents(), endianess=conv.endianess)
    copy_with_new_metadata(conv, writer, new, drop)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama-cpp-python's OpenAI-compatible server on 127.0.0.1 for one GGUF, started and stopped by its ``with``.
    The model is served as ``alias``; greedy requests get the same chat template the GGUF carries."""

    ENGINE = "llama.cpp (llama-cpp-python server)"

    def __init__(
        self,
        gguf: Path,
        alias: str = "bakeoff",
        threads: int | None = None,
        n_ctx: int = 4096,
        api_key: str | None = None,
        log: Path | None = None,
    ):
        self.gguf, self.alias, self.n_ctx, self.api_key = Path(gguf), alias, n_ctx, api_key
        self.threads = threads or max(1, (os.cpu_count() or 2))
        self.port = free_port()
        self.log = log
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "bakeoff.ship.llama_server",
            "--model",
            str(self.gguf),
            "--model_alias",
            self.alias,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(self.n_ctx),
            "--n_threads",
            str(self.threads),
            "--n_threads_batch",
            str(self.threads),
        ]
        return cmd + (["--api_key", self.api_key] if self.api_key else [])

    def __enter__(self) -> Self:
        import urllib.request

        if self.log:
            Path(self.log).parent.mkdir(parents=True, exist_ok=True)
        out = open(self.log, "w") if self.log else subprocess.DEVNULL
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"llama.cpp's server exited ({self.proc.returncode}) on {self.gguf}"
                    + (f"; see {self.log}" if self.log else "")
                )
            try:
                req = urllib.request.Request(
                    f"{self.base_url}/models",
                    headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else {},
                )
                urllib.request.urlopen(req, timeout=2).read()
                return self
            except Exception:  # not up yet
                time.sleep(0.3)
        self.__exit__(None, None, None)
        raise RuntimeError(f"llama.cpp's server did not answer on {self.base_url} within 120 s")

    def __exit__(self, *exc) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def modelfile(gguf_name: str, stop: list[str]) -> str:
    """An Ollama Modelfile: the GGUF, greedy decoding, the chat template's stop tokens. Ollama reads the chat
    template from the GGUF's metadata."""
    lines = [f"FROM ./{gguf_name}", "PARAMETER temperature 0"]
    return "\n".join(lines + [f'PARAMETER stop "{s}"' for s in stop]) + "\n"


def serve_md(variant: str, files: dict, gguf_name: str | None, alias: str) -> str:
    """SERVE.md: the exact commands for vLLM (adapter on its base), llama.cpp and Ollama (with a GGUF), run from this
    folder."""
    vllm = (
        (
            "vllm serve <the base model: the hub id or folder you trained on> --enable-lora "
            f"--lora-modules {alias}=./adapter --max-lora-rank <r or more>"
        )
        if files.get("adapter")
        else "vllm serve ./merged"
    )
    return f"""# Serving `{variant}`

Made by bakeoff's `export` stage. Every command runs from this folder (`exports/{variant}/`).

| file | what it is | load it with |
|---|---|---|
{chr(10).join(f"| `{v}` | {k} | {LOADERS.get(k, '')} |" for k, v in files.items())}

## vLLM
```bash
{vllm}
vllm serve ./merged            # or the merged bf16 model, no adapter
```

{_gguf_md(gguf_name, alias)}
## Ask it (the OpenAI-compatible API)
```bash
curl http://127.0.0.1:8080/v1/chat/completions -H 'Content-Type: application/json' \\
  -d '{{"model": "{alias}", "temperature": 0, "messages": [{{"role": "user", "content": "..."}}]}}'
```
"""


def _gguf_md(gguf_name: str | None, alias: str) -> str:
    """SERVE.md's llama.cpp and Ollama sections (none without a GGUF: ``export.gguf: null``)."""
    if not gguf_name:
        return "No GGUF was made (`export.gguf: null`), so no llama.cpp or Ollama commands.\n"
    return f"""## llama.cpp
```bash
llama-server -m ./{gguf_name} --host 127.0.0.1 --port 8080 --temp 0
python -m llama_cpp.server --model ./{gguf_name} --model_alias {alias} --host 127.0.0.1 --port 8080   # llama-cpp-python
```

## Ollama
```bash
ollama create {alias} -f Modelfile
ollama run {alias}
```
"""


LOADERS = {
    "adapter": "vLLM `--lora-modules`, PEFT `PeftModel.from_pretrained`",
    "merged": "vLLM, transformers `from_pretrained`",
    "gguf": "llama.cpp, llama-cpp-python, Ollama",
    "modelfile": "`ollama create`",
}

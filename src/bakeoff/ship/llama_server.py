"""llama-cpp-python's OpenAI-compatible server, as the export stage and the tests start it:

    python -m bakeoff.ship.llama_server --model ./lora-f16.gguf --model_alias lora --port 8080   # its own arguments

On a CPU with AMX (Intel Xeon 4th generation and later), llama.cpp repacks quantized weights into AMX tiles at
load; with llama-cpp-python 0.3.36 the server then died with a segmentation fault on its first request (the default
model's Q4_1 GGUF, a 2-core Xeon with amx_int8). There, and only there, this turns the repacking off
(``use_extra_bufts``, llama.cpp's ``--no-repack``), keeping the plain CPU kernels; elsewhere it is the server as
it ships.
"""

from __future__ import annotations

import sys
from pathlib import Path


def has_amx(cpuinfo: Path = Path("/proc/cpuinfo")) -> bool:
    """Whether this CPU reports AMX tiles (Linux's cpuinfo flags; False where there is none to read)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return False
    return any(line.startswith("flags") and "amx_tile" in line.split() for line in text.splitlines())


def without_repacking() -> None:
    """Every model loaded from here on keeps llama.cpp's plain CPU buffers (no extra, repacking buffer types)."""
    import llama_cpp.llama_cpp as c

    default = c.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p

    c.llama_model_default_params = params


def main() -> int:
    if has_amx():
        without_repacking()
    from llama_cpp.server.__main__ import main as serve

    serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())

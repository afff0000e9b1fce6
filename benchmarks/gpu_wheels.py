"""The wheels the GPU check needs beside the lent H200's image, cut to fit one device call (64 MiB in all).

    python benchmarks/gpu_wheels.py            # writes .whl/ (git-ignored; name it in the device call's carry)

The image (Python 3.12, torch 2.11 + CUDA 13, transformers 5.17, peft, accelerate, pandas, scipy, pyarrow) lacks
bitsandbytes, trl, unsloth, unsloth_zoo and the pipeline's own stack (mlflow, optuna, datasets). This downloads
those at the versions ``requirements.lock`` pins, with the needs the image does not hold, for Python 3.12 on
x86-64, and cuts what the check never loads: bitsandbytes' libraries for other CUDA versions (it keeps CUDA 13's),
Unsloth's bundled web studio, torchao's compiled kernels (built for another torch; its Python path is what Unsloth
imports). dvc and lm-eval are not carried: the check runs the stage commands in dvc.yaml's order without dvc, and
the probe off. On the device, before the check:

    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / ".whl"
PINNED = [
    "trl",
    "bitsandbytes",
    "unsloth",
    "unsloth_zoo",
    "peft",
    "mlflow-skinny",
    "optuna",
    "datasets",
    "torchao",
    "cut-cross-entropy",
]
NEEDS = [  # what those need that the image lacks (pip's resolver for Python 3.12, less the image's package list)
    "dill==0.4.1",
    "multiprocess==0.70.19",
    "cachetools==7.3.3",
    "gitpython==3.2.1",
    "gitdb==4.0.12",
    "smmap==5.0.3",
    "importlib_metadata==9.1.0",
    "opentelemetry-api==1.45.2",
    "opentelemetry-proto==1.45.2",
    "opentelemetry-sdk==1.45.2",
    "opentelemetry-semantic-conventions==0.66b2",
    "pydantic==2.14.4",
    "pydantic_core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "python-dotenv==1.2.4",
    "sqlparse==0.6.1",
    "sqlalchemy==2.1.9",
    "alembic==1.20.1",
    "mako==1.4.3",
    "colorlog==6.12.0",
    "msgspec==0.23.0",
    "tyro==1.0.17",
    "docstring_parser==0.18.0",
    "typeguard==4.6.1",
    "nest-asyncio==1.6.0",
    "json5==0.17.3",
    "structlog==26.1.0",
    "fastapi==0.165.0",
    "starlette==1.10.0",
    "uvicorn==0.55.0",
    "databricks-sdk==0.167.0",
    "google-auth==2.63.0",
    "pyasn1==0.6.5",
    "pyasn1_modules==0.4.2",
    "cryptography==50.0.2",
    "cffi==2.1.1",
    "pycparser==3.12",
]
CUT = {  # wheel name prefix → files dropped
    "bitsandbytes": re.compile(r"bitsandbytes/libbitsandbytes_cuda(?!130)\d+\.so$"),
    "unsloth-": re.compile(r"^studio/"),
    "torchao": re.compile(r"\.so$"),
}


def pinned() -> list[str]:
    lock = (ROOT / "requirements.lock").read_text()
    out = []
    for name in PINNED:
        pattern = "^" + "[-_]".join(map(re.escape, re.split("[-_]", name))) + r"==(\S+)"
        m = re.search(pattern, lock, re.MULTILINE | re.IGNORECASE)
        if not m:
            sys.exit(f"gpu_wheels: requirements.lock pins no {name}")
        out.append(f"{name}=={m.group(1)}")
    return out


def cut(wheel: Path, drop: re.Pattern) -> None:
    """Rewrites ``wheel`` without the files ``drop`` matches, its RECORD kept true."""
    tmp = wheel.with_suffix(".tmp")
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        record = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        kept = [n for n in src.namelist() if not drop.search(n)]
        for n in kept:
            if n != record:
                dst.writestr(src.getinfo(n), src.read(n))
        lines = [ln for ln in src.read(record).decode().splitlines() if ln and ln.split(",")[0] in kept]
        dst.writestr(record, "\n".join(lines) + "\n")
    tmp.replace(wheel)


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir()
    platforms = [a for n in (17, 24, 27, 28) for a in ("--platform", f"manylinux_2_{n}_x86_64")]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            "3.12",
            "--implementation",
            "cp",
            *platforms,
            "--platform",
            "manylinux2014_x86_64",
            "--platform",
            "any",
            "-d",
            str(OUT),
            *pinned(),
            *NEEDS,
        ],
        check=True,
    )
    for wheel in sorted(OUT.glob("*.whl")):
        for prefix, drop in CUT.items():
            if wheel.name.startswith(prefix):
                cut(wheel, drop)
    total = sum(w.stat().st_size for w in OUT.glob("*.whl"))
    print(f"gpu_wheels: {len(list(OUT.glob('*.whl')))} wheels, {total / 2**20:.1f} MiB in {OUT}")


if __name__ == "__main__":
    main()

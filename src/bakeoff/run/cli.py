"""The ``bakeoff`` command (installed by ``make setup``; ``.venv/bin/bakeoff``), run in the project's folder:

    bakeoff quick                  a first answer in minutes (quick/reports/comparison.md)
    bakeoff repro                  the whole bake-off: dvc repro with a clock (reports/comparison.md)
    bakeoff size --model llama-3.1-8b --technique qlora [--seq-len 2048] [--micro-batch 1]
                                   the card table for a model you will really fine-tune, before any training
    bakeoff size                   every target of sizing.targets × every variant of params.yaml
    bakeoff report                 the report again from the runs' records (after a change to verdict: or cost:)
    bakeoff ui                     the MLflow UI on this run's experiment

Each takes ``--params FILE`` for another configuration: ``quick`` and ``size`` read it instead of params.yaml;
``repro`` and ``report`` run it in a workspace of its own, ``work/<FILE's name>/`` (ignored by git, the project's
DVC cache shared), so the project's own run and dvc.lock are left as they are. Bad input is said as the stages say
it (file, line, key and the fix) with exit status 2, and no traceback.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bakeoff.core.errors import UserError, cli

WORK = Path("work")  # where `repro --params FILE` runs FILE, one folder per file


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="bakeoff",
        description="Do you need to fine-tune, with which technique, on "
        "which card? Run in the project's folder (the one with dvc.yaml).",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="{quick,repro,size,report,ui}")

    def command(name: str, text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument(
            "--params", default="params.yaml", metavar="FILE", help="the configuration to run (default params.yaml)"
        )
        return p

    command(
        "quick",
        "A first answer in minutes: the same stages on a small budget, in quick/ (quick/reports/"
        "comparison.md); about 6 minutes on 2 CPU cores after set-up.",
    )
    p = command(
        "repro",
        "The whole bake-off: dvc repro with a clock, every variant and search (reports/comparison.md"
        "); with --params FILE other than params.yaml, in work/<FILE's name>/.",
    )
    p.add_argument("-f", "--force", action="store_true", help="run every stage, changed or not (dvc repro -f)")
    p = command(
        "size",
        "The GPU card table for a model you will really fine-tune, before any training: memory "
        "needed against each card, hours and dollars (projections; sizing: in params.yaml). "
        "Without --model and --technique: every target × every variant, one row each.",
    )
    p.add_argument("--model", help="a name in sizing.targets, e.g. llama-3.1-8b")
    p.add_argument("--technique", help="full, lora, qlora, dpo, or a variant's name")
    p.add_argument("--seq-len", type=int, default=None, help="tokens per row (default sizing.target_seq_len)")
    p.add_argument(
        "--micro-batch", type=int, default=None, help="rows per forward pass (default sizing.target_micro_batch)"
    )
    p.add_argument(
        "--tokens",
        type=float,
        default=None,
        help="training tokens to price (default cost.train_tokens, else what the variant trained on in runs/)",
    )
    command(
        "report",
        "The report again from the runs' records (dvc repro compare): after a change to verdict:, "
        "cost: or sizing: only compare runs; a stage whose own inputs changed runs first, as DVC "
        "does (the plan is printed before anything runs).",
    )
    p = command("ui", "The MLflow UI on this run's experiment (http://127.0.0.1:PORT).")
    p.add_argument("--port", type=int, default=5000)
    return ap


def _project() -> Path:
    root = Path.cwd()
    if not (root / "dvc.yaml").is_file():
        raise UserError(f"no dvc.yaml in {root}: run bakeoff in the project's folder (cd to the clone of bakeoff)")
    if not (root / ".dvc").is_dir():
        subprocess.run(["dvc", "init", "--quiet"], cwd=root, check=True)
    return root


def _params(arg: str) -> Path:
    path = Path(arg)
    if not path.is_file():
        raise UserError(f"--params {arg}: no such file (the project's configuration is params.yaml)")
    return path


def environment(**extra: str) -> dict:
    """This process's environment with its interpreter's folder first on PATH: dvc.yaml's stages run ``python``
    from PATH, which must be this one (``.venv/bin/bakeoff`` run without the venv activated)."""
    env = {**os.environ, **extra}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _workspace(root: Path, params: Path) -> tuple[Path, dict]:
    """Where a repro of ``params`` runs (the project itself for its own params.yaml, else work/<name>/) and the
    environment it runs with (one MLflow store for both)."""
    from bakeoff.run import quick

    if params.resolve() == (root / "params.yaml").resolve():
        return root, environment()
    header = (
        f"# {params} as `bakeoff repro --params {params}` runs it (a copy: edit {params}, then run that "
        "command again).\n"
    )
    dest = quick.build(root, root / WORK / params.stem, source=params, transform=lambda raw: raw, header=header)
    return dest, environment(MLFLOW_TRACKING_URI=quick.absolute_uri(params))


def _clock(root: Path, params: Path, args: list[str]) -> int:
    where, env = _workspace(root, params)
    if where != root:
        print(f"[bakeoff] {params} in {where} (the project's own run is left as it is)", flush=True)
    rc = subprocess.run([sys.executable, "-m", "bakeoff.run.clock", *args], cwd=where, env=env, check=False).returncode
    if rc == 0:
        other = "" if where == root else f" --params {params}"
        print(
            f"\nReport: {(where / 'reports' / 'comparison.md').relative_to(root)}   MLflow: bakeoff ui{other}",
            flush=True,
        )
    return rc


def size(args) -> int:
    from bakeoff.core import runs
    from bakeoff.core.config import load_params
    from bakeoff.core.records import read_run, read_stats
    from bakeoff.decide.sizing import longest_answer
    from bakeoff.run.cards import Asked, cards, every_variant, lines, table_lines

    if bool(args.model) != bool(args.technique):
        raise UserError(
            "size: give --model and --technique together (one card table), or neither (every target × every variant)"
        )
    params = load_params(_params(args.params))
    records = {n: read_run(runs.train_record(n)) for n in params.variants}  # after a run, if any
    answer = longest_answer(read_stats())  # after the data stage, if it ran
    asked = Asked(args.model or "", args.technique or "", args.seq_len, args.micro_batch, args.tokens)
    if not args.model:
        print("\n".join(table_lines(every_variant(params, asked, records, answer), params.sizing.margin)))
        return 0
    print("\n".join(lines(cards(params, asked, records, answer_tokens=answer), params.sizing.margin)))
    return 0


def ui(args) -> int:
    from bakeoff.core import tracking
    from bakeoff.core.config import load_params
    from bakeoff.core.schema import without_secret

    params = load_params(_params(args.params))
    uri = tracking.tracking_uri(params)
    if uri.startswith(("http://", "https://")):  # a server already: its own UI
        print(f"open {without_secret(uri)} (the MLflow server params.yaml names)", flush=True)
        return 0
    server = f"http://127.0.0.1:{args.port}"
    print("open", tracking.ui_url(params, server), flush=True)
    mlflow = shutil.which("mlflow") or str(Path(sys.executable).with_name("mlflow"))
    return subprocess.run([mlflow, "ui", "--backend-store-uri", uri, "--port", str(args.port)], check=False).returncode


def run(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "size":
        return size(args)
    if args.command == "ui":
        return ui(args)
    root, params = _project(), _params(args.params)
    if args.command == "quick":
        from bakeoff.run import quick

        os.environ["PATH"] = environment()["PATH"]  # the quick look's stages run this interpreter too
        return quick.main(params)
    return _clock(root, params, ["compare"] if args.command == "report" else ["-f"] if args.force else [])


def main() -> None:  # the console script
    sys.exit(cli(run)())


if __name__ == "__main__":
    main()

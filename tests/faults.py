"""Faults forced into the real stages, for the tests that prove no arm's failure stops `dvc repro` (a fake only to
force a fault; nothing of the product changes). Python runs `sitecustomize` at start-up from PYTHONPATH: the one
written here replaces a library function, in the processes named, with one that raises.

    env = faults.env(tmp_path, [("bakeoff.evaluate.lmeval", "run_task", "evaluate.py", None)])   # PYTHONPATH=tmp_path
    env = faults.env(tmp_path, [("bakeoff.train.variant", "run_variant", "train.py lora", None, "kill")])

``script`` may name the arm after the script ("train.py lora": that arm's process only); a fifth item ``"kill"``
makes the function SIGKILL its own process (what the host's out-of-memory killer does) instead of raising.
"""

from __future__ import annotations

import json
from pathlib import Path

SITE = """
import importlib.abc, importlib.util, json, os, sys
FAULTS = json.loads(%r)

def _wanted(script, rank):
    path, *args = script.split()
    return (sys.argv and sys.argv[0].endswith(path) and sys.argv[1:1 + len(args)] == args
            and (rank is None or os.environ.get("RANK") == str(rank)))

class Fault(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        todo = [f for f in FAULTS if f[0] == name and _wanted(f[2], f[3])]
        if not todo:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            for _, attr, script, rank, *how in todo:
                def boom(*a, _attr=attr, _kill=how == ["kill"], **k):
                    if _kill:
                        import signal
                        os.kill(os.getpid(), signal.SIGKILL)
                    raise RuntimeError(f"planted fault in {name}.{_attr}")
                setattr(module, attr, boom)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Fault())
"""


def env(folder: Path, faults: list[tuple]) -> dict:
    """``{"PYTHONPATH": folder}`` with a sitecustomize there: each (module, function, script, rank) makes
    ``module.function`` raise ``RuntimeError("planted fault in module.function")`` in the processes running a
    script whose path ends with ``script`` (and, where ``rank`` is given, only in that torchrun rank); a fifth item
    ``"kill"`` makes it SIGKILL its process instead."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITE % json.dumps(faults))
    return {"PYTHONPATH": str(folder)}

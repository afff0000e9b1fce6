"""Stage `data`: read, validate, check and split the task's raw files into data/prepared/.

    python stages/data.py models/base data/prepared

The split is written into a temporary folder beside the output and moved into place only when complete, so a
failure never leaves a half-written data/prepared/ for a later stage to take as valid.
"""

import json
import shutil
import sys
from pathlib import Path

from bakeoff import VERBOSE
from bakeoff.core.config import load_params
from bakeoff.core.errors import cli
from bakeoff.core.models import load_tokenizer
from bakeoff.data.prepare import prepare


@cli
def main() -> None:
    base, out = sys.argv[1], Path(sys.argv[2])
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        stats = prepare(load_params(), tmp, load_tokenizer(base))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    sp, checks = stats.get("splits") or {}, stats.get("checks") or {}
    prefs = "/".join(str(sp[k]) for k in ("prefs_train", "prefs_val", "prefs_test") if k in sp)
    # a row check is a count with its policy; the others (few val rows per label, prefs) are sentences, warned above
    found = [f"{c['count']} {k} ({c['policy']})" for k, c in checks.items() if isinstance(c, dict) and c.get("count")]
    print(
        f"[data] ok: train {sp.get('train')} · val {sp.get('val')} · test {sp.get('test')} rows"
        + (f", preference pairs {prefs}" if prefs else "")
        + f"; data hash {stats.get('data_hash')}; "
        + (", ".join(found) if found else "no duplicates, leakage or overlong rows")
        + " (the record: "
        f"{out}/stats.json)"
    )
    if isinstance(checks.get("prefs_val"), str):  # said here only (val_labels is warned as it is found)
        print(f"warning: {checks['prefs_val']}", file=sys.stderr)
    if VERBOSE:
        print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()

"""Stage `data`: read, validate, check and split the task's raw files into data/prepared/.

    python stages/data.py models/base data/prepared

The split is written into a temporary folder beside the output and moved into place only when complete, so a
failure never leaves a half-written data/prepared/ for a later stage to take as valid.
"""

import json
import shutil
import sys
from pathlib import Path

from bakeoff.config import load_params
from bakeoff.prepare import prepare
from bakeoff.errors import cli
from bakeoff.models import load_tokenizer


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
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()

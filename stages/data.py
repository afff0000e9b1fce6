"""Stage `data`: read, validate and split the task's raw files into data/prepared/.

    python stages/data.py models/base data/prepared
"""

import json
import sys

from bakeoff.config import load_params
from bakeoff.errors import cli
from bakeoff.data import prepare
from bakeoff.models import load_tokenizer
from bakeoff.runs import fresh_dir


@cli
def main() -> None:
    base, out = sys.argv[1], sys.argv[2]
    stats = prepare(load_params(), fresh_dir(out), load_tokenizer(base))
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()

"""Stage `baseline@<name>`: evaluate the untouched base model under one prompting strategy.

    python stages/baseline.py zero_shot

Strategies (params `baselines:`): zero-shot, k fixed shots, or the k nearest training examples per test item
(`selection: nearest`), each with an optional `instruction`; the same chat template and decoding as the variants.
"""

import sys

from bakeoff.core.config import load_params
from bakeoff.core.errors import cli
from bakeoff.evaluate.baseline import evaluate_baseline


@cli
def main() -> None:
    evaluate_baseline(load_params(), sys.argv[1])


if __name__ == "__main__":
    main()

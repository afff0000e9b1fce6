"""Stage `curve@<arm>-<share>`: one point of the data-value curve, the arm on a nested share of the training split.

    python stages/curve.py recommended 0.25

The arm (a role, `recommended` or `best_prompt`, or a run's name; params `curve:`) trained or prompted on the share
at its searched values, scored on the test split: reports/curve/<arm>-<share>/{point.json,predictions.jsonl}, and a
child MLflow run of the arm's run. The compare stage fits the curve, back-tests and projects it (reports/curve.json).
A point that fails is its recorded status; the stage still exits 0.
"""

import sys

from bakeoff.core.config import load_params
from bakeoff.core.errors import cli
from bakeoff.decide.decision import curve_arm
from bakeoff.search.curve_point import run_point


@cli
def main() -> None:
    params, arm = load_params(), sys.argv[1]
    run_point(params, arm, float(sys.argv[2]), *curve_arm(params, arm))


if __name__ == "__main__":
    main()

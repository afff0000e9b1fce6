"""Stage `compare`: the verdict, the table with intervals, GPU sizing, plots and one self-contained page.

    python stages/compare.py reports

Writes reports/comparison.{md,csv,html}, reports/metrics.json, reports/sizing.json, reports/curve.json (the
data-value curve), reports/plots/*.png, reports/flips/<variant>.jsonl, what DVC shows (reports/arms/<arm>.json for
`dvc metrics show`, reports/dvc/*.csv for `dvc plots show`), a git-tracked copy of the runs' records
(reports/records/, since DVC caches the records themselves), and a summary MLflow run holding them all.
"""

import sys
from pathlib import Path

from bakeoff import VERBOSE, report
from bakeoff.core import runs
from bakeoff.core.config import load_params
from bakeoff.core.errors import cli
from bakeoff.decide.data_value import with_curve
from bakeoff.decide.decision import decide
from bakeoff.decide.shipped_record import Shipped
from bakeoff.report import dvc_files, publish
from bakeoff.report.buyer_plots import decision_plots


@cli
def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "reports")
    params = load_params()
    shipped = Shipped.from_dict(runs.read_json(out / "shipped.json"))
    d = with_curve(params, decide(params, runs.fresh_dir(out / "flips"), shipped))
    images = report.plots(
        d.runs, runs.fresh_dir(out / "plots"), params.task.metric, d.pairwise, d.curve, d.verdict.scope
    )
    images.update(decision_plots(params, d, out / "plots"))
    paths = report.write_all(out, params, d, images, shipped)
    dvc_files.write(out, d.runs, d.records, d.costs, d.curve)
    dvc_files.records(out, runs.RUNS, out / "shipped.json")
    publish.to_mlflow(params, d, paths, out)
    publish.say(paths, VERBOSE)


if __name__ == "__main__":
    main()

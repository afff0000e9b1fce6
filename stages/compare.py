"""Stage `compare`: reports/comparison.{md,csv}, reports/metrics.json and a summary MLflow run.

    python stages/compare.py reports
"""

import sys
from pathlib import Path

import mlflow

from bakeoff import report, tracking
from bakeoff.config import load_params
from bakeoff.errors import cli


@cli
def main() -> None:
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "reports")
    params = load_params()
    df = report.collect(list(params.baselines), list(params.variants))
    paths = report.write(df, params.task.metric, out)
    with tracking.run(params, "comparison", "summary", "-", {"runs": list(df["name"])}):
        for p in paths.values():
            mlflow.log_artifact(str(p))
    print(paths["md"].read_text())


if __name__ == "__main__":
    main()

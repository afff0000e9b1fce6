"""What a user sees on opening the MLflow UI: the task's experiment in headless Chromium, saved as a PNG.

    python benchmarks/ui_screenshot.py                 # after `make repro`; needs chromium (apt-get install chromium)
    python benchmarks/ui_screenshot.py --run comparison  # the repro's parent run's page instead
    python benchmarks/ui_screenshot.py --report          # reports/comparison.html → reports/comparison.png

Starts `mlflow ui` on the project's store (the same one `make mlflow-ui` opens) on a free local port, opens the
experiment page (or one run's page), waits for the page's scripts, saves reports/bench/mlflow_ui.png, and stops the
server. Exits 1 when the browser or the server cannot be started.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", default=None, help="a run name to open (default: the experiment's runs table)")
    ap.add_argument("--report", action="store_true", help="the HTML report instead of the MLflow UI")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        sys.exit("error: no chromium on PATH (apt-get install chromium)")
    if args.report:  # the offline page as a reader opens it: its first screen and what follows, 1400 px wide
        page, out = ROOT / "reports" / "comparison.html", Path(args.out or ROOT / "reports" / "comparison.png")
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1400,2400", f"--screenshot={out}", page.as_uri()],
                       check=True, capture_output=True, timeout=180)
        print(f"wrote {out} from {page}")
        return
    args.out = args.out or str(ROOT / "reports" / "bench" / "mlflow_ui.png")

    import mlflow
    import requests

    from bakeoff.core import tracking
    from bakeoff.core.config import load_params

    params = load_params(ROOT / "params.yaml")
    uri = tracking.tracking_uri(params)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.MlflowClient().get_experiment_by_name(tracking.experiment_name(params))
    if exp is None:
        sys.exit(f"error: no experiment {tracking.experiment_name(params)!r} in {uri}: run `make repro` first")
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1",
                               "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).ok:
                    break
            except requests.RequestException:
                time.sleep(0.5)
        else:
            sys.exit("error: the MLflow UI did not start within 60 s")
        page = tracking.ui_url(params, f"http://127.0.0.1:{port}")  # the runs table, model-training view
        if args.run:
            found = mlflow.search_runs([exp.experiment_id], filter_string=f"tags.`bakeoff.name` = '{args.run}' and "
                                       f"tags.`{tracking.LATEST}` = 'true'")
            if found.empty:
                sys.exit(f"error: no latest run named {args.run!r}")
            page = f"http://127.0.0.1:{port}/#/experiments/{exp.experiment_id}/runs/{found.iloc[0]['run_id']}"
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1600,1000", "--virtual-time-budget=20000", f"--screenshot={out}", page],
                       check=True, capture_output=True, timeout=180)
        print(f"experiment {exp.name!r} (kind: {exp.tags.get(tracking.EXPERIMENT_KIND[0], 'not set')}) at {page}\n"
              f"wrote {out}")
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()

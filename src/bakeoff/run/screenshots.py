"""`make screenshots`: the pictures of this run the README shows, taken in headless Chromium through Playwright.

    make screenshots                      # after make repro: the three pictures
    python -m bakeoff.run.screenshots --only report

- ``reports/comparison.png``: the first screen of ``reports/comparison.html``, the report's answer.
- ``reports/mlflow_experiment.png``: the task's experiment in the MLflow UI, on a server this command starts on
  127.0.0.1 and stops: the newest repro run expanded (one row per arm), its quality, gain and interval columns shown,
  the side panels closed.
- ``reports/mlflow_curves.png``: the recommended arm's run in the same UI, its training and validation loss per step.

Each picture carries the commit of the report it shows (a PNG text chunk, ``bakeoff.commit``); the MLflow picture
is refused when the store's newest repro run was made at another commit than the report, and
``tests/test_docs.py`` fails when a committed picture's commit is not the report's. The browser is the system's
Chromium (Debian: ``apt-get install chromium``) or, where none is on PATH, Playwright's own
(``python -m playwright install chromium``).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bakeoff.core.sections import Params

COMMIT_KEY = "bakeoff.commit"
REPORT_PNG = Path("reports/comparison.png")
MLFLOW_PNG = Path("reports/mlflow_experiment.png")
CURVES_PNG = Path("reports/mlflow_curves.png")
CURVES = ("train_loss", "val_loss_during_training")  # logged at each step while the arm trains
# the runs table's columns: what a reader decides on; the UI's own Dataset, Source and Models columns hidden
SHOWN = ("quality", "val_quality", "gain", "ci_low", "ci_high", "train_wall_s", "train_peak_rss_mb")
HIDDEN = ("Dataset", "Source", "Models")


def report_commit(root: Path = Path(".")) -> str:
    """The commit the committed report was made at (its provenance in reports/metrics.json)."""
    from bakeoff.decide.metrics_record import MetricsFile

    return MetricsFile.from_dict(json.loads((root / "reports/metrics.json").read_text())).provenance.git_commit


def stamp(png: Path, commit: str) -> None:
    """Write ``commit`` into the PNG as a text chunk (the pixels are unchanged)."""
    from PIL import Image, PngImagePlugin

    info = PngImagePlugin.PngInfo()
    info.add_text(COMMIT_KEY, commit)
    with Image.open(png) as im:
        im.load()
        im.save(png, pnginfo=info)


def stamped(png: Path) -> str | None:
    from PIL import Image

    with Image.open(png) as im:
        return im.text.get(COMMIT_KEY)


def _browser(p):
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        return p.chromium.launch(executable_path=exe, args=["--no-sandbox"]) if exe else p.chromium.launch()
    except Exception as e:  # neither a system Chromium nor Playwright's: say how to get one
        raise SystemExit(
            f"error: no browser for the screenshots ({type(e).__name__}): apt-get install chromium, "
            "or python -m playwright install chromium"
        ) from e


def report_picture(p, html: Path, out: Path) -> None:
    browser = _browser(p)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(html.resolve().as_uri())
    page.wait_for_load_state("load")
    page.screenshot(path=str(out))
    browser.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _newest_repro(client, experiment_id: str):
    runs = client.search_runs(
        [experiment_id], filter_string="tags.kind = 'repro'", order_by=["start_time DESC"], max_results=1
    )
    return runs[0] if runs else None


@contextmanager
def _ui(uri: str):
    """The MLflow UI on 127.0.0.1 on the store ``uri``, started here and stopped on leaving; yields its address."""
    import requests

    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(240):
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.5)
        else:
            raise SystemExit("error: the MLflow UI did not answer within 2 minutes")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _repro_of(params: Params, commit: str):
    """(the store's URI, its client, the experiment, the newest repro run); refused when it is not the report's."""
    import mlflow

    from bakeoff.core import tracking
    from bakeoff.core.schema import without_secret

    uri = tracking.tracking_uri(params)
    mlflow.set_tracking_uri(uri)
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(tracking.experiment_name(params))
    repro = _newest_repro(client, exp.experiment_id) if exp else None
    if repro is None:
        raise SystemExit(
            f"error: no repro run of {tracking.experiment_name(params)!r} in {without_secret(uri)}: "
            "run make repro first"
        )
    made_at = repro.data.tags.get("git_commit") or repro.data.tags.get("mlflow.source.git.commit", "")
    if made_at != commit:
        raise SystemExit(
            f"error: the store's newest repro run ({repro.info.run_name}) was made at {made_at[:12]}, the "
            f"report at {commit[:12]}: the picture would not show this report's run"
        )
    return uri, client, exp, repro


def mlflow_picture(p, params: Params, commit: str, out: Path) -> None:
    from bakeoff.core import tracking

    uri, _, _, repro = _repro_of(params, commit)
    with _ui(uri) as server:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1600, "height": 760})
        page.goto(tracking.ui_url(params, server))
        row = f'[row-id="{repro.info.run_id}"]'
        page.wait_for_selector(row, timeout=60_000)
        for close in page.locator('button[aria-label="Close"]').all():  # the assistant's panel
            if close.is_visible():
                close.click()
        page.locator('[aria-label="Toggle sidebar"]').first.click()
        page.locator(f'{row} button[data-component-id*="runnamecellrenderer"]').first.click()  # expand the repro
        page.get_by_role("button", name="Columns", exact=True).click()
        search = page.get_by_placeholder("Search columns")
        for name in (*HIDDEN, *SHOWN):
            search.fill(name)
            title = page.locator(".du-bois-light-tree-title", has_text=re.compile(f"^{re.escape(name)}$"))
            tree = page.locator('[data-testid="column-selector-tree"] .du-bois-light-tree-treenode')
            tree.filter(has=title).first.locator(".du-bois-light-tree-checkbox").click()
        search.fill("")
        page.keyboard.press("Escape")
        page.wait_for_timeout(1500)
        page.screenshot(path=str(out))
        browser.close()


def curves_picture(p, params: Params, commit: str, out: Path) -> str:
    """The recommended arm's run page, its model metrics: training and validation loss per step. Returns the arm."""
    uri, client, exp, repro = _repro_of(params, commit)
    picked = (repro.data.tags.get("recommendation") or "").split("`")
    if len(picked) < 2:
        raise SystemExit("error: the repro run names no recommended run")
    name = picked[1]
    found = client.search_runs(
        [exp.experiment_id],
        filter_string=f"tags.`bakeoff.name` = '{name}' and tags.`mlflow.parentRunId` = '{repro.info.run_id}'",
        max_results=1,
    )
    if not found:
        raise SystemExit(f"error: no run of `{name}` under the repro run")
    with _ui(uri) as server:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1600, "height": 900})
        page.goto(f"{server}/#/experiments/{exp.experiment_id}/runs/{found[0].info.run_id}/model-metrics")
        search = page.get_by_placeholder(re.compile("Search metric", re.IGNORECASE)).first
        search.wait_for(timeout=60_000)
        for close in page.locator('button[aria-label="Close"]').all():  # the assistant's panel
            if close.is_visible():
                close.click()
        # the two curves alone (the search takes a regular expression): the charts are in name order, and the
        # single-value metrics would push them below the fold
        search.fill(f"^({'|'.join(CURVES)})$")
        for curve in CURVES:
            page.get_by_text(curve, exact=True).first.wait_for(timeout=60_000)
        page.wait_for_timeout(2500)
        page.screenshot(path=str(out))
        browser.close()
    return name


def main(argv: list[str] | None = None) -> int:
    from playwright.sync_api import sync_playwright

    from bakeoff.core.config import load_params

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("report", "mlflow", "curves"), help="one picture instead of all three")
    a = ap.parse_args(argv)
    commit = report_commit()
    with sync_playwright() as p:
        if a.only in (None, "report"):
            report_picture(p, Path("reports/comparison.html"), REPORT_PNG)
            stamp(REPORT_PNG, commit)
            print(f"wrote {REPORT_PNG} (the report at {commit[:12]})")
        if a.only in (None, "mlflow"):
            mlflow_picture(p, load_params(), commit, MLFLOW_PNG)
            stamp(MLFLOW_PNG, commit)
            print(f"wrote {MLFLOW_PNG} (the repro run at {commit[:12]})")
        if a.only in (None, "curves"):
            name = curves_picture(p, load_params(), commit, CURVES_PNG)
            stamp(CURVES_PNG, commit)
            print(f"wrote {CURVES_PNG} (`{name}`'s curves, the repro run at {commit[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Credentials stay off the screen and out of every record: MLflow's URI with a password, an endpoint's base_url with a
key, a failure reason that quotes either. The MLflow test plants the password where it is used, against a real
`mlflow server` on 127.0.0.1, and greps the output and the server's store.

    .venv/bin/python -m pytest tests/test_secrets.py
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from services import MlflowServer

from bakeoff.core.secrets import credential_in, move_tracking_credentials, scrub

PASSWORD = "pw_SENTINEL_9137"
ROOT = Path(__file__).resolve().parents[1]


def test_scrub_hides_passwords_tokens_and_key_like_query_values():
    said = scrub(f"ConnectionError: http://ana:{PASSWORD}@10.0.0.1:5000/api and https://tok123@h/x?api-key=k1&b=2")
    assert PASSWORD not in said and "tok123" not in said and "k1" not in said
    assert "http://ana:***@10.0.0.1:5000/api" in said and "https://***@h/x?api-key=***&b=2" in said
    assert scrub("plain text, http://host:5000/x?page=2") == "plain text, http://host:5000/x?page=2"
    assert credential_in("https://h/v1?key=abc") == "a key-like query value (key=)"
    assert credential_in("https://u:p@h/v1") == "user info (user:password@)" and credential_in("https://h/v1") is None


def test_tracking_credentials_move_out_of_the_uri_into_mlflows_own_variables(capsys):
    env = {"MLFLOW_TRACKING_URI": f"http://team:{PASSWORD}@127.0.0.1:5000"}
    assert move_tracking_credentials(env) == "http://127.0.0.1:5000"
    assert env == {
        "MLFLOW_TRACKING_URI": "http://127.0.0.1:5000",
        "MLFLOW_TRACKING_USERNAME": "team",
        "MLFLOW_TRACKING_PASSWORD": PASSWORD,
    }
    assert PASSWORD not in capsys.readouterr().err
    mine = {"MLFLOW_TRACKING_URI": "http://a:b@h", "MLFLOW_TRACKING_PASSWORD": "set-by-you"}
    move_tracking_credentials(mine, say=False)
    assert mine["MLFLOW_TRACKING_PASSWORD"] == "set-by-you"  # yours win
    assert move_tracking_credentials({"MLFLOW_TRACKING_URI": "http://h:5000"}) is None


def test_a_failure_reason_is_recorded_without_the_url_password():
    from bakeoff.core.runs import guarded

    def work():
        raise ConnectionError(f"could not reach http://team:{PASSWORD}@127.0.0.1:9/api/2.0/mlflow/runs/create")

    rec = guarded({}, work)
    assert rec["status"] == "failed" and PASSWORD not in rec["error"] and "http://team:***@127.0.0.1:9" in rec["error"]


@pytest.mark.parametrize(
    "url, said",
    [
        ("https://user:secret@api.example.com/v1", "user info"),
        ("https://api.example.com/v1?api-key=abc123", "a key-like query value"),
    ],
)
def test_an_endpoint_url_with_a_credential_is_refused_naming_api_key_env(tmp_path, url, said):
    import yaml

    from bakeoff.core.config import load_params
    from bakeoff.core.schema import ParamsError

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["baselines"]["big"] = {"endpoint": {"base_url": url, "model": "m", "api_key_env": "OPENAI_API_KEY"}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(ParamsError) as e:
        load_params(tmp_path / "params.yaml")
    text = str(e.value)
    assert "baselines.big.endpoint.base_url" in text and said in text and "api_key_env" in text
    assert "abc123" not in text and "user:secret" not in text


def test_a_password_in_mlflow_tracking_uri_never_shows_and_the_run_still_logs(tmp_path):
    """A process that imports bakeoff, with the password in MLFLOW_TRACKING_URI, logs a run to a real server: MLflow's
    own "View run" line and everything else printed carry no password, nor does the server's store."""
    with MlflowServer(tmp_path / "mlflow") as server:
        env = {**os.environ, "MLFLOW_TRACKING_URI": server.uri.replace("://", f"://team:{PASSWORD}@", 1)}
        env.pop("MLFLOW_TRACKING_USERNAME", None)
        env.pop("MLFLOW_TRACKING_PASSWORD", None)
        code = (
            "import bakeoff, mlflow, os; mlflow.set_experiment('t')\n"
            "with mlflow.start_run(run_name='probe') as r: mlflow.log_metric('x', 1.0)\n"
            "print('uri', os.environ['MLFLOW_TRACKING_URI'], mlflow.get_tracking_uri())"
        )
        r = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
        )
        out = r.stdout + r.stderr
        assert r.returncode == 0, out
        assert PASSWORD not in out and f"uri {server.uri} {server.uri}" in out
        assert "View run probe at: http://127.0.0.1" in out  # MLflow's own link, printed, without the password
        for path in (tmp_path / "mlflow").rglob("*"):
            if path.is_file():
                assert PASSWORD.encode() not in path.read_bytes(), path
        import mlflow

        mlflow.set_tracking_uri(server.uri)
        got = mlflow.search_runs(experiment_names=["t"])
        assert list(got["tags.mlflow.runName"]) == ["probe"]

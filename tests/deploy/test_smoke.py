"""`fedcore deploy smoke` and the bucket-init script, against a real S3 API (moto's
server on 127.0.0.1) and a stand-in MLflow /health endpoint."""

from __future__ import annotations

import http.server
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import urllib.request

import boto3
import pytest
from moto.server import ThreadedMotoServer
from typer.testing import CliRunner

from fedcore import cli
from fedcore.deploy import env
from fedcore.deploy import k8s as deploy

from .conftest import K8S

BUCKET_SCRIPT = K8S / "base" / "create_bucket.py"


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server naming
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
        self.wfile.write(b"OK")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def moto_url():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_url(moto_url):
    """The S3 server, emptied: each test starts without buckets."""
    urllib.request.urlopen(urllib.request.Request(f"{moto_url}/moto-api/reset", method="POST")).close()
    return moto_url


@pytest.fixture(scope="module")
def mlflow_url():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def stack_env(s3_url, mlflow_url, tmp_path):
    return {
        "MLFLOW_TRACKING_URI": mlflow_url,
        "MLFLOW_S3_ENDPOINT_URL": s3_url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "FEDCORE_S3_ADDRESSING": "path",
        "FEDCORE_CACHE": str(tmp_path / "cache"),
    }


def _run_bucket_script(environ: dict[str, str]) -> subprocess.CompletedProcess:
    full = {**os.environ, **environ}
    return subprocess.run(
        [sys.executable, str(BUCKET_SCRIPT), env.S3_BUCKET], env=full, capture_output=True, text=True, timeout=60
    )


def _make_bucket(environ: dict[str, str]) -> None:
    boto3.client(
        "s3", endpoint_url=environ["MLFLOW_S3_ENDPOINT_URL"], region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    ).create_bucket(Bucket=env.S3_BUCKET)


def test_bucket_script_creates_then_finds_the_bucket(stack_env):
    first = _run_bucket_script(stack_env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"bucket {env.S3_BUCKET}: created"
    second = _run_bucket_script(stack_env)
    assert second.returncode == 0 and second.stdout.strip() == f"bucket {env.S3_BUCKET}: exists"


def test_bucket_script_gives_up_on_an_unreachable_store(monkeypatch):
    spec = importlib.util.spec_from_file_location("create_bucket", BUCKET_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with pytest.raises(SystemExit, match="did not answer"):
        module.ensure_bucket("fedcore", attempts=2, delay=0)


def test_smoke_passes_against_a_working_stack(stack_env):
    _make_bucket(stack_env)
    assert deploy.smoke(env=stack_env) == []
    assert os.path.isdir(stack_env["FEDCORE_CACHE"]) and not os.listdir(stack_env["FEDCORE_CACHE"])


def test_smoke_reports_a_missing_bucket(stack_env):
    (problem,) = deploy.smoke(env=stack_env)
    assert problem.startswith(f"bucket s3://{env.S3_BUCKET} at {stack_env['MLFLOW_S3_ENDPOINT_URL']} is not usable")


def test_smoke_names_every_missing_variable():
    problems = deploy.smoke(env={"MLFLOW_TRACKING_URI": "http://x"})
    assert problems == [f"{n} is not set" for n in env.REQUIRED_FOR_STACK if n != "MLFLOW_TRACKING_URI"]


def test_smoke_reports_each_unusable_part(stack_env, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    broken = {
        **stack_env,
        "MLFLOW_TRACKING_URI": f"http://127.0.0.1:{_closed_port()}",
        "MLFLOW_S3_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}",
        "FEDCORE_CACHE": str(blocker / "cache"),
    }
    mlflow, bucket, cache = deploy.smoke(env=broken, timeout=2)
    assert mlflow.startswith("MLflow at http://127.0.0.1:") and "unreachable" in mlflow
    assert bucket.startswith(f"bucket s3://{env.S3_BUCKET}") and "not usable" in bucket
    assert cache.startswith(f"cache {blocker / 'cache'} is not writable")


def test_smoke_require_gpu_fails_without_cuda(stack_env, monkeypatch):
    import torch

    _make_bucket(stack_env)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    problems = deploy.smoke(require_gpu=True, env=stack_env)
    assert problems == ["no CUDA device visible (check the nvidia.com/gpu limit and node pool)"]


def test_smoke_command_exit_codes(stack_env, monkeypatch):
    _make_bucket(stack_env)
    for key, value in stack_env.items():
        monkeypatch.setenv(key, value)
    ok = CliRunner().invoke(cli.app, ["deploy", "smoke"])
    assert ok.exit_code == 0 and "smoke: MLflow, S3 bucket and cache are usable" in ok.stdout
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    bad = CliRunner().invoke(cli.app, ["deploy", "smoke"])
    assert bad.exit_code == 1 and "FAIL AWS_DEFAULT_REGION is not set" in bad.stdout


def test_smoke_reports_malformed_settings_as_fail_lines(tmp_path):
    # These used to escape as tracebacks (urllib/botocore ValueErrors, a bad addressing style).
    malformed = {
        "MLFLOW_TRACKING_URI": "mlflow.fedcore.svc:5000",
        "MLFLOW_S3_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "FEDCORE_S3_ADDRESSING": "sideways",
        "FEDCORE_CACHE": str(tmp_path / "cache"),
    }
    mlflow, bucket = deploy.smoke(env=malformed, timeout=2)
    assert mlflow == "MLFLOW_TRACKING_URI 'mlflow.fedcore.svc:5000' is not an http(s):// URL; " \
                     "fix it in the fedcore-env ConfigMap"
    assert bucket.startswith(f"bucket s3://{env.S3_BUCKET}") and "sideways" in bucket
    (_, bucket) = deploy.smoke(env={**malformed, "FEDCORE_S3_ADDRESSING": "path",
                                    "MLFLOW_S3_ENDPOINT_URL": "seaweedfs:8333"}, timeout=2)
    assert "not usable: Invalid endpoint: seaweedfs:8333" in bucket

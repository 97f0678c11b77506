"""The tracking stack as containers (scripts/stack.sh: Postgres, MLflow with basic-auth, an S3 store),
and pipelines whose every task runs in the project image on the stack's internal network only:
metrics and noise-rate estimates in MLflow, model artifacts in the bucket, the run on the MLflow UI,
and retraining that moves `champion` only when the challenger wins."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .browser import page_text
from .conftest import REPO

STACK = "fedcore-test"
PORTS = {"MLFLOW_PORT": "15000", "S3_PORT": "18333"}
MODEL = "fedcore-digits-fedavg"  # a model the stack's pod user may manage (scripts/stack.sh)


def stack(action: str, state: Path, image: str) -> None:
    env = {**os.environ, "STACK": STACK, "STACK_DIR": str(state), "IMAGE": image, "PURGE": "1", **PORTS}
    out = subprocess.run(["bash", "scripts/stack.sh", action], cwd=REPO, capture_output=True, text=True, env=env,
                         timeout=1800)
    assert out.returncode == 0, f"stack {action}: {out.stderr[-3000:]}"


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.fixture(scope="module")
def up(image, tmp_path_factory):
    state = tmp_path_factory.mktemp("stack")
    stack("up", state, image)
    try:
        yield state, read_env(state / "host.env")
    finally:
        stack("down", state, image)


@pytest.fixture
def host(up, monkeypatch):
    """This process as a client of the stack (the pod user, from the host's side)."""
    for key, value in up[1].items():
        monkeypatch.setenv(key, value)
    return up[1]


def pipeline(name: str, state: Path, image: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "fedcore", "pipeline", "run", name, *extra, "--local", "--out", str(out),
           "--runner", "docker", "--image", image, "--network", f"{STACK}-stack", "--env-file",
           str(state / "tasks.env")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "AWS_"))}
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def s3(env: dict[str, str]):
    import boto3

    return boto3.client("s3", endpoint_url=env["MLFLOW_S3_ENDPOINT_URL"], region_name="us-east-1",
                        aws_access_key_id=env["AWS_ACCESS_KEY_ID"], aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"])


def test_a_containerized_experiment_logs_rounds_rates_and_artifacts_to_the_stack(up, host, image, tmp_path):
    from mlflow.tracking import MlflowClient

    state, _ = up
    rounds = 6
    pipeline("experiment", state, image, tmp_path / "run", "configs/quickstart.yaml", "--set", "method.name=fedgr",
             "--set", f"train.rounds={rounds}")
    client = MlflowClient(host["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("fedcore")
    runs = [r for r in client.search_runs([exp.experiment_id]) if "test/acc" in r.data.metrics]
    assert len(runs) == 1, [r.info.run_name for r in runs]
    run = runs[0]
    assert len(client.get_metric_history(run.info.run_id, "test/acc")) >= rounds  # every round, not a summary
    rates = [k for k in run.data.metrics if k.startswith("noise/rate_est/client_")]
    assert len(rates) == 10, sorted(run.data.metrics)  # FedGR's per-client noise-rate estimates
    # The model and the figures went through MLflow's artifact proxy into the S3 container's bucket.
    keys = [o["Key"] for page in s3(host).get_paginator("list_objects_v2").paginate(Bucket="fedcore")
            for o in page.get("Contents", [])]
    mine = [k for k in keys if run.info.run_id in k]
    assert any(k.endswith("state_dict/state_dict.pth") for k in mine), mine  # the trained weights
    assert any(k.endswith("noise_rates.png") for k in mine), mine
    assert any(k.startswith("mlflow-artifacts/") and k.endswith("/MLmodel") for k in keys), keys  # the served model
    ui_shows(host, exp.experiment_id, run.info.run_id, run.info.run_name)


def ui_shows(env: dict[str, str], exp_id: str, run_id: str, run_name: str) -> None:
    """Headless Chromium opens the run's page on the MLflow UI as the pod user (basic-auth), and the
    rendered page names the run and its noise-rate estimates."""
    url = f"{env['MLFLOW_TRACKING_URI']}/#/experiments/{exp_id}/runs/{run_id}?workflowType=machine_learning"
    wanted = (run_name, "noise/rate_est/client_00", "test/acc")
    text = page_text(url, env["MLFLOW_TRACKING_USERNAME"], env["MLFLOW_TRACKING_PASSWORD"], wanted)
    assert all(w in text for w in wanted), text[:2000]


def write_snapshot(client, key: str, train: slice) -> None:
    """An MNIST-format snapshot (the four official IDX files) made of sklearn's digits, 28x28."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    img = np.pad(np.kron(x.reshape(-1, 8, 8), np.ones((3, 3))), ((0, 0), (2, 2), (2, 2)))
    img = (img * 255 / 16).astype(np.uint8)
    split = {"train": (img[train], y[train]), "t10k": (img[1500:], y[1500:])}
    for name, (xs, ys) in split.items():
        for kind, arr in (("images-idx3", xs), ("labels-idx1", ys.astype(np.uint8))):
            blob = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
            client.put_object(Bucket="fedcore", Key=f"{key}/{name}-{kind}-ubyte.gz",
                              Body=gzip.compress(blob + arr.tobytes()))


def test_retrain_moves_champion_only_when_the_challenger_wins(up, host, image, tmp_path):
    from mlflow.tracking import MlflowClient

    state, _ = up
    client = MlflowClient(host["MLFLOW_TRACKING_URI"])
    bucket = s3(host)
    args = ["configs/quickstart.yaml", "--data-prefix", "s3://fedcore/snapshots/", "--model-name", MODEL,
            "--set", "data.name=mnist", "--set", "noise.noisy_client_fraction=0.0"]

    def retrain(n: int, rounds: int) -> dict:
        pipeline("retrain", state, image, tmp_path / f"r{n}", *args, "--set", f"train.rounds={rounds}")
        versions = sorted(client.search_model_versions(f"name='{MODEL}'"), key=lambda v: int(v.version))
        assert len(versions) == n
        return {"tags": versions[-1].tags, "version": versions[-1].version,
                "champion": client.get_model_version_by_alias(MODEL, "champion").version}

    write_snapshot(bucket, "snapshots/2026-11-01", slice(0, 400))
    first = retrain(1, 1)  # one round on the older snapshot: a weak first champion
    assert first["tags"]["retrain.decision"] == "promoted" and first["champion"] == "1"
    write_snapshot(bucket, "snapshots/2026-12-01", slice(0, 1500))
    second = retrain(2, 8)  # the newer snapshot, eight rounds: the challenger
    third = retrain(3, 1)  # one round again: a weak challenger against the second's champion
    for before, now in ((first, second), (second, third)):
        won = now["tags"]["retrain.decision"] == "promoted"
        # The alias moves exactly when the decision says the candidate beat the champion on the same split.
        assert now["champion"] == (now["version"] if won else before["champion"]), now
        assert ("candidate" in now["tags"]["retrain.reason"]) and (">" in now["tags"]["retrain.reason"]) == won
    assert second["tags"]["retrain.decision"] == "promoted" and third["tags"]["retrain.decision"] == "kept", \
        (second["tags"]["retrain.reason"], third["tags"]["retrain.reason"])

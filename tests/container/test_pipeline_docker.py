"""`fedcore pipeline run --runner docker`: every task in the project image, as a hardened pod,
gives the subprocess runner's numbers on the same config."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .conftest import REPO

ACC = "final/acc_last10"


def pipeline(out: Path, *extra: str, tracking: bool = False) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "fedcore", "pipeline", "run", "experiment", "configs/quickstart.yaml", "--local",
           "--out", str(out), "--tracking" if tracking else "--no-tracking", *extra]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "COLUMNS": "200"})


def record(out: Path) -> dict:
    (path,) = out.glob("kfp/*/evaluate/figures/record.json")
    return json.loads(path.read_text())


def test_the_quickstart_in_the_image_gives_the_subprocess_runners_numbers(image, tmp_path):
    sub = pipeline(tmp_path / "sub")
    assert sub.returncode == 0, sub.stdout[-2000:] + sub.stderr[-2000:]
    # With tracking on: the tasks' embedded MLflow store must live where the containers see it.
    box = pipeline(tmp_path / "box", "--runner", "docker", "--image", image, tracking=True)
    assert box.returncode == 0, box.stdout[-2000:] + box.stderr[-2000:]
    assert f"in {image} (docker)" in box.stdout and "last-10" in box.stdout  # the table, from the records
    assert (tmp_path / "box" / "kfp" / "mlruns" / "mlflow.db").stat().st_uid == 10001
    a, b = record(tmp_path / "sub"), record(tmp_path / "box")
    assert a["data_sha256"] == b["data_sha256"]  # the same FederatedDataset artifact
    assert b["summary"][ACC] == a["summary"][ACC], (a["summary"][ACC], b["summary"][ACC])
    assert b["summary"] == a["summary"]
    # Written inside the containers by the task user, not by this process.
    written = next((tmp_path / "box").glob("kfp/*/run-stage/checkpoint/metrics.json"))
    assert written.stat().st_uid == 10001


def test_a_missing_image_is_one_line_and_exit_2(tmp_path):
    out = pipeline(tmp_path / "x", "--runner", "docker", "--image", "fedcore-test/absent:0")
    assert out.returncode == 2
    assert "is not on this machine; build it with `make image`" in out.stderr + out.stdout


def test_a_sweep_runs_every_task_in_the_image(image, tmp_path):
    out = tmp_path / "sweep"
    cmd = [sys.executable, "-m", "fedcore", "pipeline", "run", "sweep", "configs/quickstart.yaml", "--local",
           "--out", str(out), "--no-tracking", "--runner", "docker", "--image", image, "--method", "fedavg",
           "--method", "fedprox", "--seed", "0", "--set", "train.rounds=3"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    records = [json.loads(p.read_text()) for p in out.glob("kfp/*/**/figures/record.json")]
    assert sorted(r["method"] for r in records) == ["fedavg", "fedprox"]
    assert len({r["data_sha256"] for r in records}) == 1  # one artifact for every method
    assert all(p.stat().st_uid == 10001 for p in out.glob("kfp/*/**/figures/record.json"))

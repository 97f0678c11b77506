"""A 2-round run on a tiny Fashion-MNIST fixture laid out as Debian ships it (flat *.gz), through
the CLI, with a configs/fmnist preset's own sections; no accuracy claims, only what a run records."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fedcore.cli import app
from fedcore.data import mnist
from tests.data.test_mnist_loader import write_flat_gz

REPO = Path(__file__).resolve().parents[2]
TINY = ["data.max_train=null", "partition.num_clients=4", "partition.min_size=2", "train.rounds=2",
        "train.local_epochs=1", "model.width=8", "train.device=cpu", "train.threads=1",
        "train.local_memorization=true"]


@pytest.fixture
def fixture_root(tmp_path: Path, monkeypatch) -> Path:
    """Debian's layout under a per-test 'system' folder: the preset's data.root stays unset."""
    system = tmp_path / "system"
    write_flat_gz(system, n=(120, 30))
    monkeypatch.setitem(mnist.SYSTEM_COPIES, "fashion_mnist", mnist.SystemCopy(system, "dataset-fashion-mnist"))
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / "cache"))
    return system


@pytest.mark.parametrize("method", ["fedavg", "coteaching"])
def test_two_rounds_on_a_tiny_fashion_mnist(tmp_path: Path, fixture_root: Path, method: str):
    sets = [a for s in TINY + [f"method.name={method}", "method.params={}"] for a in ("-s", s)]
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", str(REPO / "configs/fmnist/fedgr_sym.yaml"), "--out", str(out),
                                   "--no-progress", *sets])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "metrics.json").read_text())["summary"]
    assert summary["final/acc_best_round"] in (1.0, 2.0)
    assert summary["final/acc_best"] >= summary["final/acc_last10"]
    rows = list(csv.DictReader((out / "history.csv").open()))
    assert len(rows) == 2
    for row in rows:  # both memorization figures, as shares
        assert 0.0 <= float(row["train/memorization"]) <= 1.0
        assert 0.0 <= float(row["train/local_memorization"]) <= 1.0
    assert (tmp_path / "cache" / "unpacked").is_dir() and not (fixture_root / "train-images-idx3-ubyte").exists()

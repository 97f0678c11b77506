"""Commands that only read write nothing (issue 71, surprise 3): each runs in an empty working
directory, with its inputs elsewhere, and the directory must stay empty, whether the command
succeeds or refuses its input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedcore import cli

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "quickstart.yaml")
RECORD = str(ROOT / "lab" / "records" / "quickstart.json")


@pytest.fixture
def cwd(tmp_path, monkeypatch):
    """An empty working directory, with no MLflow store in reach but its embedded default."""
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return here


def _written(cwd: Path) -> list[str]:
    return sorted(str(p.relative_to(cwd)) for p in cwd.rglob("*"))


def _main(argv: list[str]) -> int:
    try:
        cli.main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


@pytest.mark.parametrize("argv", [
    ["compare", "--experiment", "fedcore"],
    ["report", "--experiment", "fedcore", "--out", "../report"],
])
def test_reading_an_experiment_from_no_store_creates_none(argv, cwd, capsys):
    """It created ./mlruns/mlflow.db (about 1 MB) before saying the experiment was absent."""
    assert _main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no MLflow experiment 'fedcore': no MLflow store at ") and "\n" not in err
    assert _written(cwd) == []


@pytest.fixture
def store(tmp_path, monkeypatch):
    """An MLflow store outside the working directory, named by MLFLOW_TRACKING_URI, with one
    finished child run of experiment 'cmp' (metrics only, no artifacts)."""
    from fedcore.tracking.mlflow import MlflowTracker

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}")
    (tmp_path / "store").mkdir()
    tracker = MlflowTracker(None, "cmp", str(tmp_path / "store" / "artifacts"))
    tracker.start("fedavg · seed 0", {"method": "fedavg", "setting": "noisy", "fedcore.role": "child"})
    tracker.log_metrics({"final/acc_last10": 0.8}, step=1)
    tracker.end()


def test_compare_of_an_experiment_writes_its_chart_only_when_asked(cwd, store, capsys):
    assert _main(["compare", "--experiment", "cmp"]) == 0
    assert "fedavg · noisy" in capsys.readouterr().out
    assert _written(cwd) == []  # it wrote runs/compare-cmp.png
    assert _main(["compare", "--experiment", "cmp", "--out", "figs"]) == 0
    assert _written(cwd) == ["figs", "figs/compare-cmp.png"]  # MLFLOW_TRACKING_URI outlived the first call


def test_report_of_an_experiment_reads_the_store_it_was_given(cwd, store, tmp_path, capsys):
    """Reading the runs dropped MLFLOW_TRACKING_URI, so the artifacts came from a new ./mlruns."""
    assert _main(["report", "--experiment", "cmp", "--out", str(tmp_path / "report")]) == 2
    assert "has no metrics.json" in capsys.readouterr().err  # the run logged none
    assert _written(cwd) == []


def test_compare_of_run_dirs_writes_nothing(cwd, tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.json").write_text(json.dumps({"method": "fedavg", "seed": 0, "summary": {"final/acc_last10": 0.8}}))
    (run / "config.yaml").write_text(yaml.safe_dump({"method": {"name": "fedavg"}, "seed": 0}))

    assert _main(["compare", str(run)]) == 0
    assert "fedavg" in capsys.readouterr().out and _written(cwd) == []


def test_data_inspect_writes_its_figure_only_when_asked(cwd, capsys):
    tiny = ["--set", "partition.num_clients=3", "--set", "data.max_train=200"]
    assert _main(["data", "inspect", CONFIG, *tiny]) == 0
    assert "pass --out FOLDER" in capsys.readouterr().out
    assert _written(cwd) == []  # it wrote runs/inspect-<hash>/clients_by_class.png
    assert _main(["data", "inspect", CONFIG, *tiny, "--out", "look"]) == 0
    assert _written(cwd) == ["look", "look/clients_by_class.png"]


@pytest.mark.parametrize("argv", [
    ["bench-table", RECORD],
    ["bench-table", RECORD, "--summary"],
    ["bench-table", RECORD, "--per-seed"],
    ["config", "show", CONFIG],
    ["config", "methods"],
    ["deploy", "render"],
])
def test_printing_commands_write_nothing(argv, cwd, capsys):
    assert _main(argv) == 0
    assert capsys.readouterr().out.strip()
    assert _written(cwd) == []


def test_a_bench_dry_run_writes_nothing(cwd, tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    grid.write_text(yaml.safe_dump({
        "scenes": {"tiny": {"config": CONFIG, "set": ["train.rounds=2", "train.device=cpu", "tracking.backend=none"]}},
        "methods": ["fedavg"], "trials": 1, "seeds": [0], "validation_fraction": 0.1}))

    assert _main(["bench", str(grid), "--dry-run"]) == 0
    assert "tiny" in capsys.readouterr().out
    assert _written(cwd) == []

"""`fedcore compare --experiment`: mean ± std over seeds from mlflow.search_runs, plus a PNG."""

from __future__ import annotations

import pytest

from fedcore.cli import main
from fedcore.tracking.mlflow import MlflowTracker


def _child(tracker, method, setting, seed, acc):
    tracker.start(f"{method} · seed {seed}", {"method": method, "setting": setting, "fedcore.role": "child"})
    tracker.log_params({"seed": seed})
    tracker.log_metrics({"final/acc_last10": acc, "final/acc": acc + 0.01}, step=3)
    tracker.end()


def test_compare_experiment_groups_seeds_and_writes_a_plot(tmp_path, monkeypatch, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    tracker = MlflowTracker(None, "cmp", str(tmp_path / "artifacts"))
    tracker.start_parent("sweep", {"pipeline": "sweep"})
    for seed, acc in ((0, 0.80), (1, 0.90)):
        _child(tracker, "fedavg", "noisy", seed, acc)
    _child(tracker, "fedprox", "noisy", 0, 0.70)
    tracker.start("still running", {"method": "fedavg", "setting": "noisy"})  # unfinished: left out

    main(["compare", "--experiment", "cmp"])

    out = capsys.readouterr().out
    assert "fedavg · noisy" in out and "0.850 ± 0.050" in out
    assert "fedprox · noisy" in out and "0.700" in out
    assert out.count("· noisy") == 2  # one row per (method, setting); the parent and the running run are no rows
    png = tmp_path / "runs" / "compare-cmp.png"
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_unknown_experiment_is_a_user_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(SystemExit) as exc:
        main(["compare", "--experiment", "nope"])
    assert exc.value.code == 2
    assert "no MLflow experiment 'nope'" in capsys.readouterr().err

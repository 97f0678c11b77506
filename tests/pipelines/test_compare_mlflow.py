"""`fedcore compare --experiment`: mean ± std over seeds from mlflow.search_runs, plus a PNG with --out."""

from __future__ import annotations

import math

import pytest

from fedcore.cli import main
from fedcore.tracking.mlflow import MlflowTracker


def _child(tracker, method, setting, seed, acc, rounds=10):
    tracker.start(f"{method} · seed {seed}", {"method": method, "setting": setting, "fedcore.role": "child"})
    tracker.log_params({"seed": seed, "train.rounds": rounds, "method.name": method, "git_commit": f"c{seed}"})
    tracker.log_metrics({"final/acc_last10": acc, "final/acc": acc + 0.01}, step=3)
    tracker.end()


def _pm(a: float, b: float) -> str:
    # Two seeds' cell, in % as the console prints scores: the sample std of two values is |a - b| / sqrt(2)
    # (the population one would be |a - b| / 2).
    return f"{100 * (a + b) / 2:.1f} ± {100 * abs(a - b) / math.sqrt(2):.1f}"


def test_compare_experiment_groups_seeds_and_writes_a_plot_when_asked(tmp_path, monkeypatch, capsys):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)
    tracker = MlflowTracker(None, "cmp", str(tmp_path / "artifacts"))
    tracker.start_parent("sweep", {"pipeline": "sweep"})
    for seed, acc in ((0, 0.80), (1, 0.90)):
        _child(tracker, "fedavg", "noisy", seed, acc)
    _child(tracker, "fedprox", "noisy", 0, 0.70)
    tracker.start("still running", {"method": "fedavg", "setting": "noisy"})  # unfinished: left out

    main(["compare", "--experiment", "cmp", "--out", "runs"])

    out = capsys.readouterr().out
    assert "fedavg · noisy" in out and _pm(0.80, 0.90) in out and "85.0 ± 7.1" in out
    assert "fedprox · noisy" in out and f"{100 * 0.70:.1f}" in out
    assert out.count("· noisy") == 2  # one row per (method, setting); the parent and the running run are no rows
    png = tmp_path / "runs" / "compare-cmp.png"
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_unknown_experiment_is_a_user_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(SystemExit) as exc:
        main(["compare", "--experiment", "nope"])
    assert exc.value.code == 2
    assert "no MLflow experiment 'nope'" in capsys.readouterr().err


def test_compare_experiment_never_averages_runs_of_different_configs(tmp_path, monkeypatch, capsys):
    """A 30-round and a 10-round run of one method are two rows, each named by what differs."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    tracker = MlflowTracker(None, "mixed", str(tmp_path / "artifacts"))
    _child(tracker, "fedavg", "noisy", 0, 0.80, rounds=30)
    _child(tracker, "fedavg", "noisy", 1, 0.60, rounds=10)
    _child(tracker, "fedavg", "noisy", 2, 0.70, rounds=10)

    main(["compare", "--experiment", "mixed"])

    out = capsys.readouterr().out
    assert "fedavg · noisy [train.rounds=30]" in out and "fedavg · noisy [train.rounds=10]" in out
    assert _pm(0.60, 0.70) in out  # the two 10-round seeds; the 30-round run stands alone at 80.0
    assert "they differ in train.rounds: 10 | 30" in out


def test_compare_run_dirs_groups_by_config_not_by_method_name(tmp_path, capsys):
    import json

    import yaml

    for name, rounds, seed, acc in (("a", 30, 0, 0.8), ("b", 10, 0, 0.6), ("c", 10, 1, 0.7)):
        run = tmp_path / name
        run.mkdir()
        (run / "metrics.json").write_text(json.dumps({"method": "fedavg", "seed": seed,
                                                      "summary": {"final/acc_last10": acc}}))
        (run / "config.yaml").write_text(yaml.safe_dump({"method": {"name": "fedavg"}, "seed": seed,
                                                         "train": {"rounds": rounds}}))

    main(["compare", *(str(tmp_path / n) for n in "abc")])

    out = capsys.readouterr().out
    assert "fedavg [train.rounds=30]" in out and "fedavg [train.rounds=10]" in out and _pm(0.6, 0.7) in out


def test_compare_experiment_writes_its_plot_under_out_and_says_where(tmp_path, monkeypatch, capsys):
    # Issue 53, defect 8: the PNG went to ./runs with no way to choose.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.chdir(tmp_path)
    _child(MlflowTracker(None, "cmp", str(tmp_path / "artifacts")), "fedavg", "noisy", 0, 0.80)

    main(["compare", "--experiment", "cmp", "--out", "figs"])

    png = (tmp_path / "figs" / "compare-cmp.png").resolve()
    assert png.read_bytes()[:4] == b"\x89PNG" and not (tmp_path / "runs").exists()
    assert f"bar chart: {png}" in capsys.readouterr().out.replace("\n", "")


def test_compare_on_a_new_store_prints_only_its_error(tmp_path, monkeypatch, capfd):
    # Issue 53, defect 8: MLflow's INFO lines about creating the store's tables leaked onto stderr.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'new.db'}")
    with pytest.raises(SystemExit):
        main(["compare", "--experiment", "nope"])
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no MLflow experiment 'nope'"), err


def test_out_without_experiment_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(tmp_path), "--out", str(tmp_path / "figs")])
    assert exc.value.code == 2 and "--out is where --experiment" in capsys.readouterr().err

"""Multi-label runs through the pipeline pieces that used to assume single-label accuracy:
the sweep comparison plot, the per-run curves, the retrain champion score and the MLflow
comparison plot all pick mAP when the task is multi-label."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from rich.console import Console

from fedcore.data.build import build_federated_dataset
from fedcore.models import build_model
from fedcore.pipeline import ops, retrain
from fedcore.registries import config_from_dict
from fedcore.reporting import compare_mlflow, plots


def _capture_compare_figure(monkeypatch) -> dict:
    seen: dict = {}
    real = plots.compare_figure

    def spy(labels, means, stds, metric):
        seen.update(labels=list(labels), means=list(means), metric=metric)
        return real(labels, means, stds, metric)

    for user in (ops, compare_mlflow):  # the modules that draw it (each imports it by name)
        monkeypatch.setattr(user, "compare_figure", spy)
    return seen


def _record(method: str, seed: int, value: float, task: str | None = "multi") -> dict:
    summary = {"final/mAP": value + 0.01, "final/mAP_last10": value}
    rec = {"method": method, "setting": "mosaic", "seed": seed, "summary": summary}
    return rec if task is None else {**rec, "task": task}


def test_sweep_compare_plots_map_for_multilabel_records(tmp_path, monkeypatch):
    seen = _capture_compare_figure(monkeypatch)
    rows = [_record("fedavg", 0, 0.8), _record("fedavg", 1, 0.9), _record("fedharmony", 0, 0.7)]

    ops.compare(rows, tmp_path)

    assert seen["metric"] == "final/mAP_last10"
    assert seen["means"] == pytest.approx([0.85, 0.7])
    assert (tmp_path / "compare.png").read_bytes()[:4] == b"\x89PNG"


def test_sweep_compare_still_plots_accuracy_for_single_label(tmp_path, monkeypatch):
    seen = _capture_compare_figure(monkeypatch)
    rows = [{"method": "fedavg", "setting": "s", "seed": 0, "task": "single",
             "summary": {"final/acc": 0.5, "final/acc_last10": 0.4}}]

    ops.compare(rows, tmp_path)

    assert seen["metric"] == "final/acc_last10" and seen["means"] == pytest.approx([0.4])


def test_curves_show_map_for_multilabel_histories():
    history = [{"stage": "train", "round": float(r), "train/loss": 1.0 / r, "test/loss": 1.0,
                "test/mAP": 0.1 * r} for r in (1, 2, 3)]

    fig = plots.curves_figure(history, "fedharmony", task="multi")

    assert "test mAP" in [ax.get_title() for ax in fig.axes]


def test_mlflow_compare_plots_map_when_runs_only_have_map(tmp_path, monkeypatch):
    seen = _capture_compare_figure(monkeypatch)
    records = [{**_record("fedavg", s, v, task=None), "group": "fedavg · mosaic"} for s, v in ((0, 0.6), (1, 0.8))]
    monkeypatch.setattr(compare_mlflow, "load_records", lambda experiment, uri=None: records)

    compare_mlflow.compare_experiment("exp", Console(file=None, width=120, quiet=True), out_dir=tmp_path)

    assert seen["metric"] == "final/mAP_last10" and seen["means"] == pytest.approx([0.7])


MOSAIC_CFG = {
    "data": {"name": "digits_mosaic", "params": {"n_train": 120, "n_test": 60, "groups": 2}},
    "partition": {"kind": "natural", "num_clients": 2}, "noise": {"type": "none"},
    "model": {"name": "mlp", "width": 8}, "train": {"rounds": 1, "device": "cpu"},
    "method": {"name": "fedavg"}, "seed": 0,
}


class _Registry:
    """The three registry calls `champion_score` makes, backed by one in-memory model."""

    def __init__(self, cfg, state_dict):
        self.cfg, self.sd = cfg, state_dict

    def champion(self, name):
        return SimpleNamespace(version="1", run_id="r1")

    def run_config(self, run_id):
        return self.cfg.model_dump(mode="json")

    def state_dict(self, run_id):
        return self.sd


def test_retrain_scores_multilabel_champions_on_map():
    cfg = config_from_dict(MOSAIC_CFG)
    fed = build_federated_dataset(cfg)
    sd = build_model(cfg.model, (1, 16, 16), fed.num_classes, seed=0).state_dict()

    champ, score, note = retrain.champion_score(_Registry(cfg, sd), "mosaic-clf", cfg, fed)

    assert champ.version == "1" and note == ""
    assert score is not None and math.isfinite(score) and 0.0 <= score <= 1.0
    assert score == pytest.approx(retrain.score_state_dict(cfg, fed, sd)["test/mAP"])
    assert retrain.score_metric(fed.task) == "test/mAP" and retrain.score_metric("single") == "test/acc"

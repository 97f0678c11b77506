"""Champion/challenger: the pure rule, then the MLflow registry with a better and a worse candidate."""

from __future__ import annotations

import json

import pytest
import torch
from mlflow import MlflowClient

from fedcore.data.federated import FederatedDataset
from fedcore.errors import ConfigError, DataError
from fedcore.models import build_model
from fedcore.pipeline import ops
from fedcore.pipeline.inputs import RunInputs
from fedcore.pipeline.plan import config_input
from fedcore.pipeline.retrain import champion_decision, decide, latest_snapshot
from fedcore.registries import config_from_dict
from fedcore.tracking import make_tracker
from fedcore.tracking.callback import TrackingCallback
from tests.components.test_components import tiny_config


def test_decide_promotes_only_a_strictly_better_candidate():
    assert decide(0.8, None)["promote"]
    assert decide(0.81, 0.80)["promote"]
    assert not decide(0.80, 0.80)["promote"]  # a tie keeps the champion
    assert not decide(0.79, 0.80)["promote"]
    assert not decide(0.805, 0.80, min_delta=0.01)["promote"]
    record = decide(0.7, 0.9, metric="test/acc")
    assert record == {"promote": False, "metric": "test/acc", "candidate": 0.7, "champion": 0.9, "min_delta": 0.0,
                      "reason": "candidate 0.7000 <= champion 0.9000 on test/acc"}


def test_latest_snapshot_picks_the_greatest_name(tmp_path):
    for name in ("2024-01-31", "2024-03-01", ".partial-2099"):
        (tmp_path / name).mkdir()
    assert latest_snapshot(str(tmp_path)) == str(tmp_path / "2024-03-01")
    assert latest_snapshot("") == ""
    with pytest.raises(DataError, match="no data snapshot"):
        latest_snapshot(str(tmp_path / "empty"))


def test_decision_refuses_a_run_that_logged_no_served_model(tmp_path):
    # A run-time override can turn log_model off after the pipeline compiled: the decision
    # refuses before it reads or registers anything.
    data = tiny_config(tmp_path, experiment="retrain")
    data["tracking"]["log_model"] = False
    cfg = config_from_dict(data)
    with pytest.raises(ConfigError, match="drop tracking.log_model=false"):
        champion_decision(cfg, "digits-clf", "run-id", tmp_path / "missing", tmp_path / "missing", tmp_path / "d")
    assert not (tmp_path / "d").exists()


def _zero_run(cfg, fed, trained_dir, out):
    """A logged run whose model is all zeros: it predicts one class, a sure loser on digits."""
    out.mkdir()
    sd = torch.load(trained_dir / "model.pt", weights_only=True)
    zeros = {k: torch.zeros_like(v) for k, v in sd.items()}
    torch.save(zeros, out / "model.pt")
    model = build_model(cfg.model, tuple(fed.x_train.shape[1:]), fed.num_classes)
    model.load_state_dict(zeros)
    cb = TrackingCallback(make_tracker(cfg.tracking), cfg)
    info = {"data_sha256": "0" * 64, "fed": fed}
    cb.on_run_start(info)
    info["final_model"] = model
    cb.on_run_end({}, out)
    return cb.run_id


def test_champion_moves_only_to_a_better_candidate(tmp_path):
    data = tiny_config(tmp_path, experiment="retrain")
    data["data"]["max_train"] = None
    data["train"].update(rounds=4, local_epochs=2)
    cfg = config_from_dict(data)
    inp = RunInputs(config_input(cfg))
    ops.prepare(inp, tmp_path / "data", tmp_path / "report")
    trained = tmp_path / "trained"
    _, trained_run = ops.run_stage(inp, "train", ["train"], tmp_path / "data", None, trained)
    fed = FederatedDataset.load(tmp_path / "data")
    weak_run = _zero_run(cfg, fed, trained, tmp_path / "weak")
    worse_run = _zero_run(cfg, fed, trained, tmp_path / "worse")

    first = champion_decision(cfg, "digits-clf", weak_run, tmp_path / "data", tmp_path / "weak", tmp_path / "d1")
    better = champion_decision(cfg, "digits-clf", trained_run, tmp_path / "data", trained, tmp_path / "d2")
    worse = champion_decision(cfg, "digits-clf", worse_run, tmp_path / "data", tmp_path / "worse", tmp_path / "d3")

    assert first["promote"] and first["champion"] is None
    assert better["promote"] and better["candidate"] > better["champion"] == pytest.approx(first["candidate"])
    assert not worse["promote"] and worse["champion"] == pytest.approx(better["candidate"])
    assert worse["previous_champion"] == better["version"] == "2"
    client = MlflowClient(cfg.tracking.uri)
    assert str(client.get_model_version_by_alias("digits-clf", "champion").version) == "2"
    assert client.get_model_version("digits-clf", "3").tags["retrain.decision"] == "kept"
    assert client.get_model_version("digits-clf", "2").tags["retrain.decision"] == "promoted"
    assert client.get_run(worse_run).data.tags["retrain.decision"] == "kept"
    logged = client.download_artifacts(worse_run, "retrain/decision.json", str(tmp_path / "dl"))
    assert json.loads(open(logged).read())["reason"].startswith("candidate ")
    assert json.loads((tmp_path / "d3" / "decision.json").read_text())["promote"] is False

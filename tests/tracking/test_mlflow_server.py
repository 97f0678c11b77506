"""End to end: TrackingCallback -> real `mlflow server` -> moto S3."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from mlflow import MlflowClient

from fedcore.config import ExperimentConfig
from fedcore.tracking import make_tracker
from fedcore.tracking.callback import TrackingCallback

ROUNDS = 3
CLIENTS = 20


def test_rounds_and_artifacts_reach_the_server_and_the_bucket(mlflow_server, tmp_path):
    cfg = ExperimentConfig.model_validate(
        {
            "method": {"name": "fedgr"},
            "tracking": {"backend": "mlflow", "uri": mlflow_server.uri, "experiment": "e2e"},
        }
    )
    model = torch.nn.Linear(4, 2)
    torch.save(model.state_dict(), tmp_path / "model.pt")
    (tmp_path / "history.csv").write_text("round,test/acc\n")
    (tmp_path / "metrics.json").write_text(json.dumps({"final/acc": 0.5}))
    (tmp_path / "noise_scene.png").write_bytes(b"\x89PNG fake")
    ckpt = tmp_path / "train.ckpt"
    ckpt.write_bytes(b"checkpoint")

    cb = TrackingCallback(make_tracker(cfg.tracking, tmp_path), cfg, data_sha256="e" * 64)
    cb.on_run_start({"config": cfg, "out_dir": tmp_path, "stages": ["train"], "resumed": False})
    for rnd in range(1, ROUNDS + 1):
        per_client = {f"noise/rate_est/client_{c:02d}": c / 100 + rnd for c in range(CLIENTS)}
        cb.after_round(rnd, "train", {"test/acc": rnd / 10, **per_client})
    cb.on_stage_end("train", ROUNDS, ckpt)
    cb.on_run_end({"final/acc": 0.3}, tmp_path)

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    run = client.get_run(cb.run_id)
    acc = client.get_metric_history(cb.run_id, "test/acc")
    est = client.get_metric_history(cb.run_id, "noise/rate_est/client_07")
    assert run.info.status == "FINISHED"
    assert [(m.step, m.value) for m in acc] == [(r, r / 10) for r in range(1, ROUNDS + 1)]
    assert [m.step for m in est] == list(range(1, ROUNDS + 1))
    assert run.data.params["data_sha256"] == "e" * 64

    s3 = mlflow_server.s3.client()
    listing = s3.list_objects_v2(Bucket=mlflow_server.bucket, Prefix=f"{mlflow_server.prefix}/")
    keys = {o["Key"].split(f"/{cb.run_id}/artifacts/", 1)[-1] for o in listing.get("Contents", [])}
    assert {
        "state_dict/state_dict.pth",
        "history.csv",
        "metrics.json",
        "config.yaml",
        "checkpoints/train/train.ckpt",
        "reports/noise_scene.png",
    } <= keys

    local = client.download_artifacts(cb.run_id, "state_dict/state_dict.pth", str(tmp_path / "dl"))
    assert torch.equal(torch.load(local, weights_only=True)["weight"], model.weight.detach())


def test_a_finished_run_registers_a_model_that_pyfunc_loads_and_predicts(mlflow_server, tmp_path, monkeypatch):
    """Train tiny digits against the server, register the run, load `models:/NAME@champion`."""
    import mlflow

    from fedcore.data.federated import FederatedDataset
    from fedcore.registries import config_from_dict
    from fedcore.run import run_experiment
    from fedcore.tracking.registry import ModelRegistry
    from tests.components.test_components import tiny_config

    data = tiny_config(tmp_path)
    data["tracking"] = {"backend": "mlflow", "uri": mlflow_server.uri, "experiment": "served",
                        "system_metrics_every": 0.2}
    cfg = config_from_dict(data)
    fed_dir = tmp_path / "fed"
    from fedcore.data.build import build_federated_dataset

    build_federated_dataset(cfg).save(fed_dir)
    cb = TrackingCallback(make_tracker(cfg.tracking, tmp_path), cfg, source="fedcore run tiny.yaml")
    result = run_experiment(cfg, tmp_path / "run", data=fed_dir, callbacks=[cb])

    registry = ModelRegistry(mlflow_server.uri)
    registry.promote(registry.register("tiny-digits", cb.run_id))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    served = mlflow.pyfunc.load_model("models:/tiny-digits@champion")
    fed = FederatedDataset.load(fed_dir)
    probs = served.predict((fed.x_test.float() / 255.0).numpy())

    assert probs.shape == (len(fed.y_test), fed.num_classes)
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    # Same weights, same test split: the served model scores what the run's last evaluation did.
    acc = float((probs.argmax(axis=1) == fed.y_test.numpy()).mean())
    assert acc == pytest.approx(result.summary["final/acc"], abs=1e-9)
    assert served.metadata.get_input_schema().inputs[0].shape == (-1, *fed.x_train.shape[1:])

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    run = client.get_run(cb.run_id)
    (ds,) = run.inputs.dataset_inputs
    assert ds.dataset.digest == fed.sha256[:32] and json.loads(ds.dataset.source)["uri"] == str(fed_dir)
    assert json.loads(ds.dataset.profile)["num_clients"] == cfg.partition.num_clients
    assert any(k.startswith("system/cpu") for k in run.data.metrics)
    assert "round" not in run.data.metrics and not [k for k in run.data.metrics if k.startswith("last/")]
    assert run.data.tags["mlflow.source.name"] == "fedcore run tiny.yaml" and run.data.tags["mlflow.user"]
    exp = client.get_experiment(run.info.experiment_id)
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"

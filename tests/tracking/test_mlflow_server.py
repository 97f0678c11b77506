"""End to end: TrackingCallback -> real `mlflow server` -> moto S3."""

from __future__ import annotations

import json

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
        "model/state_dict.pth",
        "history.csv",
        "metrics.json",
        "config.yaml",
        "checkpoints/train/train.ckpt",
        "reports/noise_scene.png",
    } <= keys

    local = client.download_artifacts(cb.run_id, "model/state_dict.pth", str(tmp_path / "dl"))
    assert torch.equal(torch.load(local, weights_only=True)["weight"], model.weight.detach())

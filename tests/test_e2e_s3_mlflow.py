"""End to end against real servers: moto S3 + `mlflow server` (sqlite, artifacts proxied to S3).

A two-stage experiment runs the way the pipeline runs it: prepare, upload the dataset to
s3://, one run_stage per stage (the first opens the child run, the second resumes it from
a checkpoint that went through S3), evaluate, close the parent. Then the MLflow client
must see one point per round for every per-round metric, and boto3 the artifacts.
"""

from __future__ import annotations

import pytest
from mlflow import MlflowClient

from fedcore.engine.types import Stage
from fedcore.io import storage
from fedcore.methods import registry
from fedcore.methods.base import StagedMethod
from fedcore.pipeline import ops
from fedcore.pipeline.plan import config_text
from fedcore.registries import config_from_dict
from tests.components.test_components import tiny_config

WARMUP, TRAIN = 2, 2
PER_ROUND = ("test/acc", "test/loss", "train/loss")


class TwoStage(StagedMethod):
    """FedAvg split into two stages, so the second stage task must resume the first's run."""

    name = "two_stage_e2e"

    @property
    def stages(self) -> tuple[Stage, ...]:
        return (Stage("warmup", self.stage_rounds("warmup", WARMUP)), Stage("train", self.stage_rounds("train", TRAIN)))


@pytest.fixture
def two_stage(monkeypatch):
    spec = registry.MethodSpec(TwoStage.name, TwoStage, registry.MethodParams)
    monkeypatch.setitem(registry._REGISTRY, TwoStage.name, spec)
    return TwoStage.name


def test_experiment_lands_in_mlflow_server_and_s3(mlflow_server, s3_bucket, two_stage, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / "cache"))
    data = tiny_config(tmp_path, uri=mlflow_server.uri, experiment="e2e-pipeline")
    data["tracking"].pop("artifact_location")  # the server proxies artifacts to its bucket
    data["method"]["name"] = two_stage
    cfg = config_from_dict(data)
    text = config_text(cfg)

    parent = ops.start_tracking(text, "experiment", tmp_path / "tracking.json")
    ops.prepare(text, "[]", cfg.data_hash(), tmp_path / "data", tmp_path / "report")
    data_uri = f"s3://{s3_bucket}/datasets/{cfg.data_hash()}"
    storage.upload_dir(tmp_path / "data", data_uri)
    run_id = ops.run_stage(cfg, "warmup", data_uri, None, tmp_path / "warmup", parent, "", "e2e")
    ckpt_uri = f"s3://{s3_bucket}/checkpoints/{cfg.config_hash()}/warmup"
    storage.upload_dir(tmp_path / "warmup", ckpt_uri)
    resumed = storage.download_dir(ckpt_uri, tmp_path / "warmup-from-s3")
    assert ops.run_stage(cfg, "train", data_uri, resumed, tmp_path / "train", parent, run_id, "e2e") == run_id
    ev = ops.evaluate(cfg, data_uri, tmp_path / "train", tmp_path / "report", tmp_path / "eval", run_id, "e2e")
    ops.finish_parent(cfg, parent, [tmp_path / "eval" / "record.json"])

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    child = client.get_run(run_id)
    assert child.info.status == "FINISHED" and client.get_run(parent).info.status == "FINISHED"
    assert child.data.tags["mlflow.parentRunId"] == parent
    for name in PER_ROUND:
        steps = [m.step for m in client.get_metric_history(run_id, name)]
        assert steps == list(range(1, WARMUP + TRAIN + 1)), name
    assert ev.record["rounds"] == WARMUP + TRAIN

    s3 = mlflow_server.s3.client()
    listing = s3.list_objects_v2(Bucket=mlflow_server.bucket, Prefix=f"{mlflow_server.prefix}/")
    keys = {o["Key"].split(f"/{run_id}/artifacts/", 1)[-1] for o in listing.get("Contents", [])}
    assert {"checkpoints/warmup/stage-warmup.pt", "checkpoints/train/stage-train.pt", "model/state_dict.pth",
            "evaluation/curves.png", "evaluation/confusion.png", "reports/scene.png", "reports/scene.json",
            "history.csv", "metrics.json", "config.yaml"} <= keys
    data_keys = {o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket, Prefix="datasets/")["Contents"]}
    assert {f"datasets/{cfg.data_hash()}/{f}" for f in ("data.pt", "truth.pt", "manifest.json")} <= data_keys

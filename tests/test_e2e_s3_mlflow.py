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
from fedcore.pipeline import evaluation, ops, runs
from fedcore.pipeline.inputs import RunInputs
from fedcore.pipeline.plan import config_input
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
    inp, stages = RunInputs(config_input(cfg)), ["warmup", "train"]

    parent = runs.start_tracking(cfg, "experiment", tmp_path / "tracking.json", job_id="kfp-run-1")
    ops.prepare(inp, tmp_path / "data", tmp_path / "report")
    data_uri = f"s3://{s3_bucket}/datasets/{cfg.data_hash()}"
    storage.upload_dir(tmp_path / "data", data_uri)
    _, run_id = ops.run_stage(inp, "warmup", stages, data_uri, None, tmp_path / "warmup", parent, "", "e2e-warmup")
    ckpt_uri = f"s3://{s3_bucket}/checkpoints/{cfg.config_hash()}/warmup"
    storage.upload_dir(tmp_path / "warmup", ckpt_uri)
    resumed = storage.download_dir(ckpt_uri, tmp_path / "warmup-from-s3")
    _, again = ops.run_stage(inp, "train", stages, data_uri, resumed, tmp_path / "train", parent, run_id, "e2e-train")
    assert again == run_id
    ev = evaluation.evaluate(cfg, data_uri, tmp_path / "train", tmp_path / "report", tmp_path / "eval", run_id, "e2e")
    assert runs.finish(cfg, "kfp-run-1", "SUCCEEDED")["status"] == "FINISHED"  # the exit handler

    client = MlflowClient(tracking_uri=mlflow_server.uri)
    child = client.get_run(run_id)
    assert child.info.status == "FINISHED" and client.get_run(parent).info.status == "FINISHED"
    assert child.data.tags["mlflow.parentRunId"] == parent
    assert child.data.tags["mlflow.source.name"] == "fedcore-experiment (Kubeflow pipeline)"  # from its parent
    assert client.get_logged_model(child.data.tags["model.id"]).source_run_id == run_id
    for name in PER_ROUND:
        steps = [m.step for m in client.get_metric_history(run_id, name)]
        assert steps == list(range(1, WARMUP + TRAIN + 1)), name
    assert ev.record["rounds"] == WARMUP + TRAIN

    s3 = mlflow_server.s3.client()
    listing = s3.list_objects_v2(Bucket=mlflow_server.bucket, Prefix=f"{mlflow_server.prefix}/")
    keys = {o["Key"].split(f"/{run_id}/artifacts/", 1)[-1] for o in listing.get("Contents", [])}
    assert {"checkpoints/warmup/stage-warmup.pt", "checkpoints/train/stage-train.pt", "state_dict/state_dict.pth",
            "evaluation/curves.png", "evaluation/confusion.png", "reports/scene.png", "reports/scene.json",
            "history.csv", "metrics.json", "config.yaml"} <= keys
    data_keys = {o["Key"] for o in s3.list_objects_v2(Bucket=s3_bucket, Prefix="datasets/")["Contents"]}
    assert {f"datasets/{cfg.data_hash()}/{f}" for f in ("data.pt", "truth.pt", "manifest.json")} <= data_keys

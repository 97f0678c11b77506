"""Every component, run by kfp.local on a user's tiny table (the newest of two snapshots under an s3://
prefix, as a retrain reads it), chained the way the pipelines chain them.

kfp.local cannot hand a finished task's artifact to a separately called task, so the
components run inside one small test pipeline, shaped like the sweep (one loop iteration,
fanned in with dsl.Collected) so that `compare` gets its list input the same way.
"""

# No `from __future__ import annotations`: kfp reads the pipeline's return annotation.
import json
from pathlib import Path

from kfp import dsl
from mlflow import MlflowClient

from components import champion, compare, evaluate, latest_snapshot, prepare_data, run_stage, start_tracking
from fedcore.data.federated import FederatedDataset
from fedcore.io import storage
from fedcore.pipeline.plan import config_input
from fedcore.registries import config_from_dict
from pipelines.runner import run_local
from tests.data.test_own_files import table_rows, write_table

PNG = b"\x89PNG"


def tiny_config(tmp_path: Path, **tracking: str) -> dict:
    """Digits on 4 clients for 2 rounds, tracked in an embedded MLflow store under tmp_path."""
    return {
        "data": {"name": "digits", "max_train": 400},
        "partition": {"kind": "iid", "num_clients": 4},
        "noise": {"type": "symmetric", "noisy_client_fraction": 0.5, "rate": {"kind": "fixed", "value": 0.4}},
        "model": {"name": "mlp", "width": 32},
        "train": {"rounds": 2, "local_epochs": 1, "batch_size": 32, "lr": 0.1, "device": "cpu"},
        "method": {"name": "fedavg"},
        "tracking": {"backend": "mlflow", "uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                     "artifact_location": str(tmp_path / "mlartifacts"), **tracking},
    }


def _output(root: Path, task: str, name: str) -> Path:
    (hit,) = root.glob(f"kfp/**/{task}/{name}")
    return hit


def test_every_component_under_kfp_local(tmp_path, s3_bucket):
    # The user's table in two snapshots under an s3:// prefix; the older one is smaller (9 rows a client to train).
    prefix = f"s3://{s3_bucket}/snapshots/"
    older = tmp_path / "older"
    storage.upload_dir(write_table(older, df=table_rows(older, n_per=4)), prefix + "2024-01-01")
    storage.upload_dir(write_table(tmp_path / "newer"), prefix + "2024-02-01")
    newest = prefix + "2024-02-01"
    data = tiny_config(tmp_path, experiment="components")
    data.update(data={"name": "table", "image_size": 8, "cache_dir": str(tmp_path / "cache")},
                partition={"kind": "natural", "num_clients": 3, "min_size": 2}, noise={"type": "real"})
    cfg = config_from_dict(data)
    inputs = {"config": config_input(cfg), "overrides": []}
    settings = [{"setting": "tiny", "overrides": []}]

    @dsl.pipeline(name="every-component")
    def every_component() -> str:
        track = start_tracking(**inputs, pipeline="components", job_id="job-1", methods=["fedavg"],
                               settings=settings).outputs["tracking"]
        with dsl.ParallelFor(settings) as setting:
            snap = latest_snapshot(prefix=prefix).outputs["Output"]
            prep = prepare_data(**inputs, setting=setting, data_root=snap)
            data = prep.outputs["dataset"]
            run = {**inputs, "setting": setting, "methods": ["fedavg"], "seeds": [0], "slot": 0, "slots": 1,
                   "data_root": snap}
            stage = run_stage(stage="train", stages=["train"], label="fedavg-train", dataset=data, tracking=track,
                              **run)
            ckpt, rid = stage.outputs["checkpoint"], stage.outputs["Output"]
            ev = evaluate(dataset=data, run=ckpt, report=prep.outputs["report"], tracking=track, run_id=rid,
                          label="fedavg-evaluate", **run)
            champion(**inputs, model_name="tiny-model", dataset=data, run=ckpt, tracking=track, run_id=rid,
                     data_root=snap).after(ev)
        return compare(**inputs, rows=dsl.Collected(ev.outputs["Output"]), tracking=track,
                       title="tiny").outputs["Output"]

    result = run_local(every_component, tmp_path / "root", echo=False)

    (record,) = json.loads(result.output)
    assert (record["method"], record["setting"], record["seed"]) == ("fedavg", "tiny", 0)
    assert 0.0 <= record["summary"]["final/acc"] <= 1.0
    root = tmp_path / "root"
    dataset = _output(root, "prepare-data", "dataset")
    assert json.loads((dataset / "manifest.json").read_text())["files"]["data.pt"] == record["data_sha256"]
    assert len(FederatedDataset.load(dataset).y_train) == 3 * 15  # the newer snapshot's rows (the older's: 27)
    assert (_output(root, "prepare-data", "report") / "scene.png").read_bytes()[:4] == PNG
    assert (_output(root, "run-stage", "checkpoint") / "checkpoints" / "stage-train.pt").is_file()
    figures = _output(root, "evaluate", "figures")
    assert {"curves.png", "confusion.png", "record.json"} <= {p.name for p in figures.iterdir()}
    assert "| fedavg · tiny | 1 |" in (_output(root, "compare", "figures") / "compare.md").read_text()
    decision = json.loads((_output(root, "champion", "decision") / "decision.json").read_text())
    assert decision["promote"] and decision["champion"] is None and decision["version"] == "1"

    client = MlflowClient(cfg.tracking.uri)
    child = client.get_run(record["run_id"])
    parent = client.get_run(child.data.tags["mlflow.parentRunId"])
    assert (child.info.status, parent.info.status) == ("FINISHED", "FINISHED")
    assert child.data.params["data.root"].rstrip("/") == newest  # trained on the newest snapshot
    assert child.data.tags["setting"] == "tiny" and child.data.tags["retrain.decision"] == "promoted"
    assert client.get_model_version_by_alias("tiny-model", "champion").run_id == record["run_id"]
    assert parent.data.tags["kfp.run_id"] == "job-1" and child.data.tags["kfp.task"] == "fedavg-evaluate"
    summary = {a.path for a in client.list_artifacts(parent.info.run_id, "summary")}
    assert {"summary/compare.json", "summary/compare.png", "summary/compare_table.json"} <= summary
    table = json.loads(Path(client.download_artifacts(parent.info.run_id, "summary/compare_table.json")).read_text())
    assert table["columns"][0] == "method · setting" and table["data"][0][0] == "fedavg · tiny"

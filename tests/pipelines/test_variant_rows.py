"""A sweep with fedgr and its variant fedgr-robust: each run is recorded, tagged and named as its
row, so that the sweep's table and `fedcore compare` keep the two apart (both train method fedgr)."""

from __future__ import annotations

from types import SimpleNamespace

from mlflow import MlflowClient

from fedcore.pipeline import ops, runs
from fedcore.pipeline.inputs import RunInputs
from fedcore.pipeline.plan import config_input
from fedcore.registries import config_from_dict
from fedcore.reporting.compare_mlflow import load_records
from tests.components.test_components import tiny_config


def test_variant_row_is_recorded_tagged_and_named_as_itself(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / "cache"))
    data = tiny_config(tmp_path, experiment="rows")
    data["method"]["name"] = "fedgr"
    data["train"]["stage_rounds"] = {"warmup": 1, "train": 1}
    cfg = config_from_dict(data)
    setting = {"setting": "tiny", "overrides": []}
    parent = runs.start_tracking(cfg, "sweep", tmp_path / "tracking.json", job_id="job-1")
    ops.prepare(RunInputs(config_input(cfg), setting=setting), tmp_path / "data", tmp_path / "report")
    dataset = SimpleNamespace(path=str(tmp_path / "data"), uri="")

    records = {}
    for slot in (0, 1):
        inp = RunInputs(config_input(cfg), (), setting, ["fedgr", "fedgr-robust"], [0], slot, 2)
        ev = ops.whole_run(inp, dataset, tmp_path / "report", tmp_path / "tracking.json", tmp_path / f"run{slot}",
                           tmp_path / f"figures{slot}")
        records[slot] = ev.record

    assert [records[s]["method"] for s in (0, 1)] == ["fedgr", "fedgr-robust"]
    assert [records[s]["group"] for s in (0, 1)] == ["fedgr · tiny", "fedgr-robust · tiny"]
    assert records[1]["config"]["method.params.profile"] == "robust"
    assert records[0]["config"].get("method.params.profile", "authors") == "authors"
    client = MlflowClient(tracking_uri=cfg.tracking.uri)
    child = client.get_run(records[1]["run_id"])
    assert child.data.tags["method"] == "fedgr" and child.data.tags["row"] == "fedgr-robust"
    assert child.data.tags["mlflow.parentRunId"] == parent
    assert child.info.run_name.startswith("fedgr-robust · ")
    assert client.get_run(records[0]["run_id"]).data.tags["row"] == "fedgr"
    by_run = {r["run_id"]: r["group"] for r in load_records("rows", cfg.tracking.uri)}
    assert by_run == {records[0]["run_id"]: "fedgr · tiny", records[1]["run_id"]: "fedgr-robust · tiny"}

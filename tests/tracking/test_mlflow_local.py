"""MlflowTracker and TrackingCallback against the embedded sqlite store (no server)."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
from mlflow import MlflowClient

from fedcore.config import ExperimentConfig, TrackingConfig
from fedcore.errors import TrackingError
from fedcore.tracking import make_tracker
from fedcore.tracking.callback import TrackingCallback
from fedcore.tracking.mlflow import CONNECT_ENV, PARENT_TAG, MlflowTracker, resolve_uri


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory) -> Path:
    """One embedded store for the module: creating the sqlite schema costs about a second."""
    return tmp_path_factory.mktemp("store")


@pytest.fixture
def new_tracker(store_dir, monkeypatch, request):
    """Factory for trackers on the embedded default store, one experiment per test."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    experiment = request.node.name

    def make() -> MlflowTracker:
        return MlflowTracker(None, experiment, base_dir=store_dir)

    return make


def client_for(tracker: MlflowTracker) -> MlflowClient:
    return MlflowClient(tracking_uri=tracker.uri)


def test_embedded_default_layout_and_ui_command(new_tracker, store_dir):
    t = new_tracker()
    rid = t.start("r", {})
    t.log_dict({"a": 1}, "x.json")
    t.end()

    root = store_dir.resolve() / "mlruns"
    assert t.uri == f"sqlite:///{root}/mlflow.db"
    assert (root / "mlflow.db").is_file()
    assert json.loads((root / "artifacts" / rid / "artifacts" / "x.json").read_text()) == {"a": 1}
    assert t.ui_command() == (
        f"mlflow ui --backend-store-uri sqlite:///{root}/mlflow.db --default-artifact-root {root}/artifacts"
    )


def test_a_new_store_is_created_without_mlflow_info_lines(tmp_path, capfd):
    """Creating the sqlite tables used to print two INFO lines on stderr for every new store."""
    import logging

    tracker = MlflowTracker(f"sqlite:///{tmp_path}/new/mlflow.db", "quiet")
    assert tracker.experiment_id and (tmp_path / "new" / "mlflow.db").is_file()  # a store was really set up
    assert "database tables" not in capfd.readouterr().err
    assert logging.getLogger("mlflow.store.db.utils").level == logging.NOTSET  # levels restored


def test_resolve_uri_prefers_config_then_env_then_embedded(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking:5000")

    assert resolve_uri("http://cfg:5000", tmp_path) == ("http://cfg:5000", None)
    assert resolve_uri(None, tmp_path) == ("http://tracking:5000", None)
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert resolve_uri(None, tmp_path)[0] == f"sqlite:///{tmp_path.resolve()}/mlruns/mlflow.db"


def test_metrics_have_one_point_per_step_even_past_the_batch_limit(new_tracker):
    t = new_tracker()
    rid = t.start("many", {"k": "v"})
    names = [f"noise/rate_est/client_{i:04d}" for i in range(1500)]
    for step in range(3):
        t.log_metrics({n: step + i / 1e4 for i, n in enumerate(names)}, step=step)
    t.end()

    client = client_for(t)
    run = client.get_run(rid)
    history = client.get_metric_history(rid, names[1234])
    assert len(run.data.metrics) == 1500
    assert [(m.step, m.value) for m in history] == [(s, s + 0.1234) for s in range(3)]
    assert run.data.tags["k"] == "v"
    assert run.info.status == "FINISHED"


def test_resume_by_run_id_appends_to_the_same_run(new_tracker):
    first = new_tracker()
    rid = first.start("stage-1", {})
    first.log_params({"lr": 0.1})
    first.log_metrics({"test/acc": 0.5}, step=1)
    first.end()

    second = new_tracker()
    assert second.start("ignored", {"stage": "train"}, run_id=rid) == rid
    assert second.logged_params() == {"lr": "0.1"}
    assert client_for(second).get_run(rid).info.status == "RUNNING"
    second.log_params({"lr": 0.1, "extra": "x"})  # the identical lr is skipped, not re-sent
    second.log_metrics({"test/acc": 0.6}, step=2)
    second.end()

    client = client_for(second)
    run = client.get_run(rid)
    assert [m.step for m in client.get_metric_history(rid, "test/acc")] == [1, 2]
    assert run.data.params == {"lr": "0.1", "extra": "x"}
    assert run.data.tags["stage"] == "train"
    assert run.info.status == "FINISHED"
    assert len(client.search_runs([first.experiment_id])) == 1


def test_resume_of_unknown_run_is_a_tracking_error(new_tracker):
    with pytest.raises(TrackingError, match="tracking.run_id"):
        new_tracker().start("x", {}, run_id="0" * 32)


def test_deleted_experiment_is_a_tracking_error(new_tracker):
    client_for(t := new_tracker()).delete_experiment(t.experiment_id)

    with pytest.raises(TrackingError, match="restore"):
        new_tracker()


def test_parent_and_child_runs(new_tracker):
    t = new_tracker()
    parent = t.start_parent("sweep", {})
    child = t.start("fedavg · seed 0", {}, nested=True)
    t.end()
    assert t.run_id == parent
    t.end()
    other = new_tracker().start("stage component", {}, parent_run_id=parent)

    client = client_for(t)
    assert client.get_run(child).data.tags[PARENT_TAG] == parent
    assert client.get_run(other).data.tags[PARENT_TAG] == parent
    assert PARENT_TAG not in client.get_run(parent).data.tags
    assert client.get_run(child).info.run_name == "fedavg · seed 0"


def test_state_dict_artifact_loads_back_with_torch(new_tracker, tmp_path):
    import mlflow.pytorch

    model = torch.nn.Linear(3, 2)
    t = new_tracker()
    rid = t.start("sd", {})
    t.log_state_dict(model.state_dict(), "model")
    t.end()

    artifact_uri = client_for(t).get_run(rid).info.artifact_uri
    loaded = mlflow.pytorch.load_state_dict(f"{artifact_uri}/model")
    assert sorted(loaded) == ["bias", "weight"]
    assert torch.equal(loaded["weight"], model.weight.detach())


def test_make_tracker_builds_mlflow_for_the_mlflow_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/env.db")
    art = tmp_path / "art"

    t = make_tracker(TrackingConfig(backend="mlflow", experiment="e", artifact_location=str(art)), tmp_path)

    assert isinstance(t, MlflowTracker)
    assert t.uri == f"sqlite:///{tmp_path}/env.db"
    assert client_for(t).get_experiment_by_name("e").artifact_location == str(art)


def test_unreachable_server_is_a_one_line_tracking_error(monkeypatch):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")
    for key in CONNECT_ENV:
        if key != "MLFLOW_HTTP_REQUEST_MAX_RETRIES":
            monkeypatch.delenv(key, raising=False)

    with pytest.raises(TrackingError) as err:
        MlflowTracker(f"http://127.0.0.1:{port}", "x")

    assert "cannot reach" in str(err.value) and "MLFLOW_TRACKING_URI" in str(err.value)
    assert "\n" not in str(err.value)
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "7"
    assert not [k for k in CONNECT_ENV if k != "MLFLOW_HTTP_REQUEST_MAX_RETRIES" and k in os.environ]


def test_callback_over_two_stage_components(new_tracker, tmp_path):
    """The pipeline flow: stage 1 creates the run and leaves it open, stage 2 resumes and ends it."""
    cfg = ExperimentConfig.model_validate({"method": {"name": "fedsir"}, "tracking": {"backend": "mlflow"}})
    ckpt = tmp_path / "identify.ckpt"
    ckpt.write_bytes(b"state")
    first = TrackingCallback(new_tracker(), cfg, data_sha256="d" * 64, keep_open=True)
    first.on_run_start({})
    first.after_round(1, "identify", {"detect/client_f1": 0.8})
    first.on_stage_end("identify", 1, ckpt)
    first.on_run_end({}, tmp_path / "nothing-here")

    resumed_cfg = cfg.model_copy(deep=True)
    resumed_cfg.tracking.run_id = first.run_id
    torch.save({"w": torch.zeros(1)}, tmp_path / "model.pt")
    second = TrackingCallback(new_tracker(), resumed_cfg, data_sha256="d" * 64)
    second.on_run_start({})
    second.after_round(2, "train", {"test/acc": 0.7})
    second.on_run_end({"final/acc": 0.7}, tmp_path)

    client = client_for(second.tracker)
    run = client.get_run(first.run_id)
    files = {f.path for f in client.list_artifacts(run.info.run_id, "checkpoints/identify")}
    assert second.run_id == first.run_id
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "fedsir · sym 0.4 · seed 0"
    assert run.data.params["data_sha256"] == "d" * 64
    metrics = {k: v for k, v in run.data.metrics.items() if not k.startswith("system/")}
    assert metrics == {"detect/client_f1": 0.8, "test/acc": 0.7, "final/acc": 0.7}
    assert [m.step for m in client.get_metric_history(run.info.run_id, "final/acc")] == [2]
    # Each stage samples the machine at least once; the second continues the first's steps.
    cpu = client.get_metric_history(run.info.run_id, "system/cpu_utilization_percentage")
    assert [m.step for m in cpu] == [0, 1]
    assert files == {"checkpoints/identify/identify.ckpt"}
    assert not [k for k in run.data.tags if k.startswith("changed_param")]


def test_unreachable_s3_artifact_store_is_a_one_line_tracking_error(store_dir, monkeypatch, request):
    # Artifact uploads go from this client straight to S3; boto errors used to escape as tracebacks.
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("FEDCORE_TRACKING_RETRY_SECONDS", "0")  # the failure itself, not the retries
    tracker = MlflowTracker(None, request.node.name, artifact_location="s3://fedcore/mlflow", base_dir=store_dir)
    cfg = ExperimentConfig.model_validate({"tracking": {"backend": "mlflow"}})
    cb = TrackingCallback(tracker, cfg, data_sha256="d" * 64)

    with pytest.raises(TrackingError) as err:
        cb.on_run_start({})
    cb.on_failure(err.value)

    text = str(err.value)
    assert text.startswith("MLflow upload of config.yaml failed on its S3 artifact store")
    assert "MLFLOW_S3_ENDPOINT_URL" in text and "\n" not in text
    run = client_for(tracker).get_run(cb.run_id)
    assert run.info.status == "FAILED" and run.data.tags["error"].startswith("MLflow upload of config.yaml")


def test_the_cli_hint_opens_the_store_on_mlflows_model_training_pages(tmp_path):
    from fedcore.cli.pipeline import mlflow_hint

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    hint = mlflow_hint(ExperimentConfig.model_validate({"tracking": {"uri": uri}}))
    assert hint.startswith(f"mlflow ui --backend-store-uri {uri}") and "workflowType=machine_learning" in hint


def test_log_table_is_an_mlflow_table_artifact(new_tracker):
    t = new_tracker()
    rid = t.start("r", {})
    t.log_table({"method": ["fedavg", "fedsir"], "acc": [0.84, 0.92]}, "summary/compare_table.json")
    t.end()
    client = client_for(t)
    # The tag is what the UI's table view looks for; the file is mlflow's columns/data layout.
    tag = json.loads(client.get_run(rid).data.tags["mlflow.loggedArtifacts"])
    assert {"path": "summary/compare_table.json", "type": "table"} in tag
    table = json.loads(Path(client.download_artifacts(rid, "summary/compare_table.json")).read_text())
    assert table["columns"] == ["method", "acc"] and table["data"] == [["fedavg", 0.84], ["fedsir", 0.92]]

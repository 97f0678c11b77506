"""Real outages: the S3 store behind an `mlflow server`, or the server itself, dies while a run trains.

The run must finish locally with every output, say once which endpoint failed, leave the
MLflow run marked, and `fedcore tracking sync` must replay the rest into the same run once
the server is back. Own servers (tests/fixtures/outage.py): the session ones are shared.
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from mlflow import MlflowClient

from fedcore.data.build import build
from fedcore.engine.callbacks import Callback
from fedcore.registries import load_config
from fedcore.run import run_experiment
from fedcore.tracking import make_tracker
from fedcore.tracking.callback import TrackingCallback
from fedcore.tracking.journal import Journal
from fedcore.tracking.sync import sync
from tests.fixtures.outage import Servers

pytestmark = pytest.mark.slow
CONFIG = "configs/quickstart.yaml"
ROUNDS = 4
TINY = ["train.device=cpu", f"train.rounds={ROUNDS}", "partition.num_clients=4", "data.max_train=200",
        "train.local_epochs=1", "train.checkpoint_every=2", "tracking.backend=mlflow"]
OUTPUTS = ("model.pt", "metrics.json", "history.csv", "config.yaml", "scene.json", "checkpoints/stage-train.pt")


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    s = Servers(tmp_path_factory.mktemp("outage"))
    try:
        s.start_moto()
        s.start_mlflow()
        yield s
    finally:
        s.stop()


@pytest.fixture
def env(servers, monkeypatch):
    for key, value in servers.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("FEDCORE_TRACKING_RETRY_SECONDS", "3")  # the run: MLflow retries twice, after 0 and 2 s
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")  # this test's own client: fail fast, not in minutes
    # A killed server refuses at once, so a long per-attempt timeout costs the outage nothing; it keeps
    # a live server that a busy machine slows down from being taken for a dead one.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "60")
    return servers


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return build(load_config(CONFIG, TINY)).save(tmp_path_factory.mktemp("data") / "art")


class Kill(Callback):
    def __init__(self, servers: Servers, which: str) -> None:
        self.servers, self.which = servers, which

    def after_round(self, rnd, stage, metrics):
        if rnd == 2:
            self.servers.kill(self.which)


def train_through(servers: Servers, which: str, out, artifact, experiment: str, caplog) -> tuple[str, list[str]]:
    cfg = load_config(CONFIG, [*TINY, f"tracking.uri={servers.uri}", f"tracking.experiment={experiment}"])
    with caplog.at_level(logging.WARNING, logger="fedcore.tracking"):
        run_experiment(cfg, out, data=artifact,
                       callbacks=[TrackingCallback(make_tracker(cfg.tracking), cfg), Kill(servers, which)])
    for name in OUTPUTS:
        assert (out / name).is_file(), f"{name} missing after the outage"
    warned = [r.getMessage() for r in caplog.records if "tracking degraded" in r.getMessage()]
    return json.loads((out / "tracking" / "state.json").read_text())["run_id"], warned


def steps(client: MlflowClient, run_id: str) -> list[int]:
    return [m.step for m in client.get_metric_history(run_id, "test/acc")]


def test_s3_dies_mid_run(env, tmp_path, artifact, caplog):
    out = tmp_path / "run"
    rid, warned = train_through(env, "s3", out, artifact, "s3-outage", caplog)
    client = MlflowClient(env.uri)
    run = client.get_run(rid)
    assert len(warned) == 1 and f"the S3 artifact store behind the MLflow server at {env.uri}" in warned[0]
    # The tracking server was fine: the run is ended and says what is missing; its metrics are all there.
    assert run.info.status == "FINISHED" and run.data.tags["fedcore.tracking"].startswith("degraded: ")
    assert steps(client, rid) == list(range(1, ROUNDS + 1))

    env.start_moto()
    res = sync(out)
    run = client.get_run(rid)
    assert (res.run_id, res.status, res.waiting) == (rid, "FINISHED", 0)
    assert run.info.status == "FINISHED" and run.data.tags["fedcore.tracking"] == "synced"
    # the journaled state_dict arrives
    assert {a.path for a in client.list_artifacts(rid)} >= {"config.yaml", "history.csv", "metrics.json",
                                                           "state_dict", "checkpoints"}
    assert [a.path for a in client.list_artifacts(rid, "checkpoints/train")] == ["checkpoints/train/stage-train.pt"]
    assert client.get_logged_model(run.data.tags["model.id"]).source_run_id == rid  # the served model, replayed


def test_mlflow_dies_mid_run(env, tmp_path, artifact, caplog):
    out = tmp_path / "run"
    rid, warned = train_through(env, "mlflow", out, artifact, "mlflow-outage", caplog)
    assert len(warned) == 1 and f"failed on {env.uri} after" in warned[0] and "fedcore tracking sync" in warned[0]

    ended_ms = int(time.time() * 1000)  # the run is over; the server is still down
    journaled = [op["op"] for op in Journal(out).pending()]
    assert "end" in journaled and "model" in journaled  # its end and its served model wait
    env.start_mlflow()
    client = MlflowClient(env.uri)
    assert client.get_run(rid).info.status == "RUNNING" and steps(client, rid) == [1, 2]
    assert "model.id" not in client.get_run(rid).data.tags
    res = sync(out)
    run = client.get_run(rid)
    assert (res.status, run.info.status) == ("FINISHED", "FINISHED")
    # ended when the run ended, not when it was synced
    assert run.info.start_time <= run.info.end_time <= ended_ms
    # the served model the run would have logged: a LoggedModel of this run, tagged on it
    model = client.get_logged_model(run.data.tags["model.id"])
    assert model.source_run_id == rid and run.data.tags["model.uri"] == f"models:/{model.model_id}"
    assert Journal(out).pending() == []
    assert steps(client, rid) == list(range(1, ROUNDS + 1))
    assert len(client.search_runs([client.get_experiment_by_name("mlflow-outage").experiment_id])) == 1
    assert "state_dict" in {a.path for a in client.list_artifacts(rid)}

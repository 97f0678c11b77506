"""MLflow's own retries sized by the budget, the run-dir journal, degraded tracking, resume, sync, SIGTERM.

Retries are tried against a local HTTP endpoint that fails N times, so they pass through MLflow's
own client. Whole-run outages are simulated on the embedded sqlite store by making the client's
calls fail the way an unreachable server makes them fail; tests/tracking/test_outage.py kills real servers.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from fedcore.data.build import build
from fedcore.engine.callbacks import Callback
from fedcore.errors import Terminated, TrackingError
from fedcore.registries import load_config
from fedcore.run import run_experiment
from fedcore.tracking.callback import TrackingCallback
from fedcore.tracking.mlflow import MlflowTracker
from fedcore.tracking.sync import sync
from fedcore.tracking.transport import (
    MAX_RETRY_SECONDS,
    TrackingUnavailable,
    Transport,
    backoff_waits,
    mlflow_retries,
)

CONFIG = "configs/quickstart.yaml"
ROUNDS = 4
TINY = ["train.device=cpu", f"train.rounds={ROUNDS}", "partition.num_clients=4", "data.max_train=200",
        "train.local_epochs=1", "train.checkpoint_every=1", "tracking.backend=mlflow"]
REFUSED = "API request to http://127.0.0.1:9/api/2.0/mlflow/runs/log-batch failed with exception " \
          "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded (Caused by NewConnectionError: " \
          "Failed to establish a new connection: [Errno 111] Connection refused)"


# -- the transport: MLflow's own retries, sized by the budget -------------------------------------


def test_the_budget_becomes_mlflows_longest_schedule_that_fits():
    assert mlflow_retries(0) == (0, 1)  # one attempt: degrade at the first failure
    assert mlflow_retries(3) == (2, 1) and backoff_waits(2, 1) == [0.0, 2.0]
    assert mlflow_retries(60) == (5, 2) and backoff_waits(5, 2) == [0.0, 4.0, 8.0, 16.0, 32.0]
    assert mlflow_retries(120) == (5, 4)
    assert mlflow_retries(MAX_RETRY_SECONDS) == (10, 60) and backoff_waits(10, 60)[1:] == [120.0] * 9
    for budget in (0.5, 7, 45, 333, 1000):
        assert sum(backoff_waits(*mlflow_retries(budget))) <= budget


@pytest.mark.parametrize("raw", ["soon", "5000", "nan", "-1"])
def test_a_bad_budget_in_the_environment_is_one_line(monkeypatch, raw):
    monkeypatch.setenv("FEDCORE_TRACKING_RETRY_SECONDS", raw)
    with pytest.raises(TrackingError, match="FEDCORE_TRACKING_RETRY_SECONDS") as err:
        Transport("http://127.0.0.1:9")
    assert "\n" not in str(err.value)


class FlakyMlflow:
    """An MLflow REST endpoint on 127.0.0.1 that answers log-batch with `status` for its first `fail` requests."""

    def __init__(self) -> None:
        self.fail, self.status, self.hits = 0, 503, 0
        flaky = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                flaky.hits += 1
                if flaky.fail > 0:
                    flaky.fail -= 1
                    code = "INVALID_PARAMETER_VALUE" if flaky.status == 400 else "TEMPORARILY_UNAVAILABLE"
                    body = {"error_code": code, "message": "no"}
                    self.send_response(flaky.status)
                else:
                    body = {}
                    self.send_response(200)
                data = json.dumps(body).encode()
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def log(self, transport: Transport, artifact: bool = False) -> None:
        from mlflow.entities import Metric

        client = MlflowClient(self.uri)
        transport.call("log_batch(metrics)", client.log_batch, "run-1", metrics=[Metric("m", 1.0, 0, 1)],
                       artifact=artifact)


@pytest.fixture
def flaky(monkeypatch):
    for key in ("FEDCORE_TRACKING_RETRY_SECONDS", "MLFLOW_HTTP_REQUEST_MAX_RETRIES",
                "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_BACKOFF_JITTER", "0")  # waits of exactly 0, 2, ... s
    server = FlakyMlflow()
    yield server
    server.server.shutdown()


def test_a_tracker_with_no_budget_set_gets_60_s(store_db, monkeypatch):
    for key in ("FEDCORE_TRACKING_RETRY_SECONDS", "MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    settings = MlflowTracker(store_db, "budget").transport.settings()
    assert settings == {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "5", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "2",
                        "MLFLOW_HTTP_REQUEST_TIMEOUT": "30"}
    assert MlflowTracker(store_db, "budget", retry_seconds=0).transport.settings()[
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"


def test_a_bounded_outage_is_waited_out_by_mlflows_own_retries(flaky):
    flaky.fail = 2
    flaky.log(Transport(flaky.uri, retry_s=3))  # two retries fit in 3 s: the third attempt gets through
    assert flaky.hits == 3 and flaky.fail == 0
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ  # set for the call only


def test_a_long_outage_marks_the_endpoint_down_until_the_runs_end(flaky):
    flaky.fail = 10**6
    t = Transport(flaky.uri, retry_s=3)
    with pytest.raises(TrackingUnavailable) as err:
        flaky.log(t)
    assert flaky.hits == 3  # the first attempt and MLflow's two retries
    assert str(err.value).startswith(f"MLflow log_batch(metrics) failed on {flaky.uri} after ")
    assert err.value.endpoint.kind == "MLflow" and "\n" not in str(err.value)
    with pytest.raises(TrackingUnavailable):
        flaky.log(t)  # down: at once, without a request
    with pytest.raises(TrackingUnavailable):
        flaky.log(t, artifact=True)  # artifact calls need the tracking server too
    assert flaky.hits == 3
    flaky.fail = 0
    t.revive()  # the run's end: one attempt, no more waiting on an endpoint that went down
    flaky.log(t)
    assert flaky.hits == 4 and t.settings()["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"


def test_without_a_budget_the_users_own_mlflow_settings_stand(flaky, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    flaky.fail = 10**6
    with pytest.raises(TrackingUnavailable):
        flaky.log(Transport(flaky.uri))
    assert flaky.hits == 2
    monkeypatch.setenv("FEDCORE_TRACKING_RETRY_SECONDS", "0")  # a budget wins over them
    with pytest.raises(TrackingUnavailable):
        flaky.log(Transport(flaky.uri))
    assert flaky.hits == 3


def test_a_process_going_down_tries_each_call_once(flaky):
    flaky.fail = 10**6
    t = Transport(flaky.uri, retry_s=60)
    t.impatient()
    with pytest.raises(TrackingUnavailable):
        flaky.log(t)
    assert flaky.hits == 1


def test_a_refused_request_is_not_retried(flaky):
    flaky.fail, flaky.status = 1, 400
    with pytest.raises(TrackingError, match="INVALID_PARAMETER_VALUE") as err:
        flaky.log(Transport(flaky.uri, retry_s=60))
    assert not isinstance(err.value, TrackingUnavailable) and flaky.hits == 1


def test_a_dead_s3_endpoint_is_named_with_its_url(monkeypatch):
    from botocore.exceptions import EndpointConnectionError

    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", "http://127.0.0.1:9")

    def dead():
        raise EndpointConnectionError(endpoint_url="http://127.0.0.1:9/bucket/key")

    with pytest.raises(TrackingUnavailable) as err:
        Transport("sqlite:///x.db", retry_s=0).call("upload of model.pt", dead, artifact=True)
    assert err.value.endpoint.kind == "S3" and "its S3 artifact store at http://127.0.0.1:9" in str(err.value)


def test_a_500_to_an_upload_blames_the_store_behind_the_server():
    def proxied():
        raise MlflowException("API request to http://h/api/2.0/mlflow-artifacts/artifacts/x failed with exception "
                              "HTTPConnectionPool(host='h', port=5000): Max retries exceeded with url: /x (Caused by "
                              "ResponseError('too many 500 error responses'))")

    t = Transport("http://h:5000", retry_s=0)
    with pytest.raises(TrackingUnavailable) as err:
        t.call("upload of stage-train.pt", proxied, artifact=True)
    assert "the S3 artifact store behind the MLflow server at http://h:5000" in str(err.value)
    assert t.call("log_batch(metrics)", lambda: "ok") == "ok"  # the tracking server itself is fine


# -- the journal, through whole runs --------------------------------------------------------------


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return build(load_config(CONFIG, TINY)).save(tmp_path_factory.mktemp("data") / "art")


@pytest.fixture(scope="module")
def store_db(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlruns.db'}"  # one schema migration per module


@pytest.fixture
def store(store_db, monkeypatch, request):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("FEDCORE_TRACKING_RETRY_SECONDS", "0")  # degrade at the first failure: no waiting
    monkeypatch.setattr(Experiment, "name", request.node.name[:60])
    return store_db


class Experiment:
    name = "outage"


def runs_of(store: str) -> list:
    client = MlflowClient(store)
    return client.search_runs([client.get_experiment_by_name(Experiment.name).experiment_id])


class Outage(Callback):
    """From round `at` on, the tracker's client fails like an unreachable server (or raises `then`)."""

    def __init__(self, tracker: MlflowTracker, at: int, then: BaseException | None = None) -> None:
        self.tracker, self.at, self.then = tracker, at, then

    def after_round(self, rnd, stage, metrics):
        if rnd == self.at:
            def refused(*args, **kwargs):
                raise MlflowException(REFUSED)

            for name in ("log_batch", "log_artifact", "log_artifacts", "log_dict", "set_terminated", "update_run"):
                setattr(self.tracker.client, name, refused)
        if self.then is not None and rnd == self.at + 1:
            raise self.then


def tracked_run(store, out, artifact, *extra, resume=None):
    cfg = load_config(CONFIG, [*TINY, f"tracking.uri={store}", f"tracking.experiment={Experiment.name}", *extra])
    tracker = MlflowTracker(store, Experiment.name)
    return cfg, tracker, (lambda cbs: run_experiment(cfg, out, data=artifact, resume=resume,
                                                      callbacks=[TrackingCallback(tracker, cfg), *cbs]))


def history(store, run_id, name="test/acc"):
    return [m.step for m in MlflowClient(store).get_metric_history(run_id, name)]


def test_an_outage_mid_run_degrades_once_and_sync_replays_into_the_same_run(store, tmp_path, artifact, caplog):
    out = tmp_path / "run"
    _, tracker, go = tracked_run(store, out, artifact)
    with caplog.at_level(logging.WARNING, logger="fedcore.tracking"):
        go([Outage(tracker, at=2)])
    warnings = [r.getMessage() for r in caplog.records if "tracking degraded" in r.getMessage()]
    assert len(warnings) == 1 and store in warnings[0] and "fedcore tracking sync" in warnings[0]
    for name in ("model.pt", "metrics.json", "history.csv", "config.yaml", "scene.json"):
        assert (out / name).is_file(), name
    state = json.loads((out / "tracking" / "state.json").read_text())
    client = MlflowClient(store)
    assert client.get_run(state["run_id"]).info.status == "RUNNING"  # its end could not be told
    assert history(store, state["run_id"]) == [1, 2]

    res = sync(out)
    run = client.get_run(state["run_id"])
    assert (res.run_id, res.status, res.waiting) == (state["run_id"], "FINISHED", 0)
    assert run.info.status == "FINISHED" and run.data.tags["fedcore.tracking"] == "synced"
    assert history(store, state["run_id"]) == list(range(1, ROUNDS + 1))
    assert history(store, state["run_id"], "final/acc") == [ROUNDS]
    # the journaled state_dict arrives; the served model (best effort) is not replayed
    assert {a.path for a in client.list_artifacts(state["run_id"])} >= {"config.yaml", "history.csv", "metrics.json",
                                                                       "state_dict", "checkpoints", "figures"}
    assert len(runs_of(store)) == 1
    assert sync(out).delivered == 0  # nothing twice


def test_resume_continues_the_same_run_and_replays_what_was_missed(store, tmp_path, artifact):
    out = tmp_path / "run"
    _, tracker, go = tracked_run(store, out, artifact)
    with pytest.raises(KeyboardInterrupt):
        go([Outage(tracker, at=2, then=KeyboardInterrupt("preempted"))])
    state = json.loads((out / "tracking" / "state.json").read_text())
    pending = [json.loads(line)["op"] for line in (out / "tracking" / "pending.jsonl").read_text().splitlines()]
    assert "end" in pending and history(store, state["run_id"]) == [1, 2]

    _, _, again = tracked_run(store, out, artifact, resume=out)
    again([])
    client = MlflowClient(store)
    assert client.get_run(state["run_id"]).info.status == "FINISHED"
    assert history(store, state["run_id"]) == list(range(1, ROUNDS + 1))  # each step once
    assert len(runs_of(store)) == 1


def test_uploads_wait_until_the_local_outputs_exist(store, tmp_path, artifact):
    out = tmp_path / "run"
    _, tracker, go = tracked_run(store, out, artifact)
    seen = []
    upload = tracker.client.log_artifact

    def watching(run_id, local, artifact_path=None):
        seen.append((Path(local).name, (out / "metrics.json").is_file() and (out / "model.pt").is_file()))
        return upload(run_id, local, artifact_path)

    tracker.client.log_artifact = watching
    go([])
    assert ("stage-train.pt", True) in seen and all(ready for _, ready in seen)


class SigTerm(Callback):
    def after_round(self, rnd, stage, metrics):
        if rnd == 2:
            os.kill(os.getpid(), signal.SIGTERM)


def test_sigterm_ends_the_run_killed_and_keeps_its_checkpoints(store, tmp_path, artifact):
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("something else handles SIGTERM in this process")
    out = tmp_path / "run"
    _, tracker, go = tracked_run(store, out, artifact)
    with pytest.raises(Terminated):
        go([SigTerm()])
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    rid = json.loads((out / "tracking" / "state.json").read_text())["run_id"]
    assert MlflowClient(store).get_run(rid).info.status == "KILLED"
    assert (out / "checkpoints" / "latest.pt").is_file() and not (out / "metrics.json").exists()


def test_sync_refuses_a_folder_without_a_journal(tmp_path, capsys):
    from fedcore.cli import main

    (tmp_path / "run").mkdir()
    with pytest.raises(SystemExit) as exc:
        main(["tracking", "sync", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and "has no tracking journal" in err and len(err.splitlines()) == 1

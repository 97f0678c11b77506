"""Tracking against a real `mlflow server --app-name basic-auth` (tests/fixtures/auth_server.py).

What the cluster relies on: no credentials, no access (401); the pod user that the setup Job
makes (fedcore.deploy.mlflow_auth) logs runs but cannot delete what is not its own; refused
credentials are one line naming the variables, exit 2, and the journal keeps the run for sync.
"""

from __future__ import annotations

import base64
import logging
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from fedcore.cli import main
from fedcore.deploy.mlflow_auth import setup
from fedcore.errors import TrackingError, UserError
from fedcore.tracking.journal import Journal
from fedcore.tracking.mlflow import MlflowTracker
from fedcore.tracking.resilient import ResilientTracker

POD = ("fedcore-pod", "pod-test-pw-93be71d0c2")
EXPERIMENT = "fedcore-auth"
MODEL = "fedcore-auth-model"
SEARCH = "/api/2.0/mlflow/experiments/search?max_results=5"


@pytest.fixture(scope="module")
def pod_user(auth_server):
    setup(auth_server.uri, auth_server.admin, POD, [EXPERIMENT], [MODEL])
    return POD


def as_user(monkeypatch, user: tuple[str, str] | None) -> None:
    for key in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(key, raising=False)
    if user:
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", user[0])
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", user[1])
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("FEDCORE_TRACKING_RETRY_SECONDS", "2")


def get_status(uri: str, user: tuple[str, str] | None) -> int:
    headers = {"Authorization": "Basic " + base64.b64encode(":".join(user).encode()).decode()} if user else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(uri + SEARCH, headers=headers), timeout=10) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code


def test_a_request_without_or_with_wrong_credentials_gets_401(auth_server, pod_user):
    assert get_status(auth_server.uri, None) == 401
    assert get_status(auth_server.uri, (POD[0], "not-the-password")) == 401
    assert get_status(auth_server.uri, POD) == 200


@pytest.mark.parametrize("user", [None, (POD[0], "not-the-password")])
def test_refused_credentials_are_one_line_naming_the_variables(auth_server, pod_user, monkeypatch, user):
    as_user(monkeypatch, user)
    with pytest.raises(TrackingError) as err:
        MlflowTracker(auth_server.uri, EXPERIMENT)
    msg = str(err.value)
    assert "\n" not in msg and "HTTP 401" in msg
    assert "MLFLOW_TRACKING_USERNAME" in msg and "MLFLOW_TRACKING_PASSWORD" in msg


def test_the_pod_user_logs_a_run(auth_server, pod_user, monkeypatch, tmp_path):
    as_user(monkeypatch, POD)
    tracker = MlflowTracker(auth_server.uri, EXPERIMENT)
    rid = tracker.start("pod-run", {"who": "pod"})
    tracker.log_params({"lr": 0.1})
    tracker.log_metrics({"test/acc": 0.5}, step=1)
    (tmp_path / "metrics.json").write_text("{}")
    tracker.log_artifact(tmp_path / "metrics.json")
    tracker.end("FINISHED")
    admin = MlflowClient(auth_server.uri)
    as_user(monkeypatch, auth_server.admin)
    run = admin.get_run(rid)
    assert run.info.status == "FINISHED" and run.data.metrics["test/acc"] == 0.5 and run.data.params["lr"] == "0.1"
    assert [a.path for a in admin.list_artifacts(rid)] == ["metrics.json"]


def test_the_pod_user_cannot_delete_another_users_experiment_nor_its_own(auth_server, pod_user, monkeypatch):
    as_user(monkeypatch, auth_server.admin)
    client = MlflowClient(auth_server.uri)
    other = client.create_experiment("someone-elses")
    ours = client.get_experiment_by_name(EXPERIMENT).experiment_id
    as_user(monkeypatch, POD)
    for exp_id in (other, ours):  # EDIT logs runs; deleting an experiment takes MANAGE
        with pytest.raises(MlflowException) as err:
            client.delete_experiment(exp_id)
        assert err.value.error_code == "PERMISSION_DENIED"
    with pytest.raises(MlflowException):  # nor may it read it: deny by default
        client.get_experiment(other)
    as_user(monkeypatch, auth_server.admin)
    assert {client.get_experiment(e).lifecycle_stage for e in (other, ours)} == {"active"}


def test_setup_refuses_default_passwords(auth_server):
    with pytest.raises(UserError, match="admin password"):
        setup(auth_server.uri, ("admin", "password1234"), POD, [], [])
    with pytest.raises(UserError, match="pod user's password"):
        setup(auth_server.uri, auth_server.admin, ("fedcore-pod", "REPLACE_ME"), [], [])
    with pytest.raises(UserError, match="must not be the admin"):
        setup(auth_server.uri, auth_server.admin, (auth_server.admin[0], POD[1]), [], [])


def test_credentials_refused_mid_run_are_journaled_and_sync_exits_2_keeping_them(
        auth_server, pod_user, monkeypatch, tmp_path, capsys, caplog):
    as_user(monkeypatch, POD)
    run_dir = tmp_path / "run"
    journal = Journal(run_dir)
    tracker = ResilientTracker(MlflowTracker(auth_server.uri, EXPERIMENT), journal)
    rid = tracker.start("rotated", {})
    tracker.log_metrics({"test/acc": 0.25}, step=1)
    as_user(monkeypatch, (POD[0], "rotated-away-pw-000"))  # the Secret changed under the run
    with caplog.at_level(logging.WARNING, logger="fedcore.tracking"):
        tracker.log_metrics({"test/acc": 0.75}, step=2)
        tracker.end("FINISHED")
    assert any("MLFLOW_TRACKING_PASSWORD" in r.getMessage() for r in caplog.records)
    kept = journal.pending()
    assert [op["op"] for op in kept] == ["metrics", "end"]

    with pytest.raises(SystemExit) as code:
        main(["tracking", "sync", str(run_dir)])
    err = capsys.readouterr().err.strip()
    assert code.value.code == 2 and len(err.splitlines()) == 1 and "MLFLOW_TRACKING_USERNAME" in err
    assert journal.pending() == kept  # nothing lost

    as_user(monkeypatch, POD)
    main(["tracking", "sync", str(run_dir)])
    as_user(monkeypatch, auth_server.admin)
    client = MlflowClient(auth_server.uri)
    run = client.get_run(rid)
    assert run.info.status == "FINISHED" and [m.step for m in client.get_metric_history(rid, "test/acc")] == [1, 2]
    assert journal.pending() == []


def test_the_read_only_viewer_recipe_of_docs_deploy_md(auth_server, pod_user, monkeypatch):
    from fedcore.deploy.mlflow_auth import AuthApi

    guide = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    for path in ("/api/2.0/mlflow/users/create", "/api/3.0/mlflow/users/permissions/grant"):
        assert path in guide
    assert '\\"resource_id\\": \\"*\\", \\"permission\\": \\"READ\\"' in guide
    viewer = ("viewer", "viewer-test-pw-5d2e8a")
    admin = AuthApi(auth_server.uri, *auth_server.admin)
    admin.ok("POST", "/api/2.0/mlflow/users/create", {"username": viewer[0], "password": viewer[1]})
    for kind in ("experiment", "registered_model"):  # the docs' loop
        admin.ok("POST", "/api/3.0/mlflow/users/permissions/grant",
                 {"username": viewer[0], "resource_type": kind, "resource_id": "*", "permission": "READ"})
    as_user(monkeypatch, viewer)
    client = MlflowClient(auth_server.uri)
    exp = client.get_experiment_by_name(EXPERIMENT)  # made by the setup, not by the viewer
    assert exp is not None and client.search_runs([exp.experiment_id]) is not None
    assert client.get_registered_model(MODEL).name == MODEL
    with pytest.raises(MlflowException) as err:
        client.create_run(exp.experiment_id)
    assert err.value.error_code == "PERMISSION_DENIED"


def test_the_smoke_check_says_when_the_pod_users_credentials_are_refused(auth_server, pod_user):
    from fedcore.deploy.k8s import _check_mlflow

    good = {"MLFLOW_TRACKING_USERNAME": POD[0], "MLFLOW_TRACKING_PASSWORD": POD[1]}
    assert _check_mlflow(auth_server.uri, 10, good) == []
    (problem,) = _check_mlflow(auth_server.uri, 10, {**good, "MLFLOW_TRACKING_PASSWORD": "wrong-one"})
    assert "refused MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (HTTP 401)" in problem

"""The experiment pipeline end to end under kfp.local, through `fedcore pipeline compile` and
`fedcore pipeline run --local --package`: one compiled package, run with run-time inputs."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pytest
import yaml
from mlflow import MlflowClient

from fedcore.cli import main
from fedcore.data.federated import FederatedDataset
from tests.components.test_components import tiny_config

FEDSIR = {"name": "fedsir", "params": {"identify_epochs": 1, "min_class_n": 5, "relabel_every": 2}}
STAGES = ("identify", "relabel", "train", "evaluate")


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """FedSIR on tiny digits, compiled once for 3 rounds; runs go to one sqlite store."""
    root = tmp_path_factory.mktemp("fedsir-pipeline")
    data = tiny_config(root)
    data["train"]["rounds"] = 3
    data["method"] = FEDSIR
    del data["tracking"]  # the CLI turns tracking on; MLFLOW_TRACKING_URI says where
    config = root / "tiny.yaml"
    config.write_text(yaml.safe_dump(data))
    # retries=0: kfp.local honours a task's retry policy, and the default (2 retries, 60 s backoff
    # doubling) would sleep 3 minutes before the failure test below sees its failure.
    main(["pipeline", "compile", "experiment", str(config), "--out", str(root / "experiment.yaml"),
          "--resource", "retries=0"])
    return root


def _store(monkeypatch, root):
    uri = f"sqlite:///{root / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return MlflowClient(uri)


def _runs(client, role):
    exp = client.get_experiment_by_name("fedcore")
    return client.search_runs([exp.experiment_id], f"tags.`fedcore.role` = '{role}'", order_by=["start_time DESC"])


def test_a_compiled_package_runs_each_stage_as_a_task_with_run_time_overrides(package, capsys, monkeypatch):
    client = _store(monkeypatch, package)
    out = package / "run"

    main(["pipeline", "run", "experiment", "--local", "--package", str(package / "experiment.yaml"),
          "--out", str(out), "--set", "train.rounds=2"])

    printed = capsys.readouterr().out
    for stage in STAGES:
        assert f"fedsir-{stage}: success" in printed
    assert "finish-tracking: success" in printed and "fedsir · " in printed  # the comparison table
    (parent,), (child,) = _runs(client, "parent"), _runs(client, "child")
    assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert (parent.info.status, child.info.status) == ("FINISHED", "FINISHED")
    assert parent.info.run_name == "fedsir · sym 0.4 · digits" and parent.data.tags["kfp.run_id"]
    # train.rounds=2 reached the tasks at run time: identify (1 round) + relabel (1) + train (1).
    assert child.data.params["train.rounds"] == "2"
    assert [m.step for m in client.get_metric_history(child.info.run_id, "test/acc")] == [1, 2, 3]
    assert "round" not in child.data.metrics and not any(k.startswith("last/") for k in child.data.metrics)
    assert any(k.startswith("system/") for k in child.data.metrics)
    assert child.inputs.dataset_inputs[0].dataset.name == "digits · sym 0.4 · 4 clients"

    verdicts = json.loads(next(out.glob("kfp/**/identify-stage/verdicts")).read_text())
    assert set(verdicts["client_noisy"]) == {"0", "1", "2", "3"} and verdicts["rounds"] == {"verdicts": 1}
    labels = next(out.glob("kfp/**/relabel-stage/labels"))
    relabeled = json.loads((labels / "relabeled.json").read_text())
    assert relabeled["rounds"].get("labels") == 2  # the relabel stage's round
    # Every client of the relabel round reports its working labels; only noisy ones change theirs.
    noisy = {int(c) for c in verdicts["noisy_clients"]}
    reported = {int(k) for k in relabeled["relabeled"]}
    files = sorted(np.load(labels / "labels.npz").files)
    assert noisy <= reported and files == [f"client_{c:02d}" for c in sorted(reported)]
    assert all(relabeled["relabeled"][str(c)] == 0 for c in reported - noisy)

    fed = FederatedDataset.load(next(out.glob("kfp/**/prepare-data/dataset")))
    served = mlflow.pyfunc.load_model(child.data.tags["model.uri"])
    probs = served.predict((fed.x_test[:8].float() / 255.0).numpy())
    assert probs.shape == (8, fed.num_classes) and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    artifacts = {a.path for d in ("", "evaluation", "reports")
                 for a in client.list_artifacts(child.info.run_id, d or None)}
    assert {"state_dict", "evaluation/curves.png", "reports/scene.png", "history.csv"} <= artifacts


def test_a_failed_task_fails_the_parent_run_and_is_named_on_it(package, capsys, monkeypatch):
    client = _store(monkeypatch, package)

    # fedavg has one stage, the package's tasks were compiled for FedSIR's three: refused at run time.
    with pytest.raises(SystemExit) as exc:
        main(["pipeline", "run", "experiment", "--local", "--package", str(package / "experiment.yaml"),
              "--out", str(package / "bad"), "--set", "method.name=fedavg", "--set", "method.params={}"])

    assert exc.value.code == 2
    assert "recompile" in capsys.readouterr().err
    parent, child = _runs(client, "parent")[0], _runs(client, "child")[0]
    assert (parent.info.status, child.info.status) == ("FAILED", "FAILED")
    assert parent.data.tags["failed_task"] == "fedsir-identify"
    assert "recompile" in parent.data.tags["error"] and child.data.tags["kfp.task"] == "fedsir-identify"

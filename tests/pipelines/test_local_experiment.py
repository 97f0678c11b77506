"""The experiment pipeline end to end under kfp.local, through `fedcore pipeline run --local`."""

from __future__ import annotations

import json

import yaml
from mlflow import MlflowClient

from fedcore.cli import main
from tests.components.test_components import tiny_config

ROUNDS = 3
PER_ROUND = ("test/acc", "test/loss", "train/loss")


def test_experiment_pipeline_runs_locally_and_tracks_every_round(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    data = tiny_config(tmp_path)
    data["train"]["rounds"] = ROUNDS
    del data["tracking"]  # the CLI turns tracking on and pins the embedded store under --out
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "run"

    main(["pipeline", "run", "experiment", str(config), "--local", "--out", str(out)])

    printed = capsys.readouterr().out
    assert "fedavg-train: success" in printed and "fedavg-evaluate: success" in printed
    assert "mlflow ui --backend-store-uri sqlite:///" in printed
    client = MlflowClient(f"sqlite:///{out.resolve() / 'mlruns' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("fedcore")
    runs = {r.data.tags.get("fedcore.role"): r for r in client.search_runs([exp.experiment_id])}
    parent, child = runs["parent"], runs["child"]
    assert child.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert (parent.info.status, child.info.status) == ("FINISHED", "FINISHED")
    assert child.info.run_name == "fedavg · sym 0.4 · seed 0"
    for name in PER_ROUND:
        assert [m.step for m in client.get_metric_history(child.info.run_id, name)] == list(range(1, ROUNDS + 1))
    params, tags = child.data.params, child.data.tags
    manifest = json.loads(next(out.glob("kfp/**/prepare-data/dataset/manifest.json")).read_text())
    assert params["data_sha256"] == manifest["files"]["data.pt"]
    assert {"config_hash", "fedcore_version", "git_commit", "train.rounds"} <= set(params)
    assert (tags["method"], tags["dataset"], tags["noise_type"], tags["noise_scope"]) == (
        "fedavg", "digits", "symmetric", "globalized")
    artifacts = {a.path for d in ("", "checkpoints/train", "model", "evaluation", "reports")
                 for a in client.list_artifacts(child.info.run_id, d or None)}
    assert {"checkpoints/train/stage-train.pt", "model/state_dict.pth", "evaluation/curves.png",
            "evaluation/confusion.png", "reports/scene.json", "reports/scene.png", "history.csv"} <= artifacts

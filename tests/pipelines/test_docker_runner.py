"""--runner docker's settings, without Docker: the hardened pod's flags, the options, the env file."""

from __future__ import annotations

import pytest

from fedcore.errors import UserError
from pipelines.docker import DockerTasks, from_options, read_env_file


def test_every_task_gets_a_hardened_pods_flags():
    args = DockerTasks("img:1", network="fedcore-stack", env={"MLFLOW_TRACKING_URI": "http://mlflow:5000"}).run_args()
    assert args["user"] == "10001:10001"
    assert args["read_only"] is True and "/tmp" in args["tmpfs"]
    assert args["cap_drop"] == ["ALL"] and args["security_opt"] == ["no-new-privileges"]
    assert args["network_mode"] == "fedcore-stack"
    # The subprocess runner's one intra-op thread, so both runners sum floats in the same order.
    assert args["environment"] == {"OMP_NUM_THREADS": "1", "MLFLOW_TRACKING_URI": "http://mlflow:5000"}
    assert DockerTasks("img:1").run_args()["network_mode"] == "none"


def test_runner_options(tmp_path, monkeypatch):
    monkeypatch.delenv("FEDCORE_IMAGE", raising=False)
    assert from_options({"runner": "subprocess"}) is None
    tasks = from_options({"runner": "docker", "network": "none"})
    assert tasks.image == "ghcr.io/fedcore/fedcore:0.1.0" and tasks.env == {}
    with pytest.raises(UserError, match="not one of: subprocess, docker"):
        from_options({"runner": "podman"})
    with pytest.raises(UserError, match="--image applies to --runner docker only"):
        from_options({"runner": "subprocess", "image": "x:1"})
    with pytest.raises(UserError, match="drop --image"):
        from_options({"runner": "docker", "image": "x:1", "package": tmp_path / "p.yaml"})


def test_env_file(tmp_path):
    f = tmp_path / "tasks.env"
    f.write_text("# the stack\nexport A=1\nB='two words'\n\nC=\"x=y\"\n")
    assert read_env_file(f) == {"A": "1", "B": "two words", "C": "x=y"}
    f.write_text("A=1\nnot a pair\n")
    with pytest.raises(UserError, match="line 2 is not KEY=VALUE"):
        read_env_file(f)
    with pytest.raises(UserError, match="cannot be read"):
        read_env_file(tmp_path / "absent.env")

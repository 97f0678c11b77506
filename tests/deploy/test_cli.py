"""`fedcore deploy ...` through the real typer app and the real `main` wrapper."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fedcore import cli
from fedcore.deploy import env
from fedcore.deploy import k8s as deploy

from .conftest import containers

runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_image_override(monkeypatch):
    monkeypatch.delenv("FEDCORE_IMAGE", raising=False)


def test_render_gpu_prints_gpu_scheduling():
    result = runner.invoke(cli.app, ["deploy", "render", "--overlay", "gpu"])
    assert result.exit_code == 0, result.output
    objects = deploy.load_objects(result.stdout)
    text = result.stdout
    assert f"{env.GPU_RESOURCE}: 1" in text and "tolerations:" in text and "nodeSelector:" in text
    assert any(o["kind"] == "Namespace" and o["metadata"]["name"] == env.K8S_NAMESPACE for o in objects)


def test_render_defaults_to_local_which_has_no_gpu():
    result = runner.invoke(cli.app, ["deploy", "render"])
    assert result.exit_code == 0, result.output
    assert env.GPU_RESOURCE + ":" not in result.stdout and "tolerations:" not in result.stdout
    assert deploy.load_objects(result.stdout)


def test_render_out_writes_the_file(tmp_path):
    out = tmp_path / "gpu.yaml"
    result = runner.invoke(cli.app, ["deploy", "render", "--overlay", "gpu", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert deploy.load_objects(out.read_text()) == deploy.load_objects(deploy.render("gpu"))
    assert "wrote" in result.stderr


def test_unknown_overlay_is_a_usage_error():
    result = runner.invoke(cli.app, ["deploy", "render", "--overlay", "tpu"])
    assert result.exit_code == 2


def test_missing_kubectl_is_one_line_user_error(monkeypatch, capsys):
    monkeypatch.setattr(deploy, "find_kubectl", lambda: None)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["deploy", "render", "--overlay", "gpu"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: kubectl") and "ensure-kubectl.sh" in err and "\n" not in err


def test_missing_k8s_dir_is_a_user_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["deploy", "render", "--k8s-dir", str(tmp_path)])
    assert exit_info.value.code == 2
    assert "kustomization.yaml is missing" in capsys.readouterr().err


def test_check_passes_on_the_repo_overlays():
    result = runner.invoke(cli.app, ["deploy", "check", "--overlay", "local", "--k8s-version", "1.33.0"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "local: ok\nworkloads (TrainJob, Katib Experiment): ok"


def test_check_fails_and_lists_problems(monkeypatch):
    monkeypatch.setattr(deploy, "policy_violations", lambda objects: ["Deployment/x: container c: is privileged"])
    result = runner.invoke(cli.app, ["deploy", "check", "--overlay", "gpu"])
    assert result.exit_code == 1
    assert "gpu: 1 problem(s)" in result.stdout and "is privileged" in result.stdout


def test_k8s_root_is_found_from_a_subdirectory(monkeypatch):
    from .conftest import K8S, REPO

    monkeypatch.chdir(REPO / "k8s" / "overlays")
    assert deploy.k8s_root() == K8S


def test_render_uses_fedcore_image_for_the_project_image(monkeypatch):
    monkeypatch.setenv("FEDCORE_IMAGE", "registry.example.com/team/fedcore:0.1.0-rc1")
    result = runner.invoke(cli.app, ["deploy", "render", "--overlay", "gpu"])
    assert result.exit_code == 0, result.output
    images = {c["image"] for o in deploy.load_objects(result.stdout) for c in containers(o)}
    assert "registry.example.com/team/fedcore:0.1.0-rc1" in images and env.DEFAULT_IMAGE not in images
    assert env.MLFLOW_IMAGE in images


# -- through `main`, as the installed `fedcore` command runs (CliRunner uses click's standalone mode) --


def test_failed_check_exits_1_through_main(monkeypatch, capsys):
    # main() calls the app without standalone mode, where click returns typer.Exit's code
    # instead of exiting with it: a failing check used to exit 0.
    monkeypatch.setattr(deploy, "policy_violations", lambda objects: ["Deployment/x: container c: is privileged"])
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["deploy", "check", "--overlay", "local", "--k8s-version", "1.33.0"])
    assert exit_info.value.code == 1
    assert "local: 1 problem(s)" in capsys.readouterr().out


def test_failed_smoke_exits_1_through_main(monkeypatch, capsys):
    for name in env.REQUIRED_FOR_STACK:
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["deploy", "smoke"])
    assert exit_info.value.code == 1
    assert "FAIL MLFLOW_TRACKING_URI is not set" in capsys.readouterr().out


def test_passing_check_returns_normally_through_main(capsys):
    cli.main(["deploy", "check", "--overlay", "local", "--k8s-version", "1.33.0"])
    assert capsys.readouterr().out.strip() == "local: ok\nworkloads (TrainJob, Katib Experiment): ok"


def test_unknown_k8s_version_is_one_line_user_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["deploy", "check", "--overlay", "local", "--k8s-version", "9.99.0"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: Kubernetes version '9.99.0'") and "--k8s-version" in err and "\n" not in err


def test_render_out_onto_a_folder_is_refused_and_keeps_it(tmp_path, capsys):
    folder = tmp_path / "manifests"
    folder.mkdir()
    (folder / "mine.yaml").write_text("kept")
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["deploy", "render", "--out", str(folder)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "is a folder; pass a file path" in err and "\n" not in err
    assert (folder / "mine.yaml").read_text() == "kept"


def test_render_out_creates_missing_folders(tmp_path):
    out = tmp_path / "new" / "dir" / "gpu.yaml"
    cli.main(["deploy", "render", "--overlay", "gpu", "--out", str(out)])
    assert deploy.load_objects(out.read_text()) == deploy.load_objects(deploy.render("gpu"))
    assert [p.name for p in out.parent.iterdir()] == ["gpu.yaml"]  # no temp file left behind

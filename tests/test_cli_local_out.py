"""Output folders are local: an s3:// (or other scheme://) --out is refused in one line, never
written as a local folder named 's3:' (issue 53, defect 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedcore import cli

CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")


@pytest.mark.parametrize("argv", [
    ["run", CONFIG, "--no-progress", "--out", "s3://nobucket/run"],
    ["run", CONFIG, "--no-progress", "--resume", "s3://nobucket/run"],
    ["tune", CONFIG, "--no-progress", "--out", "s3://nobucket/tune"],
    ["report", "runs/x", "--out", "gs://nobucket/report"],
    ["data", "prepare", CONFIG, "--out", "s3://nobucket/art"],
    ["pipeline", "run", "experiment", CONFIG, "--local", "--out", "s3://nobucket/pipe"],
])
def test_a_remote_out_is_refused_and_nothing_is_written(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1, err
    assert "://nobucket/" in err and "local folder" in err
    assert not list(tmp_path.iterdir())  # no './s3:/nobucket/...'


@pytest.fixture
def captured_run(monkeypatch):
    """`pipelines.runner.run_local` replaced by a recorder: what the CLI would run, without running it."""
    from types import SimpleNamespace

    import pipelines.runner

    calls: list[dict] = []

    def record(pipeline, root, **kwargs):
        calls.append({"root": root, **kwargs})
        return SimpleNamespace(records=[])

    monkeypatch.setattr(pipelines.runner, "run_local", record)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return calls


def _compile(tmp_path, *extra):
    package = tmp_path / "pkg" / "experiment.yaml"
    cli.main(["pipeline", "compile", "experiment", CONFIG, "--out", str(package), *extra])
    return package


def test_a_package_run_keeps_its_mlflow_store_under_out(tmp_path, monkeypatch, captured_run, capsys):
    """Issue 71.2: with --package the tasks' embedded store was ./mlruns of the working directory."""
    package = _compile(tmp_path)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)

    cli.main(["pipeline", "run", "experiment", "--local", "--package", str(package), "--out", "runs/pkg"])

    (call,) = captured_run
    store = (cwd / "runs" / "pkg" / "mlruns").resolve()
    assert f'tracking.uri="sqlite:///{store / "mlflow.db"}"' in call["overrides"]
    assert f'tracking.artifact_location="{store / "artifacts"}"' in call["overrides"]
    assert f"--backend-store-uri sqlite:///{store / 'mlflow.db'}" in capsys.readouterr().out


def test_a_package_run_keeps_the_compiled_set_list_and_a_named_store(tmp_path, monkeypatch, captured_run):
    package = _compile(tmp_path, "--set", "train.rounds=3")
    monkeypatch.chdir(tmp_path)

    cli.main(["pipeline", "run", "experiment", "--local", "--package", str(package), "--out", "a"])
    cli.main(["pipeline", "run", "experiment", "--local", "--package", str(package), "--out", "b",
              "--set", "tracking.uri=http://mlflow.example:5000"])
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    cli.main(["pipeline", "run", "experiment", "--local", "--package", str(package), "--out", "c"])

    compiled, named, from_env = (call.get("overrides") for call in captured_run)
    assert compiled[0] == "train.rounds=3" and compiled[1].startswith("tracking.uri=")  # run-time list replaces
    assert named == ["tracking.uri=http://mlflow.example:5000"]  # the user's store wins
    assert from_env is None  # the tasks inherit MLFLOW_TRACKING_URI: the compiled default stays as it is

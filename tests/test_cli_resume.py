"""Resuming from the run dir alone (issue 71): `fedcore run --resume RUN` and `fedcore resume RUN`
read RUN's own config.yaml, which a run writes when it starts; a config given as well is checked
against it, in one line, before anything is loaded."""

from __future__ import annotations

import json

import pytest

from fedcore import cli
from fedcore.data.build import build
from fedcore.registries import load_config

# The tiny quickstart run the engine's resume tests use.
from tests.engine.test_resume_paths import CONFIG, TINY


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return build(load_config(CONFIG, TINY)).save(tmp_path_factory.mktemp("data") / "art")


def _sets(items: list[str]) -> list[str]:
    return [a for s in items for a in ("--set", s)]


def _fails(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


@pytest.fixture
def interrupted(tmp_path, artifact, monkeypatch):
    """A run dir killed at its end: checkpoints of both rounds, no metrics.json."""
    import fedcore.run

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    run = tmp_path / "run"
    with monkeypatch.context() as m:
        m.setattr(fedcore.run, "write_outputs", killed)
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["run", CONFIG, "--data", str(artifact), "--no-progress", "--out", str(run), *_sets(TINY)])
    assert exit_info.value.code == 130 and not (run / "metrics.json").exists()
    return run


def test_an_interrupted_run_recorded_its_config_when_it_started(interrupted):
    assert load_config(interrupted / "config.yaml").config_hash() == load_config(CONFIG, TINY).config_hash()


@pytest.mark.parametrize("command", [["run", "--resume"], ["resume"]])
def test_a_run_dir_alone_resumes_with_its_own_config(interrupted, artifact, command):
    cli.main([*command, str(interrupted), "--data", str(artifact), "--no-progress"])
    metrics = json.loads((interrupted / "metrics.json").read_text())
    assert metrics["rounds"] == 2
    assert metrics["config_hash"] == load_config(CONFIG, TINY).config_hash()


def test_set_extends_a_finished_run_resumed_from_its_dir(interrupted, artifact):
    cli.main(["resume", str(interrupted), "--data", str(artifact), "--no-progress"])
    cli.main(["run", "--resume", str(interrupted), "--data", str(artifact), "--no-progress",
              "--set", "train.rounds=3"])
    assert json.loads((interrupted / "metrics.json").read_text())["rounds"] == 3
    assert load_config(interrupted / "config.yaml").train.rounds == 3  # what a next resume reads


def test_a_given_config_that_matches_the_run_is_accepted(interrupted, artifact):
    cli.main(["run", CONFIG, "--resume", str(interrupted), "--data", str(artifact), "--no-progress", *_sets(TINY)])
    assert json.loads((interrupted / "metrics.json").read_text())["rounds"] == 2


def test_a_given_config_other_than_the_runs_is_refused_naming_the_key(interrupted, capsys):
    before = sorted(p.name for p in (interrupted / "checkpoints").iterdir())
    err = _fails(["run", CONFIG, "--resume", str(interrupted), "--no-progress",
                  *_sets([*TINY, "method.name=fedprox"])], capsys)
    assert f"is not the config '{interrupted}' ran" in err and "method.name" in err
    assert f"fedcore run --resume {interrupted}" in err
    assert sorted(p.name for p in (interrupted / "checkpoints").iterdir()) == before


def test_a_run_dir_without_a_recorded_config_asks_for_the_config(tmp_path, capsys):
    run = tmp_path / "old"
    (run / "checkpoints").mkdir(parents=True)
    err = _fails(["run", "--resume", str(run)], capsys)
    assert f"'{run}' holds no config.yaml" in err and f"fedcore run CONFIG --resume {run}" in err


def test_no_config_and_no_resume_is_one_line(capsys):
    assert "or --resume RUN" in _fails(["run"], capsys)

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

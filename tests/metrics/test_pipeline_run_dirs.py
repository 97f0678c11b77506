"""`fedcore compare` and `fedcore report` take the run dir `fedcore pipeline run --local --out DIR`
prints, whose runs sit under DIR/kfp/<pipeline run>/<task>/checkpoint/ (issue 53, defect 5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fedcore import cli

CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml")
PIPELINE_RUN = "fedcore-experiment-2026-12-06-04-54-23-622660"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "fedavg"
    cli.main(["run", CONFIG, "--out", str(out), "--no-progress", *[a for s in (
        "train.rounds=3", "train.threads=1", "tracking.backend=none", "train.memorization=false")
        for a in ("--set", s)]])
    return out


def _pipeline_dir(root: Path, run: Path, names=(PIPELINE_RUN,)) -> Path:
    """The layout kfp.local leaves: a stage task's run dir per stage, plus MLflow's copy of metrics.json."""
    for name in names:
        last = root / "kfp" / name / "run-stage-2" / "checkpoint"
        shutil.copytree(run, last)
        first = root / "kfp" / name / "run-stage" / "checkpoint"  # an earlier stage of the same run
        shutil.copytree(run, first)
        rec = json.loads((first / "metrics.json").read_text())
        (first / "metrics.json").write_text(json.dumps({**rec, "rounds": 1, "summary": {"final/acc": 0.01}}))
    copy = root / "mlruns" / "artifacts" / "abc" / "artifacts"
    copy.mkdir(parents=True)
    shutil.copy(run / "metrics.json", copy / "metrics.json")
    return root


def test_compare_and_report_read_a_pipeline_run_dir(run, tmp_path, capsys):
    pipe = _pipeline_dir(tmp_path / "pipe", run)
    capsys.readouterr()
    cli.main(["compare", str(pipe)])
    table = capsys.readouterr().out
    assert "fedavg" in table and table.count("│ fedavg") == 1  # the last stage's run only, once
    final = json.loads((run / "metrics.json").read_text())["summary"]["final/acc"]
    assert f" {100 * final:.1f} " in table  # in %, from the last stage's summary
    assert " 1.0 " not in table  # not the earlier stage's partial one (final/acc 0.01)
    cli.main(["report", str(pipe), "--out", str(tmp_path / "rep")])
    page = (tmp_path / "rep" / "report.md").read_text()
    assert sum(line.startswith("| fedavg ") for line in page.splitlines()) == 1


def test_a_dir_of_several_pipeline_runs_names_them(run, tmp_path, capsys):
    second = PIPELINE_RUN.replace("04-54", "05-10")
    pipe = _pipeline_dir(tmp_path / "pipe", run, (PIPELINE_RUN, second))
    with pytest.raises(SystemExit) as exc:
        cli.main(["compare", str(pipe)])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1
    assert PIPELINE_RUN in err and second in err and "pass one of them" in err
    cli.main(["compare", str(pipe / "kfp" / second)])  # one pipeline run is fine

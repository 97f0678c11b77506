"""`--resume` as the README promises it (issue 53, defect 4): a run dir whose latest.pt is damaged
resumes from the verified checkpoint that got furthest, with one warning naming the damaged file,
and a checkpoint file resumes into the run dir it belongs to (not a new runs/<method>-<hash>)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fedcore import cli
from fedcore.data.build import build
from fedcore.registries import load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG = str(ROOT / "configs" / "quickstart.yaml")
TINY = ["train.device=cpu", "train.rounds=2", "partition.num_clients=4", "data.max_train=200",
        "train.local_epochs=1", "train.checkpoint_every=1", "train.client_fraction=0.5", "tracking.backend=none",
        "train.memorization=false"]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return build(load_config(CONFIG, TINY)).save(tmp_path_factory.mktemp("data") / "art")


def _run(artifact: Path, *argv: str, rounds: int = 2) -> None:
    sets = [a for s in [*TINY, f"train.rounds={rounds}"] for a in ("--set", s)]
    cli.main(["run", CONFIG, "--data", str(artifact), "--no-progress", *sets, *argv])


def _damage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))


def test_a_damaged_latest_falls_back_to_the_furthest_verified_checkpoint(tmp_path, artifact, caplog):
    run = tmp_path / "run"
    _run(artifact, "--out", str(run))
    _damage(run / "checkpoints" / "latest.pt")
    with caplog.at_level("WARNING"):
        _run(artifact, "--resume", str(run), rounds=3)
    warnings = [r.getMessage() for r in caplog.records if r.getMessage().startswith("warning:")]
    assert len(warnings) == 1 and str(run / "checkpoints" / "latest.pt") in warnings[0], warnings
    assert "stage-train.pt" in warnings[0] and "round 2" in warnings[0]
    assert json.loads((run / "metrics.json").read_text())["rounds"] == 3


def test_resuming_from_a_checkpoint_file_continues_in_its_run_dir(tmp_path, artifact, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    _run(artifact, "--out", str(run))
    _run(artifact, "--resume", str(run / "checkpoints" / "stage-train.pt"), rounds=3)
    assert json.loads((run / "metrics.json").read_text())["rounds"] == 3
    assert not (tmp_path / "runs").exists()  # no new runs/<method>-<hash> beside it


def test_resuming_with_another_config_names_the_keys_that_differ(tmp_path, artifact, capsys):
    run = tmp_path / "run"
    _run(artifact, "--out", str(run))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        _run(artifact, "--resume", str(run), "--set", "method.name=fedprox", "--set", "train.lr=0.2")
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1, err
    assert "method.name: fedavg (run) vs fedprox" in err and "train.lr: 0.05 (run) vs 0.2" in err
    assert not re.search(r"\b[0-9a-f]{16}\b", err), err  # no config hashes

"""A rerun into an OUT that another grid filled is refused by name (exit 2), not reported as this
grid's: a scene's `set` edited between runs, `start_at_default` switched, a tune whose best.yaml moved
under its finished tuned runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedcore import cli
from fedcore.bench.grid import load_grid
from fedcore.bench.plan import plan_grid
from fedcore.bench.stale import stale

ROOT = Path(__file__).resolve().parents[2]
SET = ["train.rounds=2", "train.device=cpu", "tracking.backend=none", "train.memorization=false"]


def _grid(tmp: Path, name: str, extra_set=(), **extra) -> Path:
    grid = {"scenes": {"tiny": {"config": str(ROOT / "configs/quickstart.yaml"), "set": [*SET, *extra_set]}},
            "methods": ["fedavg"], "trials": 1, "tuning_seed": 100, "seeds": [0], **extra}
    path = tmp / name
    path.write_text(yaml.safe_dump(grid))
    return path


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("stale")
    grid, out = _grid(tmp, "grid.yaml"), tmp / "out"
    cli.main(["bench", str(grid), "--out", str(out), "--no-progress"])
    return tmp, out


def _refused(argv: list[str], capsys) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", *argv])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err and "Traceback" not in err
    return err


def test_the_same_grid_reruns_as_done(filled, capsys):
    tmp, out = filled
    jobs = [j for first, after in [plan_grid(load_grid(tmp / "grid.yaml"), out, [])]
            for j in [*first, *(j for js in after.values() for j in js)]]
    assert len(jobs) == 3 and [stale(j) for j in jobs] == [None, None, None]
    cli.main(["bench", str(tmp / "grid.yaml"), "--out", str(out), "--dry-run"])
    assert "nothing left to run" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--dry-run", "--so-far", None])
def test_an_edited_scene_is_refused_by_key_and_nothing_is_written(filled, capsys, flag):
    tmp, out = filled
    before = (out / "bench.json").read_bytes()
    edited = _grid(tmp, "edited.yaml", extra_set=["train.batch_size=16"])
    err = _refused([str(edited), "--out", str(out), "--no-progress", *([flag] if flag else [])], capsys)
    assert "holds work of another grid" in err and "train.batch_size: 32 (on disk) vs 16" in err
    assert f"{out / 'tiny' / 'fedavg' / 'tune'}" in err  # the first finished job checked: the tune
    assert (out / "bench.json").read_bytes() == before


def test_a_tune_started_otherwise_is_refused(filled, capsys):
    tmp, out = filled
    err = _refused([str(_grid(tmp, "started.yaml", start_at_default=False)), "--out", str(out)], capsys)
    assert "start_at_default: true (on disk) vs false" in err  # true: the grids' default


def test_a_tuned_run_of_an_earlier_best_is_stale(filled):
    tmp, out = filled
    first, after = plan_grid(load_grid(tmp / "grid.yaml"), out, [])
    tune = next(j for j in first if j.kind == "tune")
    tuned = after[tune][0]
    best = out / "tiny" / "fedavg" / "tune" / "best.yaml"
    text = best.read_text()
    cfg = yaml.safe_load(text)
    try:  # as a tune extended by a later rerun leaves it: another best setting
        cfg["train"]["lr"] = 0.0123
        best.write_text(yaml.safe_dump(cfg))
        assert "train.lr:" in stale(tuned) and "(on disk) vs 0.0123" in stale(tuned)
    finally:
        best.write_text(text)
    assert stale(tuned) is None
    metrics = json.loads((tuned.out / "metrics.json").read_text())
    assert metrics["config_hash"]  # what the check compares, recorded by every run

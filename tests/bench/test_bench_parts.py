"""A grid in parts: `fedcore bench GRID --scenes` runs some of its scenes, each part a whole bench of
the scenes it names, and `fedcore bench-table A B` reads the parts together as one OUT. (Joining
parts into one portable record is the lab's: lab/bench_record.py, lab/tests/test_bench_record.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedcore import cli
from fedcore.bench.grid import load_grid
from fedcore.errors import ConfigError
from fedcore.tracking import git_commit

ROOT = Path(__file__).resolve().parents[2]


def _grid(tmp_path: Path) -> Path:
    """configs/grids/tiny.yaml's scene twice (two shares of noisy clients), FedAvg alone, one trial."""
    tiny = yaml.safe_load((ROOT / "configs/grids/tiny.yaml").read_text())
    base = tiny["scenes"]["quickstart-tiny"]
    base["config"] = str(ROOT / base["config"])
    grid = {**tiny, "methods": ["fedavg"], "trials": 1,
            "scenes": {"low": base, "high": {**base, "set": [*base["set"], "noise.noisy_client_fraction=0.3"]}}}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


def run_in_parts(tmp: Path) -> tuple[Path, Path, Path]:
    """(grid, OUT of scene 'low', OUT of scene 'high'): the grid run in two parts (lab/tests joins them)."""
    grid = _grid(tmp)
    for scene in ("low", "high"):
        cli.main(["bench", str(grid), "--scenes", scene, "--out", str(tmp / scene), "--no-progress"])
    return grid, tmp / "low", tmp / "high"


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> tuple[Path, Path, Path]:
    return run_in_parts(tmp_path_factory.mktemp("parts"))


def test_scenes_narrow_a_grid_in_the_order_given_and_refuse_an_unknown_name(tmp_path):
    grid = _grid(tmp_path)
    assert list(load_grid(grid, scenes=["high", "low"]).scenes) == ["high", "low"]
    assert list(load_grid(grid, scenes=["high"]).scenes) == ["high"]
    with pytest.raises(ConfigError, match="no scene 'mid'; its scenes: low, high"):
        load_grid(grid, scenes=["mid"])
    with pytest.raises(ConfigError, match="twice"):
        load_grid(grid, scenes=["low", "low"])


def test_each_part_runs_only_its_scene(parts):
    _, low, high = parts
    assert list(json.loads((low / "bench.json").read_text())["scenes"]) == ["low"]
    assert list(json.loads((high / "bench.json").read_text())["scenes"]) == ["high"]
    assert not (low / "high").exists() and not (high / "low").exists()


def test_each_scene_names_the_commit_that_wrote_it(parts):
    _, low, _ = parts
    scene = json.loads((low / "bench.json").read_text())["scenes"]["low"]
    assert scene["commit"] == git_commit() and scene["commit"] != "unknown"


def test_bench_table_reads_the_parts_together_and_refuses_a_scene_given_twice(parts, capsys):
    _, low, high = parts
    cli.main(["bench-table", str(low), str(high), "--summary"])
    table = capsys.readouterr().out
    assert "low" in table and "high" in table
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench-table", str(low), str(low)])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and "scene 'low'" in err

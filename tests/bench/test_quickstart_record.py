"""The shipped quickstart sweep is what `fedcore bench experiments/grids/quickstart.yaml` wrote.

docs/results/bench/quickstart.json is that run's bench.json (run dirs made relative). The full grid
takes about 4 minutes of two cores, too long for the suite, so the tests check the chain from the
record instead: its grid is the grid file, its tunes give configs/sweeps/quickstart_tuned.yaml
exactly, and its choice is what the rule computes from its rows.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from fedcore.bench.choice import choose
from fedcore.bench.grid import load_grid
from fedcore.bench.sweepfile import tuned_sweep

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs/results/bench/quickstart.json"


def _scene() -> tuple[dict, dict]:
    bench = json.loads(RECORD.read_text())
    return bench, bench["scenes"]["quickstart"]


def test_the_record_was_run_from_the_shipped_grid():
    bench, _ = _scene()
    grid = load_grid(ROOT / "experiments/grids/quickstart.yaml")
    assert bench["grid"]["methods"] == list(grid.methods)
    assert (bench["grid"]["trials"], bench["grid"]["tuning_seed"]) == (grid.trials, grid.tuning_seed)
    assert bench["grid"]["seeds"] == list(grid.seeds)
    assert bench["grid"]["validation_fraction"] == grid.validation_fraction


def test_the_shipped_tuned_sweep_is_the_records_tunes_to_the_digit():
    _, scene = _scene()
    shipped = yaml.safe_load((ROOT / "configs/sweeps/quickstart_tuned.yaml").read_text())
    fixed = {m: t["fixed"] for m, t in scene["tuned"].items()}
    # Every row of this grid is a registered method, so the chosen row is its own method.
    assert shipped == tuned_sweep(scene["tuned"], fixed, selected=(scene["choice"], scene["choice"]))


def test_the_records_choice_follows_from_its_rows():
    bench, scene = _scene()
    got = choose(scene["rows"], bench["grid"]["seeds"])
    assert (got["choice"], got["runner_up"]) == (scene["choice"], scene["runner_up"])
    assert got["margin"] == scene["margin"]

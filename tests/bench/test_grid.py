"""Bench grids that would make an unfair or unreadable comparison are refused in one line (exit 2),
before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedcore import cli
from fedcore.bench.grid import load_grid
from fedcore.bench.plan import plan_grid

ROOT = Path(__file__).resolve().parents[2]
TINY = yaml.safe_load((ROOT / "configs/grids/tiny.yaml").read_text())


def _grid(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({**TINY, **changes}))
    return path


def _fails(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", *argv])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in captured.err
    return err


@pytest.mark.parametrize(("changes", "extra", "says"), [
    ({"methods": ["fedavg", "fedsirr"]}, [], "unknown method 'fedsirr' (did you mean 'fedsir'?); choose"),
    ({"methods": ["fedgr-robst"]}, [], "unknown method 'fedgr-robst' (did you mean 'fedgr-robust'?)"),
    ({}, ["--methods", "fedavg,nope"], "unknown method 'nope'"),
    ({"variants": {"fedgr-clean": {"method": "fedgr", "set": ["noise.type=none"]}}, "methods": ["fedgr-clean"]}, [],
     "variant 'fedgr-clean' changes the data its scene shares between methods (noise.type=none)"),
    ({"variants": {"v": {"method": "fedavg", "set": ["seed=3"]}}, "methods": ["v"]}, [], "changes the data"),
    ({}, ["--set", "method.name=fedprox"], "--set sets method.name=fedprox"),
    ({}, ["--set", "data.seed=1"], "--set sets data.seed=1"),
    ({"scenes": {"s": {"config": "configs/quickstart.yaml", "set": ["method.params.mu=0.1"]}}}, [],
     "scene 's' set sets method.params.mu=0.1"),
    ({"seeds": []}, [], "at 'seeds'"),
    ({}, ["--seeds", ","], "--seed ',' names nothing"),
    ({}, ["--seeds", "a"], "--seed 'a'"),
    ({"seeds": [0, 100]}, [], "tuning_seed 100 is also a reporting seed"),
    ({"trials": 0}, [], "at 'trials'"),
    ({"scenes": {"s": {"config": "configs/nope.yaml"}}}, [], "config 'configs/nope.yaml' not found"),
    ({"scenes": {"../up": {"config": "configs/quickstart.yaml"}}}, [], "plain folder name"),
    ({"method": ["fedavg"]}, [], "at 'method'"),
])
def test_a_bad_grid_is_refused_in_one_line(tmp_path, capsys, changes, extra, says):
    out = tmp_path / "out"
    assert says in _fails([str(_grid(tmp_path, **changes)), "--out", str(out), *extra], capsys)
    assert not out.exists()  # refused before anything was written


def test_a_bad_method_param_in_a_variant_fails_at_planning(tmp_path, capsys):
    grid = _grid(tmp_path, variants={"fedprox-x": {"method": "fedprox", "set": ["method.params.mux=1"]}},
                 methods=["fedprox-x"])
    err = _fails([str(grid), "--out", str(tmp_path / "out")], capsys)
    # Issue 71: the message names the variant the user wrote, not only the method under it.
    assert "'method.params.mux': unknown key (did you mean 'method.params.mu'?)" in err
    assert err.endswith("(variant 'fedprox-x' of method 'fedprox', set: method.params.mux=1)")
    assert "(method 'fedprox')" not in err


def test_rows_switch_method_and_variants_keep_their_fixed_params(tmp_path):
    grid = load_grid(_grid(tmp_path, methods=["fedavg", "fedgr-robust"]), shared=["train.rounds=2"])
    first, after = plan_grid(grid, tmp_path / "out", ["train.rounds=2"])
    tunes = [j for j in first if j.kind == "tune"]
    assert [j.row for j in tunes] == ["fedavg", "fedgr-robust"]
    robust = tunes[1].overrides
    # The switch (which drops the preset's method params), then the fixed params, then the tuning seed.
    assert robust[-4:] == ("method.params={}", "train.stage_rounds={}", "method.params.profile=robust", "seed=100")
    assert "train.rounds=2" in robust and "data.validation.fraction=0.1" in robust
    assert tunes[0].overrides[-1] == "seed=100" and "method.name=fedavg" not in tunes[0].overrides
    tuned = after[tunes[1]]
    assert [(j.setting, j.seed, j.config.endswith("fedgr-robust/tune/best.yaml")) for j in tuned] == [
        ("tuned", 0, True)]
    # Every run of a seed reads the same artifact.
    assert {j.data for j in [*first, *tuned] if j.kind == "run"} == {tmp_path / "out" / "quickstart-tiny" / "data-s0"}


def test_scene_left_sums_each_scenes_missing_trials_and_runs_and_omits_finished_scenes():
    from fedcore.bench.plan import scene_left

    todo = [{"scene": "a", "row": "fedavg", "trials": [8, 8], "default": [3, 3], "tuned": [1, 3]},
            {"scene": "a", "row": "fedrg", "trials": [5, 8], "default": [0, 3], "tuned": [0, 3]},
            {"scene": "b", "row": "fedavg", "trials": [8, 8], "default": [3, 3], "tuned": [3, 3]}]
    assert scene_left(todo) == {"a": {"tune_trials": 3, "runs": 8}}

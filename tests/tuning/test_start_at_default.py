"""`fedcore tune --start-at-default` (and a grid's `start_at_default`): the first trial is the config's
own setting, so a tune ends there or at a setting that beat it on validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedcore import cli
from fedcore.bench.grid import load_grid
from fedcore.bench.plan import plan_grid
from fedcore.errors import ConfigError
from fedcore.methods.registry import available_methods, validate_method_config
from fedcore.registries import load_config
from fedcore.tuning.space import default_point, search_space
from tests.tuning.test_tune import CONFIG, _sets, _trials

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("optimizer", "lr"), [("sgd", 0.05), ("adam", 1e-3)])
def test_every_methods_own_setting_lies_inside_its_tune_ranges(optimizer, lr):
    # A method default outside its range could not start a tune: every shipped method must be startable
    # (at a learning rate of the optimizer's usual scale: the quickstart's 0.05 is an SGD rate).
    for name in available_methods():
        cfg = load_config(CONFIG, [f"method.name={name}", f"train.optimizer={optimizer}", f"train.lr={lr}"])
        dims = search_space(cfg)
        point = default_point(cfg, dims)
        assert list(point) == [d.path for d in dims]
        tree = {**cfg.model_dump(), "method": {"params": validate_method_config(cfg).model_dump()}}
        assert point["train.lr"] == tree["train"]["lr"]
        for d in dims:
            section, *rest = d.path.split(".")
            value = tree[section]
            for part in rest:
                value = value[part]
            assert point[d.path] == value and type(point[d.path]) is (int if d.integer else float), (name, d.path)


def test_a_setting_outside_its_range_is_refused_by_name():
    cfg = load_config(CONFIG, ["method.name=fedprox", "method.params.mu=5.0"])
    with pytest.raises(ConfigError, match=r"method.params.mu=5 lies outside its tune range float in \[0.001, 1\]"):
        default_point(cfg, search_space(cfg))
    assert default_point(cfg, search_space(cfg, ["lr"])) == {"train.lr": cfg.train.lr}  # only the tuned dims


def test_trial_0_is_the_configs_setting_and_a_rerun_must_keep_the_flag(tmp_path, capsys):
    out = tmp_path / "tune"
    sets = _sets(["train.lr=0.03", "train.momentum=0.5"])
    cli.main(["tune", CONFIG, *sets, "--trials", "3", "--out", str(out), "--no-progress", "--start-at-default"])
    first, *rest = _trials(out)
    assert first.params == {"train.lr": 0.03, "train.momentum": 0.5, "train.weight_decay": 5e-4}
    assert first.user_attrs["start"] == "default" and all("start" not in t.user_attrs for t in rest)
    assert all(t.params != first.params for t in rest)  # the sampler's own draws follow
    result = json.loads((out / "tune.json").read_text())
    best = max((t for t in _trials(out) if t.value is not None), key=lambda t: t.value)
    assert result["best_trial"] == best.number and result["best_is_default"] == (best.number == 0)
    if result["best_is_default"]:
        assert "the config's own setting" in capsys.readouterr().out
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # the same dir, without the flag: another tune
        cli.main(["tune", CONFIG, *sets, "--trials", "4", "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "holds a tune of another" in err and "--start-at-default" in err
    assert len(_trials(out)) == 3


def test_a_start_outside_the_ranges_exits_2_before_writing(tmp_path, capsys):
    out = tmp_path / "tune"
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["tune", CONFIG, *_sets(["train.lr=0.9"]), "--out", str(out), "--start-at-default"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err and "train.lr=0.9 lies outside" in err
    assert not out.exists()


def test_a_grid_passes_it_to_every_tune_and_katib_refuses_it(tmp_path, capsys):
    grid = tmp_path / "grid.yaml"
    text = (ROOT / "configs/grids/tiny.yaml").read_text()
    grid.write_text(text + "start_at_default: true\n")
    first, _ = plan_grid(load_grid(grid), tmp_path / "out", [])
    tunes = [j for j in first if j.kind == "tune"]
    assert len(tunes) == 2 and all(j.start_at_default for j in tunes)
    # Unset, a grid starts every tune at its default; a grid that says false keeps a random first trial.
    assert load_grid(ROOT / "configs/grids/tiny.yaml").start_at_default is True
    plain = tmp_path / "plain.yaml"
    plain.write_text(text + "start_at_default: false\n")
    assert not any(j.start_at_default for j in plan_grid(load_grid(plain), tmp_path / "out", [])[0])
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["pipeline", "compile", "bench", str(grid), "--out", str(tmp_path / "b.yaml"), "--katib"])
    assert exit_info.value.code == 2 and "set start_at_default: false" in capsys.readouterr().err
    assert not (tmp_path / "b.yaml").exists()


def test_a_bench_started_at_defaults_records_which_tunes_kept_them(tmp_path, capsys):
    from fedcore.bench.tables import tune_info

    grid = yaml.safe_load((ROOT / "configs/grids/tiny.yaml").read_text())
    grid["scenes"]["quickstart-tiny"]["set"] = [*grid["scenes"]["quickstart-tiny"]["set"], "train.rounds=2"]
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump({**grid, "start_at_default": True}))
    out = tmp_path / "out"
    cli.main(["bench", str(path), "--out", str(out), "--no-progress"])
    bench = json.loads((out / "bench.json").read_text())
    assert bench["grid"]["start_at_default"] is True
    table = (out / "quickstart-tiny" / "table.md").read_text()
    for row, tuned in bench["scenes"]["quickstart-tiny"]["tuned"].items():
        tune = json.loads((out / "quickstart-tiny" / row / "tune" / "tune.json").read_text())
        assert tune["start_at_default"] is True and tuned["best_is_default"] == tune["best_is_default"]
        assert tune["best_is_default"] == (tune["best_trial"] == 0)
        line = next(x for x in table.splitlines() if x.startswith((f"| {row} |", f"| **{row}** ")))
        assert ("kept the default" in line) == tune["best_is_default"]
    assert tune_info({"n_trials": 8, "n_pruned": 2, "n_diverged": 0, "best_is_default": True}) == \
        "8 (2 pruned, 0 diverged, kept the default)"
    assert tune_info({"n_trials": 8, "n_pruned": 2, "n_diverged": 0}) == "8 (2 pruned, 0 diverged)"

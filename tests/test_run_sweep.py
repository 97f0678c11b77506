"""`fedcore run CONFIG --method ROW [--sweep FILE]`: one row of a bench's tuned sweep file (its
`selected` row by default), or a method or built-in variant at its defaults, trained by a plain run;
--set still wins, and a file without a selected row (and no --method) is refused in one line."""

from __future__ import annotations

import pytest
import yaml

from fedcore import cli
from fedcore.errors import ConfigError
from fedcore.pipeline.plan import SweepSpec, one_row_overrides
from fedcore.registries import load_config

CONFIG = "configs/quickstart.yaml"
SWEEP = """\
selected: fedgr-robust
selected_method: fedgr
method_overrides:
  fedavg: [train.lr=0.01]
  fedgr-robust: [method.params.profile=robust, train.lr=0.03]
  fedprox: [train.lr=0.02, method.params.mu=0.25]
"""


def test_the_selected_row_a_named_row_and_a_variant_without_a_file():
    base = load_config(CONFIG)
    spec = SweepSpec.model_validate(yaml.safe_load(SWEEP))
    assert one_row_overrides(base, spec, None) == ["method.name=fedgr", "method.params={}", "train.stage_rounds={}",
                                                   "method.params.profile=robust", "train.lr=0.03"]
    switch = ["method.params={}", "train.stage_rounds={}"]  # another method's params and stage budgets go
    assert one_row_overrides(base, spec, "fedprox") == ["method.name=fedprox", *switch,
                                                        "train.lr=0.02", "method.params.mu=0.25"]
    # The config's own method: no switch, so its params in the config stay.
    assert one_row_overrides(base, spec, "fedavg") == ["train.lr=0.01"]
    assert one_row_overrides(base, None, "fedgr-robust") == ["method.name=fedgr", *switch,
                                                            "method.params.profile=robust"]
    assert one_row_overrides(base, None, "fedprox") == ["method.name=fedprox", "method.params={}",
                                                       "train.stage_rounds={}"]
    assert one_row_overrides(base, None, None) == []
    with pytest.raises(ConfigError, match="has no selected method"):
        one_row_overrides(base, SweepSpec(method_overrides={"fedavg": ["train.lr=0.1"]}), None)


def _run(tmp_path, *argv: str) -> dict:
    out = tmp_path / "run"
    cli.main(["run", CONFIG, "--out", str(out), "--no-progress", "--set", "train.rounds=1",
              "--set", "data.max_train=300", *argv])
    return yaml.safe_load((out / "config.yaml").read_text())


def test_a_run_trains_the_files_row_at_its_setting_and_set_wins(tmp_path):
    (tmp_path / "tuned.yaml").write_text(SWEEP)
    cfg = _run(tmp_path, "--sweep", str(tmp_path / "tuned.yaml"), "--method", "fedprox", "--set", "train.lr=0.07")
    assert cfg["method"]["name"] == "fedprox" and cfg["method"]["params"]["mu"] == 0.25
    assert cfg["train"]["lr"] == 0.07 and cfg["train"]["rounds"] == 1


def test_method_and_set_method_name_together_are_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _run(tmp_path, "--method", "fedprox", "--set", "method.name=fedavg")
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err and "--method or --set method.name" in err
    assert not (tmp_path / "run").exists()


def test_a_missing_sweep_file_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _run(tmp_path, "--sweep", str(tmp_path / "nope.yaml"))
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err and "nope.yaml' not found" in err


def test_a_sweep_plans_a_built_in_variant_row_under_its_own_name():
    from fedcore.pipeline.plan import plan_sweep, run_overrides, shared_data

    base = shared_data(load_config(CONFIG))
    spec = SweepSpec(methods=["fedgr", "fedgr-robust"],
                     method_overrides={"fedgr-robust": ["method.params.profile=robust", "train.lr=0.03"]})
    runs = plan_sweep(base, spec)[0].runs
    assert [r.method for r in runs] == ["fedgr", "fedgr-robust"]
    assert runs[0].name.startswith("fedgr · ") and runs[1].name.startswith("fedgr-robust · ")
    # What a run task trains at run time (fedcore.pipeline.inputs.resolve applies these overrides).
    over = run_overrides(base, [], "fedgr-robust", 0, spec.method_overrides["fedgr-robust"])
    cfg = load_config(CONFIG, list(over))
    assert cfg.method.name == "fedgr" and cfg.method.params["profile"] == "robust" and cfg.train.lr == 0.03


def test_a_switch_leaves_the_presets_stage_budgets_behind():
    """FedGR's preset budgets its `train` stage at 3 rounds; that stage name is every method's, so a
    FedAvg row of a sweep, `fedcore run --method` or a bench trains its own 10 rounds, as FedAvg's row
    of the bench did before sweeps switched this way."""
    from fedcore.methods.registry import build_method
    from fedcore.pipeline.plan import method_overrides

    base = load_config(CONFIG, ["method.name=fedgr", "method.params={}", "train.rounds=10",
                                "train.stage_rounds={warmup: 2, train: 3}"])
    assert [(s.name, s.rounds) for s in build_method(base).stages] == [("warmup", 2), ("train", 3)]
    fedavg = load_config(CONFIG, ["method.name=fedgr", "method.params={}", "train.rounds=10",
                                  "train.stage_rounds={warmup: 2, train: 3}", *method_overrides(base, "fedavg")])
    assert [(s.name, s.rounds) for s in build_method(fedavg).stages] == [("train", 10)]
    # The config's own method keeps them.
    assert method_overrides(base, "fedgr") == []


def test_a_row_the_sweep_file_lacks_is_refused_naming_its_rows(tmp_path, capsys):
    """--method fedsir with a file of fedavg, fedgr-robust and fedprox rows trained FedSIR at the config's
    own settings and exited 0: a row the file does not hold is a mistake, not a default."""
    (tmp_path / "tuned.yaml").write_text(SWEEP)
    with pytest.raises(SystemExit) as exit_info:
        _run(tmp_path, "--sweep", str(tmp_path / "tuned.yaml"), "--method", "fedsir")
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err
    assert "no row 'fedsir'" in err and "fedavg, fedgr-robust, fedprox" in err
    assert not (tmp_path / "run").exists()


def _scene_sweep(tmp_path, **head) -> str:
    """SWEEP with the scene it was tuned on: four pairflip clients of the quickstart's digits."""
    from fedcore.bench.sweepfile import SweepScene, federation

    scene_set = ["data.max_train=300", "partition.num_clients=4", "noise.type=pairflip",
                 "data.validation.fraction=0.1"]
    scene = SweepScene(name="mine", config=CONFIG, set=scene_set,
                       federation=federation(load_config(CONFIG, scene_set)))
    path = tmp_path / "tuned.yaml"
    path.write_text(yaml.safe_dump({"scene": scene.model_dump(), **head}) + SWEEP)
    return str(path)


def test_a_run_of_the_sweep_trains_on_its_scene_and_says_what_it_applied(tmp_path, capsys):
    """The bench's pick trained on the base config's scene: the grid scene's set was in neither file."""
    cfg = _run(tmp_path, "--sweep", _scene_sweep(tmp_path))
    assert (cfg["partition"]["num_clients"], cfg["noise"]["type"]) == (4, "pairflip")
    assert cfg["data"]["validation"]["fraction"] == 0.1 and cfg["method"]["params"]["profile"] == "robust"
    assert cfg["train"]["lr"] == 0.03 and cfg["train"]["rounds"] == 1  # the row's value; --set still wins
    out = " ".join(capsys.readouterr().out.split())
    assert "training row 'fedgr-robust' at its tuned setting (the bench's choice) on scene 'mine'" in out
    assert "noise.type=pairflip" in out and "train.lr=0.03" in out


def test_a_base_config_of_another_federation_is_refused_in_one_line(tmp_path, capsys):
    base = yaml.safe_load(open(CONFIG).read())
    base["partition"]["alpha"] = 5.0
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", str(tmp_path / "base.yaml"), "--out", str(tmp_path / "run"), "--no-progress",
                  "--sweep", _scene_sweep(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err
    assert "another federation than scene 'mine'" in err and "partition.alpha: 5.0 (this run)" in err
    assert not (tmp_path / "run").exists()


def test_a_default_choice_trains_the_row_at_its_own_params(tmp_path, capsys):
    sweep = _scene_sweep(tmp_path, selected_setting="default",
                         default_overrides={"fedgr-robust": ["method.params.profile=robust"]})
    cfg = _run(tmp_path, "--sweep", sweep)
    own = load_config(CONFIG, ["method.name=fedgr", "method.params={}", "train.stage_rounds={}"])
    assert cfg["method"]["name"] == "fedgr" and cfg["method"]["params"]["profile"] == "robust"
    assert cfg["train"]["lr"] == own.train.lr != 0.03  # not the tuned value
    assert "training row 'fedgr-robust' at its default setting" in " ".join(capsys.readouterr().out.split())

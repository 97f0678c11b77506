"""The retrain pipeline from a sweep file (`fedcore pipeline compile|run retrain CONFIG --sweep FILE`):
it trains the file's `selected` method (what `fedcore bench` chose), or --method, at the file's
overrides for it; a file without a selected method, and no --method, is refused in one line."""

from __future__ import annotations

import json

import pytest

from fedcore import cli
from fedcore.bench.sweepfile import tuned_sweep
from fedcore.errors import ConfigError
from fedcore.pipeline.plan import SweepSpec, load_sweep_spec, plan_sweep, selected_overrides, shared_data
from fedcore.registries import config_from_dict, load_config
from pipelines.runner import load_specs

CONFIG = "configs/quickstart.yaml"
SWEEP = """\
selected: fedprox
method_overrides:
  fedavg: [train.lr=0.01]
  fedprox: [train.lr=0.02, method.params.mu=0.25]
"""


def _compiled_config(tmp_path, *argv: str) -> dict:
    out = tmp_path / "retrain.yaml"
    cli.main(["pipeline", "compile", "retrain", CONFIG, "--out", str(out), *argv])
    spec, _ = load_specs(out)
    return json.loads(spec.root.input_definitions.parameters["config"].default_value.string_value)


def test_retrain_trains_the_files_selected_method_at_its_overrides(tmp_path, capsys):
    (tmp_path / "tuned.yaml").write_text(SWEEP)
    cfg = _compiled_config(tmp_path, "--sweep", str(tmp_path / "tuned.yaml"))
    assert cfg["method"]["name"] == "fedprox" and cfg["method"]["params"]["mu"] == 0.25
    assert cfg["train"]["lr"] == 0.02
    # The hash it prints is the compiled config's, not the config file's.
    assert f"config {config_from_dict(cfg).config_hash()};" in capsys.readouterr().out


def test_method_names_another_row_of_the_file(tmp_path):
    (tmp_path / "tuned.yaml").write_text(SWEEP)
    cfg = _compiled_config(tmp_path, "--sweep", str(tmp_path / "tuned.yaml"), "--method", "fedavg")
    assert cfg["method"]["name"] == "fedavg" and cfg["train"]["lr"] == 0.01


def test_without_a_sweep_file_retrain_keeps_the_configs_method(tmp_path):
    cfg = _compiled_config(tmp_path)
    assert cfg["method"]["name"] == "fedavg" and cfg["train"]["lr"] == 0.05


def test_a_file_without_selected_and_no_method_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "tuned.yaml").write_text(SWEEP.replace("selected: fedprox\n", ""))
    with pytest.raises(SystemExit) as exit_info:
        _compiled_config(tmp_path, "--sweep", str(tmp_path / "tuned.yaml"))
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err
    assert err.startswith(f"error: sweep file '{tmp_path / 'tuned.yaml'}' has no selected method")
    assert "--method with one of: fedavg, fedprox" in err


def test_a_variant_row_switches_to_its_registered_method():
    base = load_config(CONFIG)
    spec = SweepSpec(selected="fedgr-robust", selected_method="fedgr",
                     method_overrides={"fedgr-robust": ["method.params.profile=robust", "train.lr=0.03"]})
    assert selected_overrides(spec, base) == ["method.name=fedgr", "method.params={}", "train.stage_rounds={}",
                                              "method.params.profile=robust", "train.lr=0.03"]
    with pytest.raises(ConfigError, match=r"a retrain \(or fedcore run\) trains one method"):
        selected_overrides(SweepSpec(methods=["fedavg", "fedprox"]), base)


def test_the_bench_sweep_file_records_the_choice_and_a_sweep_still_reads_it(tmp_path):
    tunes = {"fedavg": {"best_params": {"train.lr": 0.01}}, "fedgr-robust": {"best_params": {"train.lr": 0.02}}}
    assert tuned_sweep(tunes, selected=("fedavg", "fedavg"))["selected"] == "fedavg"
    text = tuned_sweep(tunes, {"fedgr-robust": ["method.params.profile=robust"]}, ("fedgr-robust", "fedgr"))
    assert (text["selected"], text["selected_method"]) == ("fedgr-robust", "fedgr")
    assert "selected" not in tuned_sweep(tunes)  # no choice, no key
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP + "methods: [fedavg, fedprox]\n")
    spec = load_sweep_spec(path)
    plans = plan_sweep(shared_data(load_config(CONFIG, ["train.rounds=2"])), spec)  # a sweep ignores `selected`
    assert [r.method for r in plans[0].runs] == ["fedavg", "fedprox"]

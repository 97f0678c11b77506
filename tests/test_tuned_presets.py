"""experiments/tuned_presets.py: a finished tune becomes a config that runs as it is, and every
shipped config (the presets and the tuned ones) validates."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from fedcore.registries import load_config

ROOT = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("tuned_presets", ROOT / "experiments/tuned_presets.py")
tp = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tp)


def test_a_tune_becomes_the_scene_preset_with_the_rows_method_and_tuned_values(tmp_path):
    configs, runs = tmp_path / "configs", tmp_path / "runs"
    configs.mkdir()
    preset = yaml.safe_load((ROOT / "configs/fmnist/fedgr_sym.yaml").read_text())
    (configs / "fedgr_sym.yaml").write_text(yaml.safe_dump(preset))
    tune = runs / "fedgr_sym" / "fedprox" / "tune"
    tune.mkdir(parents=True)
    best = load_config(ROOT / "configs/fmnist/fedgr_sym.yaml",
                       ["method.name=fedprox", "method.params={}", "train.lr=0.0123", "train.momentum=0.5",
                        "method.params.mu=0.3", "data.validation.fraction=0.1", "seed=100"])
    (tune / "best.yaml").write_text(best.to_yaml())
    (tune / "tune.json").write_text(json.dumps({
        "best_params": {"train.lr": 0.0123, "train.momentum": 0.5, "method.params.mu": 0.3}, "best_value": 0.2,
        "objective": "final/val_acc_last10", "n_trials": 8, "n_pruned": 3, "seed": 100}))
    tp.main([str(runs), str(configs)])
    out = configs / "tuned" / "fedgr_sym" / "fedprox.yaml"
    text = out.read_text()
    assert "8 trials (3 pruned)" in text and "Base: configs/fmnist/fedgr_sym.yaml" in text
    cfg = load_config(out, [])
    assert (cfg.method.name, cfg.method.params["mu"], cfg.train.lr, cfg.train.momentum) == ("fedprox", 0.3, 0.0123, 0.5)
    assert cfg.seed == preset["seed"] and cfg.data.validation.fraction == 0.1
    # Everything else is the scene's: the same artifact as the table's runs.
    base = load_config(ROOT / "configs/fmnist/fedgr_sym.yaml", ["data.validation.fraction=0.1"])
    assert cfg.partition == base.partition and cfg.noise == base.noise and cfg.model == base.model
    mtime = out.stat().st_mtime_ns
    tp.main([str(runs), str(configs)])
    assert out.stat().st_mtime_ns == mtime  # unchanged content: not rewritten


def test_a_scenes_tunes_become_one_sweep_of_method_overrides_that_rerun_each_tuned_setting(tmp_path):
    from fedcore.pipeline.plan import load_sweep_spec

    scene = tmp_path / "quickstart"
    rows = {"fedavg": {"train.lr": 0.1234567891234}, "coteaching": {"method.params.forget_rate": 0.08}}
    for row, params in rows.items():
        tune = scene / row / "tune"
        tune.mkdir(parents=True)
        best = load_config(ROOT / "configs/quickstart.yaml", [f"method.name={row}", "data.validation.fraction=0.1"])
        (tune / "best.yaml").write_text(best.to_yaml())
        (tune / "tune.json").write_text(json.dumps({"best_params": params, "best_value": 0.3, "n_trials": 8,
                                                    "objective": "final/val_acc_last10", "seed": 100}))
    out = tmp_path / "sweep.yaml"
    tp.main(["--sweep", str(scene), str(out)])
    assert "8 trials" in out.read_text() and "data.validation.fraction=0.1" in out.read_text()
    spec = load_sweep_spec(out)
    assert spec.method_overrides == {"coteaching": ["method.params.forget_rate=0.08"],
                                     "fedavg": ["train.lr=0.1234567891234"]}  # full precision: the same run
    with pytest.raises(SystemExit, match="no finished tune"):
        tp.main(["--sweep", str(tmp_path / "empty"), str(out)])


SWEEPS = ROOT / "configs" / "sweeps"


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "configs").rglob("*.yaml")
                                        if SWEEPS not in p.parents))
def test_every_shipped_config_validates(path):
    load_config(ROOT / path, [])


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in SWEEPS.glob("*.yaml")))
def test_every_shipped_sweep_plans_on_the_quickstart(path):
    from fedcore.pipeline.plan import load_sweep_spec, plan_sweep, shared_data

    spec = load_sweep_spec(ROOT / path)
    base = load_config(ROOT / "configs/quickstart.yaml", ["data.validation.fraction=0.1"])
    methods = list(spec.method_overrides) or [base.method.name]
    plans = plan_sweep(shared_data(base), spec.model_copy(update={"methods": spec.methods or methods}))
    assert len(plans[0].runs) == len(methods)

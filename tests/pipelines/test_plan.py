"""Compile-time planning: sweep runs, their hashes, and the task-config round trip."""

from __future__ import annotations

import json

import pytest

from fedcore.errors import ConfigError
from fedcore.pipeline.plan import SweepSpec, config_text, load_run_config, load_sweep_spec, plan_sweep, shared_data
from fedcore.pipeline.resources import PipelineResources
from fedcore.registries import config_from_dict

BASE = {"data": {"name": "digits"}, "partition": {"num_clients": 4}, "method": {"name": "fedprox", "params": {}},
        "noise": {"type": "symmetric"}, "seed": 3}


def test_sweep_shares_one_dataset_per_setting_and_hashes_every_run():
    base = shared_data(config_from_dict(BASE))
    spec = SweepSpec(methods=["fedavg", "fedprox"], seeds=[0, 1], settings={"noisy": [], "clean": ["noise.type=none"]})

    plans = plan_sweep(base, spec)

    assert [p.name for p in plans] == ["noisy", "clean"]
    assert plans[0].data_hash != plans[1].data_hash
    for plan in plans:
        assert [(r.method, r.seed) for r in plan.runs] == [("fedavg", 0), ("fedavg", 1), ("fedprox", 0), ("fedprox", 1)]
        for run in plan.runs:
            cfg = load_run_config(config_text(base), json.dumps(run.overrides), run.config_hash)
            assert (cfg.method.name, cfg.seed, cfg.data_hash()) == (run.method, run.seed, plan.data_hash)
            assert run.stages == ("train",)
    assert len({r.config_hash for p in plans for r in p.runs}) == 8


def test_loop_item_holds_flat_string_fields_and_avoids_kfp_name():
    spec = SweepSpec(methods=["fedavg"], settings={"clean": ["noise.type=none"]})
    plan = plan_sweep(shared_data(config_from_dict(BASE)), spec)[0]

    item = plan.item()

    assert "name" not in item  # kfp loop channels own `.name`
    assert item["setting"] == "clean"
    assert json.loads(item["o0"]) == ["noise.type=none", "method.name=fedavg", "method.params={}", "seed=3"]
    assert item["h0"] == plan.runs[0].config_hash
    assert all(isinstance(v, str) for v in item.values())


def test_task_refuses_a_config_that_no_longer_matches_the_compiled_hash():
    text = config_text(config_from_dict(BASE))
    with pytest.raises(ConfigError, match="recompile"):
        load_run_config(text, '["train.rounds=7"]', config_from_dict(BASE).config_hash())
    with pytest.raises(ConfigError, match="recompile"):
        load_run_config("{not yaml: [", "[]")


def test_sweep_spec_errors_are_user_errors(tmp_path):
    bad = tmp_path / "sweep.yaml"
    bad.write_text("methods: [fedavg]\nseed: [1]\n")
    with pytest.raises(ConfigError, match="seed"):
        load_sweep_spec(bad)
    with pytest.raises(ConfigError, match="not found"):
        load_sweep_spec(tmp_path / "missing.yaml")
    with pytest.raises(ConfigError, match="unknown method"):
        plan_sweep(config_from_dict(BASE), SweepSpec(methods=["nope"]))


def test_cli_values_override_the_sweep_file(tmp_path):
    f = tmp_path / "sweep.yaml"
    f.write_text("methods: [fedavg]\nseeds: [0, 1]\nsettings: {clean: [noise.type=none]}\n")
    spec = load_sweep_spec(f, {"methods": ["fedprox"], "seeds": None})
    assert (spec.methods, spec.seeds, spec.settings) == (["fedprox"], [0, 1], {"clean": ["noise.type=none"]})


def test_resources_from_cli_options():
    res = PipelineResources().with_cli(image="reg/img:2", gpu_type="amd.com/gpu", gpus=2,
                                       node_selector=["pool=a100", "zone=b"])
    assert (res.image, res.accelerator_type, res.accelerators) == ("reg/img:2", "amd.com/gpu", 2)
    assert res.node_selector == {"pool": "a100", "zone": "b"}
    with pytest.raises(ConfigError, match="key=value"):
        PipelineResources().with_cli(node_selector=["novalue"])
    with pytest.raises(ConfigError, match="--gpus"):
        PipelineResources().with_cli(gpus=-1)

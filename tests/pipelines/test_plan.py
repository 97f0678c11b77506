"""Planning (the graph's shape) and run-time inputs (each task's config from the pipeline's inputs)."""

from __future__ import annotations

import pytest

from fedcore.errors import ConfigError
from fedcore.pipeline.inputs import RunInputs, check_stages, parse_config, resolve, slot_of
from fedcore.pipeline.plan import SweepSpec, config_input, load_sweep_spec, plan_sweep, shared_data, stage_names
from fedcore.pipeline.resources import PipelineResources
from fedcore.registries import config_from_dict

BASE = {"data": {"name": "digits"}, "partition": {"num_clients": 4}, "method": {"name": "fedprox", "params": {}},
        "noise": {"type": "symmetric"}, "seed": 3}
SPEC = SweepSpec(methods=["fedavg", "fedprox"], seeds=[0, 1], settings={"noisy": [], "clean": ["noise.type=none"]})


def test_sweep_shares_one_dataset_per_setting_and_plans_every_slot():
    base = shared_data(config_from_dict(BASE))

    plans = plan_sweep(base, SPEC)

    assert [p.name for p in plans] == ["noisy", "clean"]
    assert plans[0].data_hash != plans[1].data_hash
    for plan in plans:
        assert [(r.method, r.seed) for r in plan.runs] == [("fedavg", 0), ("fedavg", 1), ("fedprox", 0), ("fedprox", 1)]
        assert all(r.stages == (("train", ()),) for r in plan.runs)
    assert plans[1].item() == {"setting": "clean", "overrides": ["noise.type=none"]}  # no `name`: kfp owns it


def test_each_slot_resolves_its_run_at_run_time_on_its_settings_dataset():
    cfg = config_from_dict(BASE)
    plans = plan_sweep(shared_data(cfg), SPEC)
    for plan in plans:
        prep = resolve(RunInputs(config_input(cfg), setting=plan.item()))
        for i, run in enumerate(plan.runs):
            got = resolve(RunInputs(config_input(cfg), setting=plan.item(), methods=SPEC.methods, seeds=SPEC.seeds,
                                    slot=i, slots=len(plan.runs)))
            assert (got.method.name, got.seed) == (run.method, run.seed)
            assert got.data_hash() == prep.data_hash() == plan.data_hash  # every seed shares the dataset


def test_run_time_overrides_change_the_run_without_a_recompile():
    cfg = config_from_dict(BASE)
    got = resolve(RunInputs(config_input(cfg), ["train.rounds=7"], {"setting": "s", "overrides": []},
                            ["fedavg"], [5.0], 0, 1))  # Kubeflow may hand list numbers over as floats
    assert (got.train.rounds, got.method.name, got.seed) == (7, "fedavg", 5)
    assert resolve(RunInputs(config_input(cfg), ["train.rounds=7"])).config_hash() == \
        config_from_dict(BASE, ["train.rounds=7"]).config_hash()


def test_method_overrides_reach_only_their_methods_runs_in_every_setting_after_the_method_switch():
    cfg = config_from_dict(BASE)
    own = {"fedprox": ["train.lr=0.0123", "method.params.mu=0.3"]}
    spec = SPEC.model_copy(update={"method_overrides": own})
    plans = plan_sweep(shared_data(cfg), spec)
    for plan in plans:
        assert plan.item()["method_overrides"] == own  # every task gets the setting item
        got = [resolve(RunInputs(config_input(cfg), setting=plan.item(), methods=spec.methods, seeds=spec.seeds,
                                 slot=i, slots=len(plan.runs))) for i in range(len(plan.runs))]
        assert [(c.method.name, c.train.lr) for c in got] == [("fedavg", cfg.train.lr)] * 2 + [("fedprox", 0.0123)] * 2
        assert got[2].method.params["mu"] == 0.3  # applied after `method.params={}`, which resets the params
        assert {c.data_hash() for c in got} == {plan.data_hash}  # the dataset stays shared
    assert "method_overrides" not in plan_sweep(shared_data(cfg), SPEC)[0].item()  # unchanged when unused


@pytest.mark.parametrize("own, words", [({"fedsir": ["train.lr=0.1"]}, "does not run"),
                                        ({"fedavg": ["noise.rate.value=0.1"]}, "shared dataset"),
                                        ({"fedavg": ["train.nope=1"]}, "nope")])
def test_method_overrides_that_name_no_method_or_change_the_data_are_refused(own, words):
    with pytest.raises(ConfigError, match=words):
        plan_sweep(shared_data(config_from_dict(BASE)), SPEC.model_copy(update={"method_overrides": own}))


def test_malformed_method_overrides_in_a_run_time_setting_are_refused():
    cfg = config_from_dict(BASE)
    setting = {"setting": "a", "overrides": [], "method_overrides": {"fedavg": "train.lr=0.1"}}
    with pytest.raises(ConfigError, match="method_overrides.*'key=value'"):
        resolve(RunInputs(config_input(cfg), setting=setting, methods=["fedavg"], seeds=[0], slot=0, slots=1))


def test_run_time_method_overrides_that_change_the_shared_data_are_refused():
    # A settings input edited in the KFP UI is checked like a compiled one: a method may not move the data.
    cfg = config_from_dict(BASE)
    setting = {"setting": "a", "overrides": [], "method_overrides": {"fedavg": ["partition.params.alpha=0.1"]}}
    with pytest.raises(ConfigError, match="shared dataset"):
        resolve(RunInputs(config_input(cfg), setting=setting, methods=["fedavg"], seeds=[0], slot=0, slots=1))


def test_config_input_round_trips_every_preset_exactly():
    from fedcore.registries import load_config

    for name in ("quickstart", "fedsir_cifar10", "fedharmony_digits_mosaic"):
        cfg = load_config(f"configs/{name}.yaml")
        assert isinstance(config_input(cfg), str) and "\n" not in config_input(cfg)  # one line: kfp's header
        assert parse_config(config_input(cfg)).config_hash() == cfg.config_hash(), name


def test_run_time_inputs_that_change_the_graph_are_refused_with_what_to_do():
    cfg = config_from_dict(BASE)
    with pytest.raises(ConfigError, match="compiled for 4 runs per setting.*recompile"):
        slot_of(["fedavg"], [0, 1, 2], 0, 4)
    with pytest.raises(ConfigError, match="stages.*recompile"):
        check_stages(config_from_dict({**BASE, "method": {"name": "fedsir"}}), stage_names(cfg))
    check_stages(cfg, ["train"])
    with pytest.raises(ConfigError, match="list of 'key=value'"):
        resolve(RunInputs(config_input(cfg), setting={"setting": "a", "overrides": "noise.type=none"}))
    with pytest.raises(ConfigError, match="JSON"):
        parse_config("{not: [valid")
    with pytest.raises(ConfigError, match="overrides"):
        parse_config(config_input(cfg), "train.rounds=2")


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
                                       node_selector=["pool=a100", "zone=b"], resource=["stage_memory_limit=32Gi"])
    assert (res.image, res.accelerator_type, res.accelerators) == ("reg/img:2", "amd.com/gpu", 2)
    assert res.node_selector == {"pool": "a100", "zone": "b"}
    assert (res.stage_memory_limit, res.memory_limit) == ("32Gi", "4Gi")
    with pytest.raises(ConfigError, match="below"):
        PipelineResources().with_cli(resource=["cpu_limit=500m"])  # under the 1-CPU request
    with pytest.raises(ConfigError, match="quantity"):
        PipelineResources().with_cli(resource=["memory_limit=lots"])
    with pytest.raises(ConfigError, match="choose one of"):
        PipelineResources().with_cli(resource=["gpu_limit=1"])
    with pytest.raises(ConfigError, match="key=value"):
        PipelineResources().with_cli(node_selector=["novalue"])
    with pytest.raises(ConfigError, match="--gpus"):
        PipelineResources().with_cli(gpus=-1)


def test_workers_from_the_cli_and_their_bad_values():
    assert PipelineResources().workers == 1  # one pod per stage, as before
    res = PipelineResources().with_cli(workers=3, resource=["trainjob_prefix=s3://b/tj", "trainjob_timeout_s=600"])
    assert (res.workers, res.trainjob_prefix, res.trainjob_timeout_s) == (3, "s3://b/tj", 600.0)
    with pytest.raises(ConfigError, match=r"--workers must be >= 1 \(nodes per training stage\), got 0"):
        PipelineResources().with_cli(workers=0)
    with pytest.raises(ConfigError, match="trainjob_prefix must be an s3:// prefix for workers > 1, got '/runs'"):
        PipelineResources().with_cli(workers=2, resource=["trainjob_prefix=/runs"])
    with pytest.raises(ConfigError, match="bad task resources: .*greater than 0"):
        PipelineResources().with_cli(resource=["trainjob_timeout_s=0"])

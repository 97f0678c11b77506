"""Compiled packages parse into kfp's PipelineSpec/PlatformSpec protos and carry the cluster settings."""

from __future__ import annotations

import pytest
import yaml
from google.protobuf import json_format

from fedcore import cli
from fedcore.deploy import env
from fedcore.pipeline.inputs import parse_config
from fedcore.pipeline.plan import SweepSpec
from fedcore.pipeline.resources import PipelineResources
from fedcore.registries import config_from_dict
from pipelines import PipelineOptions, build_pipeline
from pipelines.runner import compile_pipeline, load_specs

CFG = {"data": {"name": "digits"}, "partition": {"num_clients": 4}, "method": {"name": "fedavg"},
       "tracking": {"backend": "mlflow"}}
RES = PipelineResources(image="registry.example/fedcore:test", accelerator_type="nvidia.com/gpu", accelerators=2,
                        node_selector={"pool": "a100"}, retries=3)


def _compile(name, tmp_path, **options):
    path = compile_pipeline(build_pipeline(name, config_from_dict(CFG), PipelineOptions(resources=RES, **options)),
                            tmp_path / f"{name}.yaml")
    return path, *load_specs(path)


def _tasks(spec):
    """Every task of the root DAG and of nested DAGs (loop bodies), by display name."""
    dags = [spec.root.dag, *(c.dag for c in spec.components.values() if c.HasField("dag"))]
    return {t.task_info.name: t for dag in dags for t in dag.tasks.values()}


def _ids(spec):
    """Display name -> task id, over every DAG."""
    dags = [spec.root.dag, *(c.dag for c in spec.components.values() if c.HasField("dag"))]
    return {t.task_info.name: tid for dag in dags for tid, t in dag.tasks.items()}


def _executor(spec, platform, task):
    comp = spec.components[task.component_ref.name]
    container = spec.deployment_spec["executors"][comp.executor_label]["container"]
    k8s = json_format.MessageToDict(platform.platforms["kubernetes"].deployment_spec)["executors"]
    return container, k8s.get(comp.executor_label, {})


@pytest.mark.parametrize("name", ["experiment", "sweep", "retrain"])
def test_package_round_trips_through_the_protos(name, tmp_path):
    path, spec, platform = _compile(name, tmp_path)
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]

    assert json_format.MessageToDict(spec) == docs[0]
    assert json_format.MessageToDict(platform) == docs[1]
    assert spec.pipeline_info.name == f"fedcore-{name}"


def test_training_stage_gets_accelerator_resources_placement_secret_and_retries(tmp_path):
    _, spec, platform = _compile("experiment", tmp_path)
    tasks = _tasks(spec)
    stage = tasks["fedavg-train"]
    container, k8s = _executor(spec, platform, stage)

    assert container["image"] == "registry.example/fedcore:test"
    res = container["resources"]
    assert res["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert res["accelerator"]["resourceCount"] == "2"
    assert res["resourceCpuRequest"] == RES.stage_cpu_request
    assert res["resourceMemoryRequest"] == RES.stage_memory_request
    assert (res["resourceCpuLimit"], res["resourceMemoryLimit"]) == (RES.stage_cpu_limit, RES.stage_memory_limit)
    assert k8s["nodeSelector"]["labels"] == {"pool": "a100"}
    assert k8s["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    secret = k8s["secretAsEnv"][0]
    assert secret["secretName"] == env.S3_SECRET
    assert {e["envVar"] for e in secret["keyToEnv"]} == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert {e["envVar"] for e in k8s["configMapAsEnv"][0]["keyToEnv"]} >= {"MLFLOW_TRACKING_URI", "FEDCORE_CACHE"}
    assert k8s["podMetadata"]["labels"] == {env.CLIENT_POD_LABEL[0]: env.CLIENT_POD_LABEL[1]}
    assert k8s["pvcMount"][0]["mountPath"] == env.DATASET_CACHE_MOUNT
    assert stage.retry_policy.max_retry_count == 3
    assert stage.caching_options.enable_cache


def test_light_tasks_stay_on_cpu_and_tracking_is_never_cached(tmp_path):
    _, spec, platform = _compile("experiment", tmp_path)
    tasks = _tasks(spec)
    container, k8s = _executor(spec, platform, tasks["prepare-data"])

    assert "accelerator" not in container["resources"]
    assert container["resources"]["resourceCpuLimit"] == RES.cpu_limit
    assert container["resources"]["resourceMemoryLimit"] == RES.memory_limit
    assert "nodeSelector" not in k8s and "tolerations" not in k8s
    assert k8s["secretAsEnv"][0]["secretName"] == env.S3_SECRET
    assert tasks["prepare-data"].caching_options.enable_cache
    assert not tasks["start-tracking"].caching_options.enable_cache
    assert not tasks["prepare-data"].HasField("retry_policy")


def test_every_task_carries_cpu_and_memory_limits(tmp_path):
    for name in ("experiment", "sweep", "retrain"):
        _, spec, platform = _compile(name, tmp_path)
        for task_name, task in _tasks(spec).items():
            if not spec.components[task.component_ref.name].executor_label:
                continue  # a DAG (loop body, exit-handler group), not a container
            resources = dict(_executor(spec, platform, task)[0]["resources"])
            assert resources.get("resourceCpuLimit") and resources.get("resourceMemoryLimit"), (name, task_name)


def test_config_and_overrides_are_run_time_inputs_that_every_task_reads(tmp_path):
    cfg = config_from_dict(CFG)
    _, spec, _ = _compile("experiment", tmp_path, overrides=("train.rounds=7",))
    params = spec.root.input_definitions.parameters

    assert set(params) == {"config", "overrides"}
    assert parse_config(params["config"].default_value.string_value).config_hash() == cfg.config_hash()
    assert [v.string_value for v in params["overrides"].default_value.list_value.values] == ["train.rounds=7"]
    for name in ("prepare-data", "fedavg-train", "fedavg-evaluate", "start-tracking", "finish-tracking"):
        inputs = _tasks(spec)[name].inputs.parameters
        # From the pipeline's inputs, not constants: the cache keys follow what a run passes.
        assert inputs["config"].component_input_parameter.endswith("config"), name
        assert inputs["overrides"].component_input_parameter.endswith("overrides"), name


def test_an_exit_handler_closes_the_tracking_whatever_happens(tmp_path):
    for name in ("experiment", "sweep", "retrain"):
        _, spec, _ = _compile(name, tmp_path)
        root = spec.root.dag.tasks
        (group,) = [t for t in root.values() if t.component_ref.name.startswith("comp-exit-handler")]
        done = root["finish-tracking"]
        assert done.trigger_policy.strategy == done.trigger_policy.TriggerStrategy.ALL_UPSTREAM_TASKS_COMPLETED
        assert done.inputs.parameters["status"].task_final_status.producer_task == "exit-handler-1"
        assert not done.caching_options.enable_cache
        body = {t.task_info.name for t in spec.components[group.component_ref.name].dag.tasks.values()}
        assert {"start-tracking"} <= body and set(root) == {"exit-handler-1", "finish-tracking"}, name


def test_fedsir_stages_are_tasks_of_their_own_components_with_typed_outputs(tmp_path):
    path = compile_pipeline(build_pipeline("experiment", config_from_dict({**CFG, "method": {"name": "fedsir"}}),
                                           PipelineOptions(resources=RES)), tmp_path / "fedsir.yaml")
    spec, _ = load_specs(path)
    tasks, ids = _tasks(spec), _ids(spec)
    order = ["fedsir-identify", "fedsir-relabel", "fedsir-train", "fedsir-evaluate"]

    for before, after in zip(order, order[1:], strict=False):
        assert ids[before] in tasks[after].dependent_tasks, (before, after)
    components = {n: spec.components[tasks[n].component_ref.name] for n in order}
    assert [c.executor_label for c in components.values()] == [
        "exec-identify-stage", "exec-relabel-stage", "exec-run-stage", "exec-evaluate"]
    outputs = {n: {k: a.artifact_type.schema_title for k, a in c.output_definitions.artifacts.items()}
               for n, c in components.items()}
    assert outputs["fedsir-identify"] == {"checkpoint": "system.Model", "metrics": "system.Metrics",
                                          "verdicts": "system.Artifact"}
    assert outputs["fedsir-relabel"] == {"checkpoint": "system.Model", "metrics": "system.Metrics",
                                         "labels": "system.Dataset"}
    assert outputs["fedsir-train"] == {"checkpoint": "system.Model", "metrics": "system.Metrics"}
    stages = tasks["fedsir-train"].inputs.parameters["stages"].runtime_value.constant
    assert [v.string_value for v in stages.list_value.values] == ["identify", "relabel", "train"]


def test_sweep_takes_methods_seeds_and_settings_at_run_time(tmp_path):
    spec_ = SweepSpec(methods=["fedavg", "fedprox"], seeds=[0, 1], settings={"noisy": [], "clean": ["noise.type=none"]})
    _, spec, _ = _compile("sweep", tmp_path, sweep=spec_, parallelism=2)
    params = spec.root.input_definitions.parameters

    assert set(params) == {"config", "overrides", "methods", "seeds", "settings"}
    assert [v.string_value for v in params["methods"].default_value.list_value.values] == ["fedavg", "fedprox"]
    assert [v.number_value for v in params["seeds"].default_value.list_value.values] == [0, 1]
    loop = next(t for t in _tasks(spec).values() if t.WhichOneof("iterator") == "parameter_iterator")
    assert loop.parameter_iterator.items.input_parameter.endswith("settings")  # the loop runs over the input
    assert loop.iterator_policy.parallelism_limit == 2


def test_sweep_fans_out_with_parallel_for_and_in_with_collected(tmp_path):
    spec_ = SweepSpec(methods=["fedavg", "fedprox"], seeds=[0, 1], settings={"noisy": [], "clean": ["noise.type=none"]})
    _, spec, _ = _compile("sweep", tmp_path, sweep=spec_)
    settings = spec.root.input_definitions.parameters["settings"].default_value
    tasks, ids = _tasks(spec), _ids(spec)
    loop = next(t for t in tasks.values() if t.WhichOneof("iterator") == "parameter_iterator")

    assert [json_format.MessageToDict(v)["setting"] for v in settings.list_value.values] == ["noisy", "clean"]
    body = spec.components[loop.component_ref.name].dag.tasks
    names = {t.task_info.name for t in body.values()}
    assert {"fedavg-s0-train", "fedavg-s1-train", "fedprox-s0-train", "fedprox-s1-evaluate", "prepare-data"} <= names
    rows = tasks["compare"].inputs.parameters["rows"]
    assert rows.task_output_parameter.producer_task == ids[loop.task_info.name]


def test_retrain_refuses_a_config_that_logs_no_served_model():
    from fedcore.errors import ConfigError

    with pytest.raises(ConfigError, match="tracking.log_model"):
        build_pipeline("retrain", config_from_dict(CFG), PipelineOptions(resources=RES,
                                                                          overrides=("tracking.log_model=false",)))


def test_retrain_runs_on_parameters_and_never_caches_the_decision(tmp_path):
    # A snapshot prefix needs a dataset read from files (bundled digits would ignore it: refused below).
    _, spec, _ = _compile("retrain", tmp_path, data_prefix="s3://bucket/snapshots/", model_name="digits-champ",
                          overrides=("data.name=table",))
    params = spec.root.input_definitions.parameters
    tasks = _tasks(spec)

    assert params["data_prefix"].default_value.string_value == "s3://bucket/snapshots/"
    assert params["model_name"].default_value.string_value == "digits-champ"
    assert not tasks["latest-snapshot"].caching_options.enable_cache
    assert not tasks["champion"].caching_options.enable_cache
    names = {tid: name for name, tid in _ids(spec).items()}
    assert {names[d] for d in tasks["champion"].dependent_tasks} >= {"fedavg-evaluate", "fedavg-train",
                                                                     "latest-snapshot"}


def test_retrain_refuses_a_snapshot_prefix_for_a_dataset_that_reads_no_files(tmp_path):
    from fedcore.errors import ConfigError

    with pytest.raises(ConfigError, match="dataset 'digits' is bundled and reads no files, so its snapshots"):
        _compile("retrain", tmp_path, data_prefix="s3://bucket/snapshots/")
    assert not (tmp_path / "retrain.yaml").exists()


def test_workers_2_makes_every_stage_task_submit_a_valid_trainjob(tmp_path):
    from fedcore.pipeline.trainjob import stage_trainjob, validate_trainjob

    res = RES.model_copy(update={"workers": 2})
    cfg = config_from_dict({**CFG, "method": {"name": "fedsir"}})  # identify, relabel, train: three components
    path = compile_pipeline(build_pipeline("experiment", cfg, PipelineOptions(resources=res)), tmp_path / "e.yaml")
    spec, platform = load_specs(path)
    stages = {n: t for n, t in _tasks(spec).items() if n.startswith("fedsir-") and n != "fedsir-evaluate"}
    assert sorted(stages) == ["fedsir-identify", "fedsir-relabel", "fedsir-train"]
    for name, task in stages.items():
        value = json_format.MessageToDict(task.inputs.parameters["trainjob"])["runtimeValue"]["constant"]
        submitted = PipelineResources.model_validate(value)
        assert (submitted.workers, submitted.accelerators, submitted.image) == (2, 2, RES.image), name
        tj = stage_trainjob("fc-x", "s3://fedcore/trainjobs/fc-x/spec.json", submitted)
        assert validate_trainjob(tj) == [], name
        assert (tj["spec"]["trainer"]["numNodes"], tj["spec"]["trainer"]["numProcPerNode"]) == (2, 2)
        # The task itself only submits and waits: no GPU, no GPU pool, CPU-task sizes, retries kept.
        container, k8s = _executor(spec, platform, task)
        assert "accelerator" not in container["resources"] and "nodeSelector" not in k8s, name
        assert container["resources"]["resourceMemoryLimit"] == RES.memory_limit
        assert task.retry_policy.max_retry_count == 3


def test_one_worker_compiles_as_before_without_a_trainjob(tmp_path):
    _, spec, _ = _compile("experiment", tmp_path)
    assert "trainjob" not in _tasks(spec)["fedavg-train"].inputs.parameters


def test_gpus_a_cpu_stage_cannot_use_are_refused(tmp_path):
    from fedcore.errors import ConfigError

    cfg = config_from_dict({**CFG, "train": {"device": "cpu"}})
    with pytest.raises(ConfigError, match="--gpus 2 with train.device=cpu: the stage would hold 2 GPUs"):
        build_pipeline("experiment", cfg, PipelineOptions(resources=RES))
    with pytest.raises(ConfigError, match="--gpus 2 with train.device=cpu"):  # a --set override counts too
        build_pipeline("experiment", config_from_dict(CFG), PipelineOptions(resources=RES,
                                                                            overrides=("train.device=cpu",)))
    build_pipeline("experiment", cfg, PipelineOptions(resources=RES.model_copy(update={"accelerators": 1})))


def _stage_container(path):
    spec, platform = load_specs(path)
    return _executor(spec, platform, _tasks(spec)["fedavg-train"])


@pytest.mark.parametrize(("device", "gpus", "expected"), [
    ("cpu", None, None), ("auto", None, "1"), ("cuda", None, "1"), ("cpu", 0, None), ("auto", 0, None),
    ("auto", 2, "2"),
])
def test_stage_gpus_follow_train_device_unless_gpus_is_given(device, gpus, expected, tmp_path):
    """Issue 71.1: a config pinned to the CPU compiled into a stage that held a GPU and waited for a GPU node."""
    config = tmp_path / "cfg.yaml"
    config.write_text(yaml.safe_dump({**CFG, "train": {"device": device}}))
    out = tmp_path / "experiment.yaml"
    argv = ["pipeline", "compile", "experiment", str(config), "--out", str(out)]
    cli.main(argv + ([] if gpus is None else ["--gpus", str(gpus)]))
    container, k8s = _stage_container(out)

    resources = dict(container["resources"])
    assert (resources["accelerator"]["resourceCount"] if "accelerator" in resources else None) == expected
    assert ("nodeSelector" in k8s, "tolerations" in k8s) == (expected is not None,) * 2


def test_a_set_override_to_the_cpu_drops_the_gpu(tmp_path):
    path = compile_pipeline(build_pipeline("experiment", config_from_dict(CFG),
                                           PipelineOptions(overrides=("train.device=cpu",))), tmp_path / "e.yaml")
    container, _ = _stage_container(path)
    assert "accelerator" not in container["resources"]


def test_gpus_help_shows_its_default(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    cli.main(["pipeline", "compile", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 1, or 0 with train.device=cpu)" in text

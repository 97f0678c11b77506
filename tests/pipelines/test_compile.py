"""Compiled packages parse into kfp's PipelineSpec/PlatformSpec protos and carry the cluster settings."""

from __future__ import annotations

import pytest
import yaml
from google.protobuf import json_format

from fedcore.deploy import env
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
    assert "nodeSelector" not in k8s and "tolerations" not in k8s
    assert k8s["secretAsEnv"][0]["secretName"] == env.S3_SECRET
    assert tasks["prepare-data"].caching_options.enable_cache
    assert not tasks["start-tracking"].caching_options.enable_cache
    assert not tasks["prepare-data"].HasField("retry_policy")


def test_cache_keys_include_the_config_hash(tmp_path):
    cfg = config_from_dict(CFG)
    _, spec, _ = _compile("experiment", tmp_path)
    stage = _tasks(spec)["fedavg-train"]
    assert stage.inputs.parameters["config_hash"].runtime_value.constant.string_value == cfg.config_hash()
    assert stage.inputs.parameters["stage"].runtime_value.constant.string_value == "train"


def test_sweep_fans_out_with_parallel_for_and_in_with_collected(tmp_path):
    spec_ = SweepSpec(methods=["fedavg", "fedprox"], seeds=[0, 1], settings={"noisy": [], "clean": ["noise.type=none"]})
    _, spec, _ = _compile("sweep", tmp_path, sweep=spec_)
    root = spec.root.dag.tasks
    loop = next(t for t in root.values() if t.WhichOneof("iterator") == "parameter_iterator")
    items = json_format.MessageToDict(loop)["parameterIterator"]["items"]["raw"]

    assert [i["setting"] for i in yaml.safe_load(items)] == ["noisy", "clean"]
    body = spec.components[loop.component_ref.name].dag.tasks
    names = {t.task_info.name for t in body.values()}
    assert {"fedavg-s0-train", "fedavg-s1-train", "fedprox-s0-train", "fedprox-s1-evaluate", "prepare-data"} <= names
    compare = next(t for t in root.values() if t.task_info.name == "compare")
    rows = compare.inputs.parameters["rows"]
    assert rows.task_output_parameter.producer_task == next(k for k, t in root.items() if t is loop)


def test_retrain_runs_on_parameters_and_never_caches_the_decision(tmp_path):
    _, spec, _ = _compile("retrain", tmp_path, data_prefix="s3://bucket/snapshots/", model_name="digits-champ")
    params = spec.root.input_definitions.parameters
    tasks = _tasks(spec)

    assert params["data_prefix"].default_value.string_value == "s3://bucket/snapshots/"
    assert params["model_name"].default_value.string_value == "digits-champ"
    assert not tasks["latest-snapshot"].caching_options.enable_cache
    assert not tasks["champion"].caching_options.enable_cache
    ids = {tid: t.task_info.name for tid, t in spec.root.dag.tasks.items()}
    assert {ids[d] for d in tasks["champion"].dependent_tasks} >= {"fedavg-evaluate", "fedavg-train", "latest-snapshot"}

"""Task settings and task groups shared by the pipelines: resources, credentials, caching,
the chain of stage tasks, evaluate, and the exit handler that closes the MLflow parent.

Only Kubernetes plumbing and graph shape live here; what a task computes is in
`components/` and `fedcore.pipeline`. Locally kfp ignores the Kubernetes settings (it
warns once per task), so the pipeline object run on a laptop is the one submitted to the cluster.
"""

from __future__ import annotations

from typing import Any

from kfp import dsl, kubernetes

from components import (
    evaluate,
    finish_tracking,
    identify_relabel_stage,
    identify_stage,
    relabel_stage,
    run_stage,
)
from fedcore.deploy.env import CLIENT_POD_LABEL, DATASET_CACHE_MOUNT, MLFLOW_CLIENT_KEYS
from fedcore.pipeline.plan import StageShape
from fedcore.pipeline.resources import CONFIG_MAP_KEYS, SECRET_KEYS, PipelineResources

# A stage's component follows what it yields besides its checkpoint (`Stage.yields`).
STAGE_COMPONENTS = {
    (): run_stage,
    ("verdicts",): identify_stage,
    ("labels",): relabel_stage,
    ("labels", "verdicts"): identify_relabel_stage,
}
EXPERIMENT_RUN = {"setting": {}, "methods": [], "seeds": [], "slot": -1, "slots": 0}  # not a sweep slot


def light(task: dsl.PipelineTask, res: PipelineResources, name: str, cache: bool = True) -> dsl.PipelineTask:
    """A CPU task: image, requests and limits, S3/MLflow settings from the Secret and ConfigMap, caching."""
    task.set_display_name(name)
    task.set_container_image(res.image)
    task.set_cpu_request(res.cpu_request).set_memory_request(res.memory_request)
    task.set_cpu_limit(res.cpu_limit).set_memory_limit(res.memory_limit)
    # Caching keys on the inputs, which always include the config and the run-time overrides;
    # tasks that read mutable state (MLflow runs, the newest snapshot) opt out.
    task.set_caching_options(cache)
    kubernetes.use_secret_as_env(task, res.secret, {k: k for k in SECRET_KEYS})
    if res.tracking_secret:  # MLflow's non-admin pod user (basic-auth)
        kubernetes.use_secret_as_env(task, res.tracking_secret, {k: k for k in MLFLOW_CLIENT_KEYS})
    kubernetes.use_config_map_as_env(task, res.config_map, {k: k for k in CONFIG_MAP_KEYS})
    kubernetes.add_pod_label(task, *CLIENT_POD_LABEL)  # the NetworkPolicies admit only labelled pods
    if res.cache_pvc:
        kubernetes.mount_pvc(task, res.cache_pvc, DATASET_CACHE_MOUNT)
    return task


def training(task: dsl.PipelineTask, res: PipelineResources, name: str) -> dsl.PipelineTask:
    """A training stage: a light task plus stage-sized resources, the accelerator, the GPU node pool, retries.

    With `res.workers > 1` the task only submits and watches a TrainJob, whose nodes get the
    stage's resources and GPUs: it stays a light CPU task (with the retries, which resubmit).
    """
    light(task, res, name)
    if res.workers == 1:
        task.set_cpu_request(res.stage_cpu_request).set_memory_request(res.stage_memory_request)
        task.set_cpu_limit(res.stage_cpu_limit).set_memory_limit(res.stage_memory_limit)
    if res.gpus() and res.workers == 1:
        task.set_accelerator_type(res.accelerator_type).set_accelerator_limit(res.gpus())
        for key, value in res.node_selector.items():
            kubernetes.add_node_selector(task, key, value)
        for t in res.tolerations:
            kubernetes.add_toleration(task, key=t.key, operator=t.operator, value=t.value, effect=t.effect)
    if res.retries:
        task.set_retry(res.retries, backoff_duration="60s", backoff_factor=2)
    return task


def exit_task(res: PipelineResources, config: Any, overrides: Any, settings: Any) -> dsl.PipelineTask:
    """The exit handler's task: it closes the parent MLflow run whatever happened. It may take
    only pipeline inputs, so it finds the parent by the Kubeflow run id."""
    done = finish_tracking(config=config, overrides=overrides, job_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                           settings=settings)
    return light(done, res, "finish-tracking", cache=False)


def stage_chain(res: PipelineResources, label: str, stages: StageShape, dataset: Any, tracking: Any,
                **inputs: Any) -> dsl.PipelineTask:
    """One task per stage, each with its stage's component, resuming the previous checkpoint
    and MLflow run; returns the last.

    inputs: config, overrides, setting, methods, seeds, slot, slots and optionally data_root.
    """
    names = [name for name, _ in stages]
    prev = None
    # Compile-time constants: the cluster shape, which a run's inputs do not change.
    cluster = {"trainjob": res.model_dump(mode="json", exclude_none=True)} if res.workers > 1 else {}
    for name, yields in stages:
        extra = {} if prev is None else {"previous": prev.outputs["checkpoint"], "run_id": prev.outputs["Output"]}
        extra.update(cluster)
        component = STAGE_COMPONENTS[tuple(sorted(yields))]
        task = component(stage=name, stages=names, label=f"{label}-{name}", dataset=dataset, tracking=tracking,
                         **inputs, **extra)
        prev = training(task, res, f"{label}-{name}")
    assert prev is not None, "a method declares at least one stage"
    return prev


def evaluation(res: PipelineResources, label: str, last: dsl.PipelineTask, dataset: Any, report: Any,
               tracking: Any, **inputs: Any) -> dsl.PipelineTask:
    task = evaluate(dataset=dataset, run=last.outputs["checkpoint"], report=report, run_id=last.outputs["Output"],
                    tracking=tracking, label=f"{label}-evaluate", **inputs)
    return light(task, res, f"{label}-evaluate")

"""Task settings shared by the pipelines: image, resources, credentials, placement, caching.

Only Kubernetes plumbing lives here; what a task computes is in `components/` and
`fedcore.pipeline`. Locally kfp ignores these settings (it warns once per task), so
the pipeline object run on a laptop is the one submitted to the cluster.
"""

from __future__ import annotations

from typing import Any

from kfp import dsl, kubernetes

from components import evaluate, run_stage
from fedcore.deploy.env import CLIENT_POD_LABEL, DATASET_CACHE_MOUNT
from fedcore.pipeline.resources import CONFIG_MAP_KEYS, SECRET_KEYS, PipelineResources


def light(task: dsl.PipelineTask, res: PipelineResources, name: str, cache: bool = True) -> dsl.PipelineTask:
    """A CPU task: image, requests, S3/MLflow settings from the Secret and ConfigMap, caching."""
    task.set_display_name(name)
    task.set_container_image(res.image)
    task.set_cpu_request(res.cpu_request).set_memory_request(res.memory_request)
    # Caching keys on the inputs, which always include the config (and its hash) as text;
    # tasks that read mutable state (MLflow runs, the newest snapshot) opt out.
    task.set_caching_options(cache)
    kubernetes.use_secret_as_env(task, res.secret, {k: k for k in SECRET_KEYS})
    kubernetes.use_config_map_as_env(task, res.config_map, {k: k for k in CONFIG_MAP_KEYS})
    kubernetes.add_pod_label(task, *CLIENT_POD_LABEL)  # the NetworkPolicies admit only labelled pods
    if res.cache_pvc:
        kubernetes.mount_pvc(task, res.cache_pvc, DATASET_CACHE_MOUNT)
    return task


def training(task: dsl.PipelineTask, res: PipelineResources, name: str) -> dsl.PipelineTask:
    """A training stage: a light task plus the accelerator, the GPU node pool and retries."""
    light(task, res, name)
    task.set_cpu_request(res.stage_cpu_request).set_memory_request(res.stage_memory_request)
    if res.accelerators:
        task.set_accelerator_type(res.accelerator_type).set_accelerator_limit(res.accelerators)
        for key, value in res.node_selector.items():
            kubernetes.add_node_selector(task, key, value)
        for t in res.tolerations:
            kubernetes.add_toleration(task, key=t.key, operator=t.operator, value=t.value, effect=t.effect)
    if res.retries:
        task.set_retry(res.retries, backoff_duration="60s", backoff_factor=2)
    return task


def stage_chain(res: PipelineResources, label: str, stages: tuple[str, ...], dataset: Any, tracking: Any,
                **config: Any) -> dsl.PipelineTask:
    """One run_stage task per stage, each resuming the previous checkpoint and MLflow run; returns the last.

    config: config_yaml, overrides, config_hash and optionally setting / data_root.
    """
    prev = None
    for stage in stages:
        extra = {} if prev is None else {"previous": prev.outputs["checkpoint"], "run_id": prev.outputs["Output"]}
        task = run_stage(stage=stage, dataset=dataset, tracking=tracking, **config, **extra)
        prev = training(task, res, f"{label}-{stage}")
    assert prev is not None, "a method declares at least one stage"
    return prev


def evaluation(res: PipelineResources, label: str, last: dsl.PipelineTask, dataset: Any, report: Any,
               tracking: Any, **config: Any) -> dsl.PipelineTask:
    task = evaluate(dataset=dataset, run=last.outputs["checkpoint"], report=report, run_id=last.outputs["Output"],
                    tracking=tracking, **config)
    return light(task, res, f"{label}-evaluate")

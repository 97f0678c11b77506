"""The tune's search space as a Katib Experiment (kubeflow.org/v1beta1), for a cluster.

The same dimensions (`fedcore.tuning.space`) and the same validation objective as `fedcore tune`;
each trial is one pod running `fedcore run` on the config (mounted from a ConfigMap rendered
beside the Experiment) with the trial's values as `--set` overrides, and `--katib-metrics` makes it
print the final validation metrics as `name=value` lines, the format of Katib's StdOut collector.
Katib's TPE (its hyperopt suggestion) draws the points, seeded like the local tune.

Validation is offline: the Experiment against the OpenAPI schema of Katib's Go types vendored in
fedcore/deploy/schemas/ (scripts/vendor_katib_schema.py; Katib's CRD itself carries no schema), and
the trial's Job, a plain batch/v1 Job, by kubernetes-validate and the stack's security policy.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from fedcore.config import ExperimentConfig
from fedcore.deploy.env import CLIENT_POD_LABEL, DATASET_CACHE_MOUNT
from fedcore.pipeline.resources import CONFIG_MAP_KEYS, PipelineResources, secret_env
from fedcore.pipeline.trainjob import stage_trainjob, strict
from fedcore.registries import load_config
from fedcore.tuning.space import Dim, search_space
from fedcore.tuning.study import OBJECTIVES

API_VERSION = "kubeflow.org/v1beta1"
SCHEMA = Path(__file__).resolve().parents[1] / "deploy" / "schemas" / "katib-experiment.v1beta1.json"
CONFIG_PATH = "/etc/fedcore/experiment.yaml"
CONTAINER = "fedcore"


def katib_name(path: str) -> str:
    """'method.params.mu' -> 'method-params-mu' (Katib names: DNS-label-like)."""
    return re.sub(r"[^a-z0-9-]", "-", path.lower().replace("_", "-").replace(".", "-"))


def metric_name(key: str) -> str:
    """'final/val_acc_last10' -> 'val_acc_last10': what `fedcore run --katib-metrics` prints."""
    return key.split("/", 1)[-1]


def parameter(d: Dim) -> dict[str, Any]:
    space = {"min": repr(int(d.low)) if d.integer else repr(float(d.low)),
             "max": repr(int(d.high)) if d.integer else repr(float(d.high)),
             "distribution": "logUniform" if d.log else "uniform"}
    return {"name": katib_name(d.path), "parameterType": "int" if d.integer else "double", "feasibleSpace": space}


def trial_job(cfg: ExperimentConfig, dims: list[Dim], res: PipelineResources, config_map: str,
              data: str | None) -> dict[str, Any]:
    """The batch/v1 Job of one trial, with ${trialParameters.*} placeholders."""
    args = [CONFIG_PATH, "--out", "/tmp/run", "--no-progress", "--katib-metrics"]
    for d in dims:
        args += ["--set", f"{d.path}=${{trialParameters.{katib_name(d.path).replace('-', '_')}}}"]
    args += ["--data", data] if data else []
    env = secret_env(res)
    env += [{"name": k, "valueFrom": {"configMapKeyRef": {"name": res.config_map, "key": k, "optional": True}}}
            for k in CONFIG_MAP_KEYS]
    gpus = res.gpus(cfg.train.device) if cfg.train.device != "cpu" else 0
    limits = {"cpu": res.stage_cpu_limit, "memory": res.stage_memory_limit, **({res.accelerator_type: gpus}
                                                                                 if gpus else {})}
    container = {
        "name": CONTAINER, "image": res.image, "command": ["fedcore", "run"], "args": args, "env": env,
        "resources": {"requests": {"cpu": res.stage_cpu_request, "memory": res.stage_memory_request}, "limits": limits},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/fedcore", "readOnly": True},
                         {"name": "tmp", "mountPath": "/tmp"}, {"name": "cache", "mountPath": DATASET_CACHE_MOUNT}],
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never", "serviceAccountName": res.service_account, "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "runAsGroup": 10001, "fsGroup": 10001,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": "config", "configMap": {"name": config_map}},
                    {"name": "tmp", "emptyDir": {"sizeLimit": "8Gi"}},
                    ({"name": "cache", "persistentVolumeClaim": {"claimName": res.cache_pvc}} if res.cache_pvc
                     else {"name": "cache", "emptyDir": {"sizeLimit": "8Gi"}})],
    }
    if gpus:
        pod["nodeSelector"] = dict(res.node_selector)
        pod["tolerations"] = [t.model_dump(exclude_none=True) for t in res.tolerations]
    return {"apiVersion": "batch/v1", "kind": "Job",
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": dict([CLIENT_POD_LABEL])}, "spec": pod}}}


def experiment(cfg: ExperimentConfig, config_yaml: str, dims: list[Dim], objective: str, trials: int,
               res: PipelineResources, name: str, parallel: int = 2, data: str | None = None) -> list[dict[str, Any]]:
    """[ConfigMap with the config, Katib Experiment]: apply both in the fedcore namespace."""
    labels = {"app.kubernetes.io/part-of": "fedcore", "app.kubernetes.io/component": "tune"}
    cm_name = f"{name}-config"
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": cm_name, "labels": labels},
                  "data": {"experiment.yaml": config_yaml}}
    exp = {
        "apiVersion": API_VERSION, "kind": "Experiment", "metadata": {"name": name, "labels": labels},
        "spec": {
            "objective": {"type": "maximize", "objectiveMetricName": metric_name(objective),
                          "additionalMetricNames": [metric_name(objective).replace("_last10", "_best")]},
            "algorithm": {"algorithmName": "tpe", "algorithmSettings": [{"name": "random_state",
                                                                         "value": str(cfg.seed)}]},
            "parallelTrialCount": parallel, "maxTrialCount": trials, "maxFailedTrialCount": trials,
            "metricsCollectorSpec": {"collector": {"kind": "StdOut"}},
            "parameters": [parameter(d) for d in dims],
            "trialTemplate": {
                "primaryContainerName": CONTAINER,
                "trialParameters": [{"name": katib_name(d.path).replace("-", "_"), "reference": katib_name(d.path),
                                     "description": d.path} for d in dims],
                "trialSpec": trial_job(cfg, dims, res, cm_name, data),
            },
        },
    }
    return [config_map, exp]


@cache
def experiment_schema() -> dict[str, Any]:
    return json.loads(SCHEMA.read_text())


def validate_experiment(obj: dict[str, Any]) -> list[str]:
    """Problems of an Experiment against the vendored schema, strict (unknown fields refused)."""
    import jsonschema  # lazy: not a declared dependency; offline checks only

    problems = []
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != "Experiment":
        problems.append(f"not a {API_VERSION} Experiment: {obj.get('apiVersion')}/{obj.get('kind')}")
    schema = strict(experiment_schema())
    for err in sorted(jsonschema.Draft7Validator(schema).iter_errors(obj), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in err.absolute_path) or "(root)"
        problems.append(f"{where}: {err.message}")
    names = {p["name"] for p in obj.get("spec", {}).get("parameters", [])}
    for tp in obj.get("spec", {}).get("trialTemplate", {}).get("trialParameters", []):
        if tp.get("reference") not in names:
            problems.append(f"trialParameter {tp.get('name')} refers to no parameter ({tp.get('reference')})")
    return problems


def workloads(config: str = "configs/quickstart.yaml") -> list[dict[str, Any]]:
    """What fedcore creates at run time, rendered from `config`: a two-node stage's TrainJob, and
    the Katib Experiment (with its ConfigMap) of `fedcore deploy katib`; `fedcore deploy check` holds
    them to the stack's rules."""
    res = PipelineResources(workers=2)
    objects = [stage_trainjob("fedcore-check-stage", "s3://fedcore/trainjobs/check/spec.json", res)]
    cfg = load_config(config, ["data.validation.fraction=0.1"])
    dims = search_space(cfg, None)
    objects += experiment(cfg, cfg.to_yaml(), dims, OBJECTIVES["last10"].format(m="score"), 4, res,
                          katib_name(f"fedcore-tune-{cfg.method.name}"), 2, None)
    return objects

"""A Kubeflow Trainer TrainJob that runs fedcore over several nodes.

The TrainJob (trainer.kubeflow.org/v1alpha1) refers to Trainer's `torch-distributed`
ClusterTrainingRuntime, which starts `numNodes` pods and sets torchrun's PET_* variables
(nodes, processes per node, node rank, master address); the container's command is then
`torchrun -m MODULE ARGS`. Two uses:

- `trainjob_manifest`: `torchrun -m fedcore run ...`, a whole experiment (the entry point of
  `fedcore run --nproc`), for users who apply the manifest themselves;
- `stage_trainjob`: `torchrun -m fedcore.pipeline.ranks s3://.../spec.json`, one pipeline
  stage; the stage task submits it and waits for it (`fedcore.pipeline.trainjob_stage`) when
  `resources.workers > 1`.

Validation is offline, against the TrainJob CRD's OpenAPI schema vendored in
fedcore/deploy/schemas/ (Kubeflow Trainer v2.3.0; see the schema's `$comment` and
scripts/vendor_trainjob_schema.py); `trainjob_problems` adds the stack's rules (limits, MLflow
credentials from Secrets) for `fedcore deploy check`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from fedcore.deploy.env import CLIENT_POD_LABEL, MLFLOW_CLIENT_KEYS, TRAINJOB_POD_LABEL
from fedcore.deploy.stack import from_secret
from fedcore.pipeline.resources import CONFIG_MAP_KEYS, PipelineResources, secret_env

API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME = "torch-distributed"  # ClusterTrainingRuntime installed with Kubeflow Trainer
SCHEMA = Path(__file__).resolve().parents[1] / "deploy" / "schemas" / "trainjob.v1alpha1.json"
PATCH_MANAGER = "fedcore.io/pipeline"
# The dataset-cache PVC is ReadWriteOnce and cannot follow pods onto several nodes, so a
# TrainJob's pods stage s3:// datasets into their own scratch space (the image keeps /tmp writable).
NODE_CACHE = "/tmp/fedcore-cache"


def trainjob_manifest(name: str, run_args: Sequence[str], res: PipelineResources, nodes: int,
                      runtime: str = RUNTIME) -> dict[str, Any]:
    """The TrainJob for `fedcore run <run_args>` on `nodes` nodes with `res.accelerators` GPUs each."""
    return build_trainjob(name, "fedcore", ["run", *run_args], res, nodes, runtime)


def stage_trainjob(name: str, spec_uri: str, res: PipelineResources,
                   owner: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The TrainJob of one pipeline stage: `res.workers` nodes run `fedcore.pipeline.ranks` on the
    stage spec at `spec_uri` (s3://). owner: an ownerReference (the stage's pod), so that
    deleting the pipeline run's pods deletes the job too."""
    tj = build_trainjob(name, "fedcore.pipeline.ranks", [spec_uri], res, res.workers)
    if owner:
        tj["metadata"]["ownerReferences"] = [dict(owner)]
    return tj


def build_trainjob(name: str, module: str, args: Sequence[str], res: PipelineResources, nodes: int,
                   runtime: str = RUNTIME) -> dict[str, Any]:
    """`torchrun -m module args` on `nodes` nodes, `max(res.gpus(), 1)` ranks each.

    Every node gets the stage's CPU/memory requests, its GPUs, the S3 keys and the client
    settings as env vars (FEDCORE_CACHE: a scratch folder, see NODE_CACHE), and (through a
    runtime patch) the pod labels the NetworkPolicies admit (MLflow and S3; one rank from
    another), the service account, and the GPU node selector and tolerations.
    """
    gpus = res.gpus()
    # Limits as on the stage's own pod: a node that runs away cannot starve the others on its host.
    resources: dict[str, Any] = {"requests": {"cpu": res.stage_cpu_request, "memory": res.stage_memory_request},
                                 "limits": {"cpu": res.stage_cpu_limit, "memory": res.stage_memory_limit}}
    if gpus:
        resources["limits"][res.accelerator_type] = gpus
    env = secret_env(res)
    env += [{"name": k, "valueFrom": {"configMapKeyRef": {"name": res.config_map, "key": k, "optional": True}}}
            for k in CONFIG_MAP_KEYS if k != "FEDCORE_CACHE"]
    env.append({"name": "FEDCORE_CACHE", "value": NODE_CACHE})
    pod: dict[str, Any] = {"serviceAccountName": res.service_account}
    if gpus:
        pod["nodeSelector"] = dict(res.node_selector)
        pod["tolerations"] = [t.model_dump(exclude_none=True) for t in res.tolerations]
    patch = {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {
            "metadata": {"labels": dict([CLIENT_POD_LABEL, TRAINJOB_POD_LABEL])}, "spec": pod}}}}]}}}}
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "fedcore"}},
        "spec": {
            "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": runtime},
            "trainer": {"image": res.image, "command": ["torchrun", "-m", module], "args": list(args),
                        "numNodes": nodes, "numProcPerNode": max(gpus, 1), "resourcesPerNode": resources,
                        "env": env},
            "runtimePatches": [patch],
        },
    }


@cache
def trainjob_schema() -> dict[str, Any]:
    return json.loads(SCHEMA.read_text())


def strict(schema: Any) -> Any:
    """The schema with unknown fields rejected wherever it lists properties (as the API server's
    strict field validation does), except where Kubernetes keeps unknown fields."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out \
            and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def validate_trainjob(obj: Mapping[str, Any]) -> list[str]:
    """Problems of a TrainJob manifest against the vendored CRD schema (empty list: valid).

    The CRD's CEL rules (x-kubernetes-validations) need an API server and are not checked.
    """
    import jsonschema  # lazy: not a declared dependency; offline checks only

    problems = []
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != "TrainJob":
        problems.append(f"not a {API_VERSION} TrainJob: {obj.get('apiVersion')}/{obj.get('kind')}")
    validator = jsonschema.Draft7Validator(strict(trainjob_schema()))
    for err in sorted(validator.iter_errors(dict(obj)), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in err.absolute_path) or "(root)"
        problems.append(f"{where}: {err.message}")
    return problems


def trainjob_problems(tj: Mapping[str, Any]) -> list[str]:
    """Schema, limits and credentials of a TrainJob (its trainer is not a pod spec)."""
    name = f"TrainJob/{tj.get('metadata', {}).get('name')}"
    trainer = (tj.get("spec") or {}).get("trainer") or {}
    res = trainer.get("resourcesPerNode") or {}
    problems = [f"{name}: {p}" for p in validate_trainjob(tj)]
    for part in ("requests", "limits"):
        missing = {"cpu", "memory"} - set(res.get(part) or {})
        if missing:
            problems.append(f"{name}: resourcesPerNode.{part} lacks {', '.join(sorted(missing))}")
    env = trainer.get("env") or []
    problems += [f"{name}: env {e['name']} is a literal; use secretKeyRef" for e in env
                 if "value" in e and e["name"] in (*MLFLOW_CLIENT_KEYS, "AWS_SECRET_ACCESS_KEY")]
    problems += [f"{name}: {k} not from a secretKeyRef" for k in MLFLOW_CLIENT_KEYS if not from_secret(env, k)]
    return problems

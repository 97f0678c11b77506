"""The TrainJob manifest validates against the vendored Kubeflow Trainer CRD schema, and the
validator catches what the API server would refuse."""

from __future__ import annotations

import copy

import pytest

from fedcore.pipeline.resources import PipelineResources
from fedcore.pipeline.trainjob import stage_trainjob, trainjob_manifest, trainjob_schema, validate_trainjob

ARGS = ["configs/quickstart.yaml", "--data", "s3://fedcore/data/q", "--out", "/runs/q"]


def test_schema_names_its_source_and_version():
    note = trainjob_schema()["$comment"]
    assert "kubeflow/trainer/blob/v2.3.0/manifests/base/crds/trainer.kubeflow.org_trainjobs.yaml" in note
    assert "658725bdae5c7e3a0854d93ac6ff492e109a22ab" in note


def test_gpu_trainjob_is_valid_and_runs_torchrun_on_every_gpu():
    tj = trainjob_manifest("fedavg-q", ARGS, PipelineResources(image="reg/fedcore:1", accelerators=4), nodes=2)
    assert validate_trainjob(tj) == []
    trainer = tj["spec"]["trainer"]
    assert trainer["command"] == ["torchrun", "-m", "fedcore"] and trainer["args"] == ["run", *ARGS]
    assert (trainer["numNodes"], trainer["numProcPerNode"], trainer["image"]) == (2, 4, "reg/fedcore:1")
    assert trainer["resourcesPerNode"]["limits"] == {"cpu": "8", "memory": "24Gi", "nvidia.com/gpu": 4}
    assert tj["spec"]["runtimeRef"]["name"] == "torch-distributed"
    pod = tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod = pod["template"]["spec"]["template"]
    # The NetworkPolicies admit it to MLflow and S3, and to the other ranks (k8s/base/networkpolicy.yaml).
    assert pod["metadata"]["labels"] == {"fedcore.io/client": "true", "fedcore.io/trainjob-rank": "true"}
    assert pod["spec"]["nodeSelector"] and pod["spec"]["serviceAccountName"] == "fedcore-pipeline-runner"
    names = {e["name"] for e in trainer["env"]}
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "MLFLOW_TRACKING_URI"} <= names
    creds = {e["name"]: e["valueFrom"]["secretKeyRef"]["name"] for e in trainer["env"]
             if e["name"] in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")}
    assert creds == dict.fromkeys(("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"), "fedcore-mlflow-client")
    # No dataset-cache PVC on the nodes (ReadWriteOnce): the cache is each pod's scratch space.
    assert [e for e in trainer["env"] if e["name"] == "FEDCORE_CACHE"] == [{"name": "FEDCORE_CACHE",
                                                                           "value": "/tmp/fedcore-cache"}]


def test_a_stage_trainjob_runs_the_ranks_on_its_spec_and_names_its_owner():
    res = PipelineResources(image="reg/fedcore:1", accelerators=2, workers=3)
    owner = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "blockOwnerDeletion": False}
    tj = stage_trainjob("fc-fedavg-train-0a1b2c3d", "s3://b/tj/fc-x/spec.json", res, owner)
    assert validate_trainjob(tj) == []
    trainer = tj["spec"]["trainer"]
    assert trainer["command"] == ["torchrun", "-m", "fedcore.pipeline.ranks"]
    assert trainer["args"] == ["s3://b/tj/fc-x/spec.json"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 2)  # workers nodes x accelerators ranks
    assert tj["metadata"]["ownerReferences"] == [owner]
    assert "ownerReferences" not in stage_trainjob("fc-y", "s3://b/s.json", res)["metadata"]


def test_cpu_trainjob_is_valid_without_gpu_placement():
    tj = trainjob_manifest("fedavg-q", ARGS, PipelineResources(accelerators=0), nodes=3)
    assert validate_trainjob(tj) == []
    trainer = tj["spec"]["trainer"]
    assert trainer["resourcesPerNode"]["limits"] == {"cpu": "8", "memory": "24Gi"} and trainer["numProcPerNode"] == 1


def _broken(edit):
    tj = copy.deepcopy(trainjob_manifest("t", ARGS, PipelineResources(), nodes=2))
    edit(tj)
    return validate_trainjob(tj)


@pytest.mark.parametrize(("edit", "expected"), [
    (lambda tj: tj["spec"]["trainer"].update(numNodes="two"), "spec.trainer.numNodes: 'two' is not of type 'integer'"),
    (lambda tj: tj["spec"]["trainer"].update(nodes=2), "'nodes' was unexpected"),
    (lambda tj: tj["spec"].pop("runtimeRef"), "'runtimeRef' is a required property"),
    (lambda tj: tj["spec"]["runtimeRef"].update(name=""), "spec.runtimeRef.name"),
    (lambda tj: tj.update(kind="PyTorchJob"), "not a trainer.kubeflow.org/v1alpha1 TrainJob"),
])
def test_validator_refuses_what_the_api_server_would(edit, expected):
    problems = _broken(edit)
    assert any(expected in p for p in problems), problems

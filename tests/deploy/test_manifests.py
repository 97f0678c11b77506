"""Rendered kustomize overlays: strict schema validity, names shared with fedcore.deploy.env,
GPU scheduling only in the gpu overlay, and the wiring between objects."""

from __future__ import annotations

import copy
import os
import subprocess
from urllib.parse import urlparse

import pytest

from fedcore.deploy import env
from fedcore.deploy import k8s as deploy

from .conftest import K8S, containers, find


@pytest.mark.parametrize("overlay", deploy.OVERLAYS)
def test_overlay_renders_and_every_object_validates_strictly(rendered, overlay):
    objects = rendered[overlay]
    kinds = {o["kind"] for o in objects}
    assert {"Namespace", "Deployment", "StatefulSet", "Job", "NetworkPolicy", "Role"} <= kinds
    assert deploy.K8S_VERSIONS == ("1.31.0", "1.33.0")
    assert deploy.validate(objects) == []


def test_strict_validation_rejects_an_unknown_field(rendered):
    broken = copy.deepcopy(find(rendered["local"], "Deployment", "mlflow"))
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    problems = deploy.validate([broken])
    assert len(problems) == 2 and all("imagePullPolicyy" in p for p in problems)


def test_secret_templates_validate_and_hold_only_placeholders(secret_templates):
    assert {s["metadata"]["name"] for s in secret_templates} == {env.S3_SECRET, env.DB_SECRET, env.MLFLOW_ADMIN_SECRET,
                                                                 env.MLFLOW_CLIENT_SECRET}
    assert deploy.validate(secret_templates) == []
    assert deploy.policy_violations(secret_templates) == []


def test_runner_lands_in_another_namespace_for_standalone_kfp(tmp_path):
    # docs/deploy.md's recipe: a throwaway kustomization that re-namespaces k8s/runner.
    runner = os.path.relpath(K8S / "runner", tmp_path)
    (tmp_path / "kustomization.yaml").write_text(f"namespace: kubeflow\nresources:\n  - {runner}\n")
    out = subprocess.run([deploy.find_kubectl(), "kustomize", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    objects = deploy.load_objects(out.stdout)
    assert {o["metadata"]["namespace"] for o in objects} == {"kubeflow"}
    binding = find(objects, "RoleBinding", env.PIPELINE_SERVICE_ACCOUNT)
    assert binding["subjects"][0]["namespace"] == "kubeflow"
    assert deploy.validate(objects) == [] and deploy.policy_violations(objects, "kubeflow") == []


def test_gpu_overlay_puts_the_smoke_job_on_a_gpu_pool(rendered):
    job = find(rendered["gpu"], "Job", "fedcore-smoke")
    spec = job["spec"]["template"]["spec"]
    (smoke,) = spec["containers"]
    assert smoke["resources"]["limits"][env.GPU_RESOURCE] == 1
    assert spec["nodeSelector"] == env.GPU_NODE_SELECTOR
    assert env.GPU_TOLERATION in spec["tolerations"]
    assert smoke["command"] + smoke["args"] == ["fedcore", "deploy", "smoke", "--require-gpu"]
    cache = find(rendered["gpu"], "PersistentVolumeClaim", env.DATASET_CACHE_PVC)
    assert cache["spec"]["accessModes"] == ["ReadWriteMany"]


def test_local_overlay_asks_for_no_gpu(rendered):
    for obj in rendered["local"]:
        spec = deploy.pod_spec(obj) or {}
        assert "nodeSelector" not in spec and "tolerations" not in spec, deploy.name_of(obj)
        for c in containers(obj):
            assert env.GPU_RESOURCE not in str(c["resources"]), deploy.name_of(obj)
    cache = find(rendered["local"], "PersistentVolumeClaim", env.DATASET_CACHE_PVC)
    assert cache["spec"]["accessModes"] == ["ReadWriteOnce"]


@pytest.mark.parametrize("overlay", deploy.OVERLAYS)
def test_names_and_urls_match_fedcore_env(rendered, overlay):
    objects = rendered[overlay]
    assert find(objects, "Namespace", env.K8S_NAMESPACE)
    assert {o["metadata"].get("namespace", env.K8S_NAMESPACE) for o in objects} == {env.K8S_NAMESPACE}
    assert find(objects, "ServiceAccount", env.PIPELINE_SERVICE_ACCOUNT)
    binding = find(objects, "RoleBinding", env.PIPELINE_SERVICE_ACCOUNT)
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": env.PIPELINE_SERVICE_ACCOUNT, "namespace": env.K8S_NAMESPACE}
    ]
    assert find(objects, "PersistentVolumeClaim", env.DATASET_CACHE_PVC)
    for url in (env.MLFLOW_SERVICE_URL, env.S3_SERVICE_URL):
        parsed = urlparse(url)
        service, namespace = parsed.hostname.split(".")[:2]
        assert namespace == env.K8S_NAMESPACE
        ports = [p["port"] for p in find(objects, "Service", service)["spec"]["ports"]]
        assert parsed.port in ports, url
    data = find(objects, "ConfigMap", env.RUNTIME_CONFIGMAP)["data"]
    assert set(data) <= set(env.ENV_VARS)
    assert data["MLFLOW_TRACKING_URI"] == env.MLFLOW_SERVICE_URL
    assert data["MLFLOW_S3_ENDPOINT_URL"] == env.S3_SERVICE_URL
    assert data["FEDCORE_CACHE"] == env.DATASET_CACHE_MOUNT


def test_client_pod_env_is_exactly_the_fedcore_contract(rendered):
    # The smoke Job is wired the way pipeline tasks must be: ConfigMap + S3 Secret + MLflow pod user.
    job = find(rendered["local"], "Job", "fedcore-smoke")
    (smoke,) = containers(job)
    cm = find(rendered["local"], "ConfigMap", env.RUNTIME_CONFIGMAP)
    names = set(cm["data"]) | {e["name"] for e in smoke["env"]}
    assert set(env.REQUIRED_FOR_STACK) <= names <= set(env.ENV_VARS)
    assert [s["configMapRef"]["name"] for s in smoke["envFrom"]] == [env.RUNTIME_CONFIGMAP]
    assert {e["valueFrom"]["secretKeyRef"]["name"] for e in smoke["env"]} == {env.S3_SECRET, env.MLFLOW_CLIENT_SECRET}
    spec = job["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == env.PIPELINE_SERVICE_ACCOUNT
    mounts = {m["name"]: m["mountPath"] for m in smoke["volumeMounts"]}
    (cache,) = [v["name"] for v in spec["volumes"] if "persistentVolumeClaim" in v]
    assert spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == env.DATASET_CACHE_PVC
    assert mounts[cache] == env.DATASET_CACHE_MOUNT
    key, value = env.CLIENT_POD_LABEL
    assert job["spec"]["template"]["metadata"]["labels"][key] == value
    assert smoke["image"] == env.DEFAULT_IMAGE


@pytest.mark.parametrize("overlay", deploy.OVERLAYS)
def test_every_secret_reference_matches_a_template(rendered, secret_templates, overlay):
    keys = {s["metadata"]["name"]: set(s["stringData"]) for s in secret_templates}
    refs = {
        (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for obj in rendered[overlay]
        for c in containers(obj)
        for e in c.get("env") or []
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert refs == {(name, key) for name, ks in keys.items() for key in ks}
    assert keys[env.S3_SECRET] == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert not [o for o in rendered[overlay] if o["kind"] == "Secret"], "secrets must never be applied by -k"


def test_mlflow_server_is_locked_to_its_service_name_and_stores(rendered):
    deployment = find(rendered["gpu"], "Deployment", "mlflow")
    (server,) = containers(deployment)
    args = dict(a.removeprefix("--").split("=", 1) for a in server["args"])
    allowed = args["allowed-hosts"].split(",")
    assert urlparse(env.MLFLOW_SERVICE_URL).netloc in allowed and "*" not in allowed
    assert args["artifacts-destination"].startswith(f"s3://{env.S3_BUCKET}/")
    values = {e["name"]: e.get("value") for e in server["env"]}
    assert values["MLFLOW_BACKEND_STORE_URI"].startswith("postgresql+psycopg://postgres.")
    assert "@" not in values["MLFLOW_BACKEND_STORE_URI"]
    assert values["MLFLOW_S3_ENDPOINT_URL"] == env.S3_SERVICE_URL
    assert server["image"] == env.MLFLOW_IMAGE
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert server[probe]["httpGet"]["path"] == "/health"
    bucket_job = find(rendered["gpu"], "Job", "create-bucket")
    assert containers(bucket_job)[0]["command"][-1] == env.S3_BUCKET


def test_network_policies_close_the_namespace_and_open_only_the_paths_needed(rendered):
    policies = {p["metadata"]["name"]: p["spec"] for p in rendered["local"] if p["kind"] == "NetworkPolicy"}
    assert policies["default-deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    selects = {
        spec["podSelector"]["matchLabels"]["app.kubernetes.io/name"]: spec["ingress"]
        for name, spec in policies.items()
        if name not in ("default-deny-ingress", "trainjob-ranks")
    }
    assert set(selects) == {"mlflow", "postgres", "seaweedfs"}
    assert selects["postgres"] == [
        {"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "mlflow"}}}],
         "ports": [{"protocol": "TCP", "port": 5432}]}
    ]
    client = {
        "namespaceSelector": {"matchLabels": dict([env.CLIENT_NAMESPACE_LABEL])},
        "podSelector": {"matchLabels": dict([env.CLIENT_POD_LABEL])},
    }
    assert client in selects["mlflow"][0]["from"] and client in selects["seaweedfs"][0]["from"]
    labels = find(rendered["local"], "Namespace", env.K8S_NAMESPACE)["metadata"]["labels"]
    assert labels[env.CLIENT_NAMESPACE_LABEL[0]] == env.CLIENT_NAMESPACE_LABEL[1]
    # The ranks of a TrainJob reach one another (rendezvous, collectives), and nothing else does.
    ranks = {"matchLabels": dict([env.TRAINJOB_POD_LABEL])}
    assert policies["trainjob-ranks"] == {"podSelector": ranks, "policyTypes": ["Ingress"],
                                          "ingress": [{"from": [{"podSelector": ranks}]}]}


def test_every_container_image_is_one_of_the_pinned_stack_images(rendered):
    images = {c["image"] for objs in rendered.values() for o in objs for c in containers(o)}
    assert images == {env.DEFAULT_IMAGE, env.MLFLOW_IMAGE, "postgres:16.10-alpine", "chrislusf/seaweedfs:4.00"}


@pytest.mark.parametrize("overlay", deploy.OVERLAYS)
def test_the_runner_may_submit_and_watch_trainjobs_in_its_namespace_only(rendered, overlay):
    from fedcore.pipeline.trainjob import API_VERSION
    from fedcore.pipeline.trainjob_stage import PLURAL

    objects = rendered[overlay]
    role = find(objects, "Role", env.PIPELINE_SERVICE_ACCOUNT)
    assert role["metadata"]["namespace"] == env.K8S_NAMESPACE  # a Role, not a ClusterRole
    rules = [r for r in role["rules"] if r["apiGroups"] == [API_VERSION.split("/")[0]]]
    assert rules == [{"apiGroups": ["trainer.kubeflow.org"], "resources": [PLURAL],
                      "verbs": ["create", "get", "watch", "delete"]}]
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]

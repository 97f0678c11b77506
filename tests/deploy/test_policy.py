"""The security policy over rendered objects: the real overlays pass, and each rule
fires on a deliberately broken copy (so a policy that checks nothing cannot pass)."""

from __future__ import annotations

import copy

import pytest

from fedcore.deploy import k8s as deploy

from .conftest import find


@pytest.mark.parametrize("overlay", deploy.OVERLAYS)
def test_rendered_overlay_satisfies_the_policy(rendered, overlay):
    assert deploy.policy_violations(rendered[overlay]) == []


def _server(c):
    return c["spec"]["template"]["spec"]["containers"][0]


def _set(path, value):
    def mutate(obj):
        *head, last = path
        node = obj
        for key in head:
            node = node[key]
        node[last] = value
    return mutate


POD = ["spec", "template", "spec"]
CONTAINER = [*POD, "containers", 0]
BREAKAGES = {
    "moving tag": (_set([*CONTAINER, "image"], "ghcr.io/mlflow/mlflow:latest"), "moving tag"),
    "no tag": (_set([*CONTAINER, "image"], "postgres"), "has no tag"),
    "root user": (_set([*POD, "securityContext", "runAsUser"], 0), "runs as uid 0"),
    "non-root off": (
        lambda o: (o["spec"]["template"]["spec"]["securityContext"].pop("runAsNonRoot"),
                   _server(o)["securityContext"].pop("runAsNonRoot")),
        "runAsNonRoot is not set",
    ),
    "privileged": (_set([*CONTAINER, "securityContext", "privileged"], True), "is privileged"),
    "escalation": (_set([*CONTAINER, "securityContext", "allowPrivilegeEscalation"], True), "allowPrivilegeEscalation"),
    "capability": (_set([*CONTAINER, "securityContext", "capabilities", "add"], ["NET_ADMIN"]), "capabilities"),
    "writable root": (_set([*CONTAINER, "securityContext", "readOnlyRootFilesystem"], False), "writable"),
    "no seccomp": (lambda o: o["spec"]["template"]["spec"]["securityContext"].pop("seccompProfile"), "seccomp"),
    "no limits": (lambda o: _server(o)["resources"].pop("limits"), "resources.limits lacks cpu, memory"),
    "no memory request": (lambda o: _server(o)["resources"]["requests"].pop("memory"), "requests lacks memory"),
    "no probe": (lambda o: _server(o).pop("livenessProbe"), "without readiness and liveness probes"),
    "literal password": (
        lambda o: _server(o)["env"].append({"name": "PGPASSWORD", "value": "hunter2hunter2"}),
        "env PGPASSWORD is a literal",
    ),
    "credential in uri": (
        _set([*CONTAINER, "args", 0], "--backend-store-uri=postgresql://mlflow:s3cr3tpass@db:5432/mlflow"),
        "credential-like text",
    ),
    "host network": (_set([*POD, "hostNetwork"], True), "hostNetwork is on"),
    "host path": (
        lambda o: o["spec"]["template"]["spec"]["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
        "is a hostPath",
    ),
    "other namespace": (_set(["metadata", "namespace"], "default"), "in namespace default"),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_policy_flags_each_broken_rule(rendered, breakage):
    mutate, expected = BREAKAGES[breakage]
    obj = copy.deepcopy(find(rendered["local"], "Deployment", "mlflow"))
    mutate(obj)
    problems = deploy.policy_violations([obj])
    assert any(expected in p for p in problems), problems
    assert all(p.startswith("Deployment/mlflow: ") for p in problems)


def test_a_secret_with_a_real_looking_value_is_flagged(secret_templates):
    filled = copy.deepcopy(secret_templates[0])
    filled["stringData"] = {k: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY" for k in filled["stringData"]}
    problems = deploy.policy_violations([filled])
    assert len(problems) == len(filled["stringData"]) and "REPLACE_ME only" in problems[0]


def test_an_aws_key_id_anywhere_is_flagged():
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"note": "AKIAIOSFODNN7EXAMPLE"}}
    assert deploy.policy_violations([cm]) == ["ConfigMap/x: credential-like text: 'AKIAIOSFODNN7EXAMPLE'"]


def test_a_secret_named_configmap_key_is_flagged():
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"AWS_SECRET_ACCESS_KEY": "x"}}
    assert deploy.policy_violations([cm]) == ["ConfigMap/x: data key AWS_SECRET_ACCESS_KEY looks secret"]


def test_cronjob_pods_are_inspected_too():
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "c"},
        "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "x", "image": "a:1"}]}}}}},
    }
    problems = deploy.policy_violations([cron])
    assert "CronJob/c: container x: runAsNonRoot is not set" in problems

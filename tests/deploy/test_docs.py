"""docs/deploy.md stays consistent with the manifests, the Secret templates, compose and
the CLI: the commands it shows name objects, keys and options that really exist."""

from __future__ import annotations

import re

import pytest
import yaml
from typer.testing import CliRunner

from fedcore import cli
from fedcore.deploy import env

from .conftest import REPO

GUIDE = (REPO / "docs" / "deploy.md").read_text()
COMMANDS = re.sub(r"\\\n\s*", "", GUIDE)  # join continued shell lines

REQUIRED = [
    "make image",
    f"docker tag {env.DEFAULT_IMAGE}",
    "make stack-up",
    "--runner docker",
    "fedcore deploy render --overlay gpu | kubectl apply -f -",
    "kubectl -n fedcore port-forward svc/mlflow 5000:5000",
    "fedcore pipeline compile sweep --out sweep.yaml",
    "fedcore pipeline submit experiment configs/quickstart.yaml --host http://localhost:8080 --experiment quickstart",
    'fedcore pipeline schedule retrain configs/quickstart.yaml --host http://localhost:8080 --cron "0 0 2 * * *"',
    "max concurrency 1",
    "No catch-up",
    "docker compose up -d --wait mlflow",
    "set -a; . ./.env; . docker/laptop.env; set +a",
    "fedcore pipeline run experiment configs/quickstart.yaml --local",
    env.MLFLOW_IMAGE,
]


@pytest.mark.parametrize("text", REQUIRED)
def test_guide_shows(text):
    assert text in GUIDE


def test_secret_commands_match_the_templates():
    templates = {}
    for path in (REPO / "k8s" / "secrets").glob("*.template.yaml"):
        doc = yaml.safe_load(path.read_text())
        templates[doc["metadata"]["name"]] = (doc["type"], set(doc["stringData"]))
    shown = {}
    for match in re.finditer(r"kubectl create secret generic (\S+) -n (\S+)([^\n]*)", COMMANDS):
        name, namespace, rest = match.groups()
        assert namespace in (env.K8S_NAMESPACE, "kubeflow")
        kind = re.search(r"--type=(\S+)", rest)
        keys = set(re.findall(r"--from-literal=(\w+)=", rest))
        shown.setdefault(name, set()).add((kind[1] if kind else "Opaque", frozenset(keys)))
    assert set(shown) == set(templates) == {env.S3_SECRET, env.DB_SECRET, env.MLFLOW_ADMIN_SECRET,
                                            env.MLFLOW_CLIENT_SECRET}
    for name, variants in shown.items():
        assert variants == {(templates[name][0], frozenset(templates[name][1]))}, name


def test_objects_named_in_kubectl_commands_exist(rendered):
    names = {(o["kind"], o["metadata"]["name"]) for o in rendered["gpu"]}
    short = {"deploy": "Deployment", "job": "Job", "svc": "Service"}
    ours = [line for line in COMMANDS.splitlines() if "-n fedcore" in line]
    found = [ref for line in ours for ref in re.findall(r"\b(deploy|job|svc)/([\w-]+)", line)]
    assert len(found) >= 6
    for kind, name in found:
        assert (short[kind], name) in names, f"{kind}/{name}"
    for name in re.findall(r"delete job ([\w -]+?) --ignore-not-found", COMMANDS)[0].split():
        assert ("Job", name) in names


def test_deploy_commands_use_real_options():
    runner = CliRunner()
    for sub, flags in re.findall(r"fedcore deploy ([\w-]+)((?: --[\w-]+(?: [\w.]+)?)*)", COMMANDS):
        result = runner.invoke(cli.app, ["deploy", sub, "--help"])
        assert result.exit_code == 0, sub
        for flag in re.findall(r"--[\w-]+", flags):
            assert flag in result.stdout, f"fedcore deploy {sub} {flag}"


def test_laptop_env_file_in_guide_matches_compose():
    block = re.search(r"cat > \.env <<EOF\n(.*?)\nEOF", GUIDE, re.S)[1]
    keys = {line.split("=", 1)[0] for line in block.splitlines()}
    compose = (REPO / "docker-compose.yml").read_text()
    assert keys == set(re.findall(r"\$\{(\w+):\?", compose))


def test_profile_and_gpu_names_match_env():
    profile = re.search(r"kind: Profile\n\s*metadata:\n\s*name: (\S+)", GUIDE)[1]
    assert profile == env.K8S_NAMESPACE
    key, value = next(iter(env.GPU_NODE_SELECTOR.items()))
    assert f"{key}={value}" in GUIDE and env.GPU_TOLERATION["key"] in GUIDE
    assert f"{env.CLIENT_POD_LABEL[0]}={env.CLIENT_POD_LABEL[1]}" in GUIDE
    assert f"{env.CLIENT_NAMESPACE_LABEL[0]}={env.CLIENT_NAMESPACE_LABEL[1]}" in GUIDE
    for name in env.ENV_VARS:
        assert f"`{name}`" in GUIDE, name


def test_multi_node_section_installs_the_trainer_the_schema_comes_from_and_uses_real_options():
    from fedcore.pipeline.trainjob import RUNTIME, trainjob_schema

    version = re.search(r"Kubeflow Trainer (v[\d.]+)", trainjob_schema()["$comment"])[1]
    assert f"manifests/overlays/manager?ref={version}" in GUIDE and f"overlays/runtimes?ref={version}" in GUIDE
    assert f"kubectl get clustertrainingruntime {RUNTIME}" in GUIDE
    assert f"{env.TRAINJOB_POD_LABEL[0]}={env.TRAINJOB_POD_LABEL[1]}" in GUIDE and "`trainjob-ranks`" in GUIDE
    (flags,) = [f for f in re.findall(r"fedcore pipeline submit experiment \S+ --host \S+ ((?:--[\w-]+ \S+ ?)+)",
                                      COMMANDS) if "--workers" in f]
    result = CliRunner().invoke(cli.app, ["pipeline", "submit", "--help"])
    assert result.exit_code == 0
    for flag in re.findall(r"--[\w-]+", flags):
        assert flag in result.stdout, flag

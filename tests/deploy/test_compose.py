"""docker-compose.yml for laptops: a well-formed file, non-root hardened services,
credentials only by interpolation, the same images and names as the cluster stack, and
client settings (docker/laptop.env) that are exactly fedcore's environment contract."""

from __future__ import annotations

import re

import pytest
import yaml

from fedcore.deploy import env
from fedcore.deploy import k8s as deploy

from .conftest import REPO, containers, find

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
INTERPOLATION = re.compile(r"\$\{(\w+)(?::?[-?+][^}]*)?\}")
# Names the compose file may take from .env besides fedcore's own variables.
STACK_ONLY_VARS = {"POSTGRES_USER", "POSTGRES_PASSWORD"}
SERVICE_KEYS = {
    "image", "build", "user", "read_only", "tmpfs", "environment", "volumes", "ports", "healthcheck",
    "depends_on", "cap_drop", "security_opt", "restart", "command", "entrypoint",
}


def laptop_env() -> dict[str, str]:
    lines = (REPO / "docker/laptop.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line.strip() and not line.startswith("#"))


def test_file_is_well_formed():
    assert set(COMPOSE) <= {"name", "services", "volumes", "networks", "secrets", "configs"}
    assert set(SERVICES) == {"postgres", "seaweedfs", "create-bucket", "mlflow"}
    declared = set(COMPOSE["volumes"])
    for name, svc in SERVICES.items():
        assert set(svc) <= SERVICE_KEYS, f"{name}: unknown keys {set(svc) - SERVICE_KEYS}"
        assert "image" in svc, name
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in SERVICES and cond["condition"] in ("service_healthy", "service_completed_successfully")
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            assert source in declared or (REPO / source).exists(), f"{name}: {source}"
        if "build" in svc:
            assert (REPO / svc["build"]["context"] / svc["build"]["dockerfile"]).is_file()
        for check in [svc.get("healthcheck")] if "healthcheck" in svc else []:
            assert check["test"][0] == "CMD"


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_service_is_non_root_and_hardened(name):
    svc = SERVICES[name]
    uid = str(svc["user"]).split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    assert svc["read_only"] is True and svc["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in svc["security_opt"]
    assert "privileged" not in svc and "network_mode" not in svc
    assert deploy._image_problem(svc["image"]) is None
    for port in svc.get("ports", []):
        assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond localhost"


def test_credentials_are_interpolated_never_literal():
    text = (REPO / "docker-compose.yml").read_text()
    assert not any(p.search(text) for p in deploy._CREDENTIAL_TEXT)
    for name, svc in SERVICES.items():
        for key, value in (svc.get("environment") or {}).items():
            if deploy._SECRET_NAME.search(key) or key in ("PGUSER", "POSTGRES_USER"):
                assert re.fullmatch(r"\$\{\w+:\?[^}]+\}", str(value)), f"{name}.{key} must come from .env"
    used = set(INTERPOLATION.findall(text))
    assert used <= set(env.ENV_VARS) | STACK_ONLY_VARS
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= used


def test_laptop_env_is_the_fedcore_contract():
    client = laptop_env()
    from_dotenv = set(INTERPOLATION.findall((REPO / "docker-compose.yml").read_text())) & set(env.ENV_VARS)
    assert set(client) <= set(env.ENV_VARS)
    assert set(env.REQUIRED_FOR_STACK) <= set(client) | from_dotenv
    assert not set(client) & from_dotenv, "credentials belong in .env, not in the committed file"
    published = {p.split(":")[1] for svc in SERVICES.values() for p in svc.get("ports", [])}
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_S3_ENDPOINT_URL"):
        assert re.fullmatch(r"http://localhost:(\d+)", client[key])[1] in published, key
    assert client["FEDCORE_S3_ADDRESSING"] == "path"


def test_same_images_buckets_and_server_settings_as_the_cluster(rendered):
    objects = rendered["local"]
    (postgres,) = containers(find(objects, "StatefulSet", "postgres"))
    (mlflow,) = containers(find(objects, "Deployment", "mlflow"))
    (seaweed,) = containers(find(objects, "Deployment", "seaweedfs"))
    assert SERVICES["postgres"]["image"] == postgres["image"]
    assert SERVICES["mlflow"]["image"] == SERVICES["create-bucket"]["image"] == mlflow["image"] == env.MLFLOW_IMAGE
    assert seaweed["image"].split(":")[1] == SERVICES["seaweedfs"]["image"].split(":")[1]
    args = dict(a.removeprefix("--").split("=", 1) for a in SERVICES["mlflow"]["command"][2:])
    assert args["artifacts-destination"] == dict(
        a.removeprefix("--").split("=", 1) for a in mlflow["args"]
    )["artifacts-destination"]
    assert "*" not in args["allowed-hosts"].split(",")
    assert SERVICES["create-bucket"]["command"][-1] == env.S3_BUCKET
    cluster_env = {e["name"]: e.get("value") for e in mlflow["env"]}
    compose_env = SERVICES["mlflow"]["environment"]
    # The laptop stack has no auth app: its MLflow listens on 127.0.0.1 only (the cluster's
    # runs --app-name basic-auth, tests/deploy/test_stack.py).
    auth_only = {"MLFLOW_AUTH_CONFIG_PATH", "MLFLOW_AUTH_ADMIN_USERNAME", "MLFLOW_AUTH_ADMIN_PASSWORD",
                 "MLFLOW_FLASK_SERVER_SECRET_KEY"}
    assert set(compose_env) == set(cluster_env) - auth_only and auth_only <= set(cluster_env)
    assert SERVICES["mlflow"]["ports"] == ["127.0.0.1:5000:5000"]
    assert "@" not in compose_env["MLFLOW_BACKEND_STORE_URI"]

"""The whole stack, checked offline (fedcore.deploy.stack, `fedcore deploy check`): MLflow with
its basic-auth app, every client pod's MLflow user from a Secret, the run-time workloads held to
the same rules; each check is shown failing on the thing it guards."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess

import pytest
import yaml

from fedcore import cli
from fedcore.cli.deploy import katib_problems, workload_problems
from fedcore.deploy import env
from fedcore.deploy import k8s as deploy
from fedcore.deploy.stack import client_credential_problems, mlflow_auth_problems
from fedcore.pipeline.trainjob import trainjob_problems
from fedcore.tuning.katib import workloads

from .conftest import K8S, containers, find


def mlflow_container(objects):
    return containers(find(objects, "Deployment", "mlflow"))[0]


@pytest.mark.parametrize("overlay", deploy.OVERLAYS)
def test_the_overlays_run_mlflow_with_basic_auth_and_pods_read_their_user_from_a_secret(rendered, overlay):
    objects = rendered[overlay]
    assert mlflow_auth_problems(objects) == [] and client_credential_problems(objects) == []
    c = mlflow_container(objects)
    assert "--app-name=basic-auth" in c["args"]
    admin = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e}
    assert admin["MLFLOW_AUTH_ADMIN_PASSWORD"] == {"name": env.MLFLOW_ADMIN_SECRET, "key": "password"}
    ini = find(objects, "ConfigMap", "mlflow-auth-config")["data"]["basic_auth.ini"]
    assert "default_permission = NO_PERMISSIONS" in ini
    # the auth database is the tracking database: the same Postgres, the same login
    backend = next(e["value"] for e in c["env"] if e["name"] == "MLFLOW_BACKEND_STORE_URI")
    assert f"database_uri = {backend}" in ini
    # only MLflow and the setup Job read the admin Secret
    readers = {o["metadata"]["name"] for o in objects for ct in containers(o) for e in ct.get("env") or []
               if (e.get("valueFrom") or {}).get("secretKeyRef", {}).get("name") == env.MLFLOW_ADMIN_SECRET}
    assert readers == {"mlflow", "mlflow-auth-setup"}
    setup = containers(find(objects, "Job", "mlflow-auth-setup"))[0]
    assert setup["command"] == ["fedcore", "deploy", "mlflow-auth"] and "--experiment=fedcore" in setup["args"]


def test_mlflow_without_the_auth_app_or_its_secret_is_flagged(rendered):
    objects = copy.deepcopy(rendered["local"])
    c = mlflow_container(objects)
    c["args"].remove("--app-name=basic-auth")
    for e in c["env"]:
        if e["name"] == "MLFLOW_AUTH_ADMIN_PASSWORD":
            e.pop("valueFrom")
            e["value"] = "x"
    problems = mlflow_auth_problems(objects)
    assert len(problems) == 2
    assert "without an auth app" in problems[0] and "MLFLOW_AUTH_ADMIN_PASSWORD" in problems[1]


def test_a_client_pod_without_its_mlflow_user_is_flagged(rendered):
    objects = copy.deepcopy(rendered["local"])
    smoke = containers(find(objects, "Job", "fedcore-smoke"))[0]
    smoke["env"] = [e for e in smoke["env"] if e["name"] != "MLFLOW_TRACKING_PASSWORD"]
    (problem,) = client_credential_problems(objects)
    assert problem.startswith("Job/fedcore-smoke: container smoke: MLFLOW_TRACKING_PASSWORD not from")


@pytest.fixture(scope="module")
def runtime_objects():
    return workloads(str(K8S.parent / "configs" / "quickstart.yaml"))


def test_the_runtime_workloads_pass_and_each_rule_can_fail(runtime_objects):
    assert workload_problems(runtime_objects) == []
    tj = copy.deepcopy(runtime_objects[0])
    del tj["spec"]["trainer"]["resourcesPerNode"]["limits"]
    tj["spec"]["trainer"]["env"] = [{"name": "MLFLOW_TRACKING_PASSWORD", "value": "hunter2hunter2"}]
    tj["spec"]["trainer"]["numNodes"] = "two"
    problems = "\n".join(trainjob_problems(tj))
    for part in ("numNodes", "limits lacks cpu, memory", "MLFLOW_TRACKING_PASSWORD is a literal",
                 "MLFLOW_TRACKING_USERNAME not from a secretKeyRef"):
        assert part in problems
    katib = copy.deepcopy(runtime_objects[1:])
    trial = katib[1]["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]
    trial["env"] = [e for e in trial["env"] if not e["name"].startswith("MLFLOW_TRACKING_U")]
    del trial["resources"]["limits"]
    problems = "\n".join(katib_problems(katib))
    assert "MLFLOW_TRACKING_USERNAME not from a secretKeyRef" in problems and "resources.limits lacks" in problems


def _broken_copy(tmp_path, breakage):
    root = tmp_path / "k8s"
    shutil.copytree(K8S, root)
    path = root / "base" / "mlflow.yaml"
    docs = list(yaml.safe_load_all(path.read_text()))
    c = docs[1]["spec"]["template"]["spec"]["containers"][0]
    if breakage == "no-auth":
        c["args"].remove("--app-name=basic-auth")
    elif breakage == "no-limits":  # the overlays patch MLflow's resources: break a Job's instead
        job_path = root / "base" / "mlflow-auth-setup-job.yaml"
        job = yaml.safe_load(job_path.read_text())
        del job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
        job_path.write_text(yaml.safe_dump(job, sort_keys=False))
    elif breakage == "plaintext-secret":
        docs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "leak"},
                     "stringData": {"password": "s3cr3t-in-git"}})
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return root


@pytest.mark.parametrize(("breakage", "said"), [
    ("no-auth", "MLflow runs without an auth app"),
    ("no-limits", "resources.limits lacks cpu, memory"),
    ("plaintext-secret", "Secret/leak: stringData.password holds a value"),
])
def test_deploy_check_fails_on_the_broken_stack(tmp_path, capsys, breakage, said):
    root = _broken_copy(tmp_path, breakage)
    with pytest.raises(SystemExit) as code:
        cli.main(["deploy", "check", "--overlay", "local", "--k8s-version", "1.33.0", "--k8s-dir", str(root)])
    out = capsys.readouterr().out
    assert code.value.code == 1 and said in out, out


def _guard(rendered):
    command = mlflow_container(rendered["local"])["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    return command


@pytest.mark.parametrize("password", ["", "REPLACE_ME", "password1234", "short-pw"])
def test_the_mlflow_pod_refuses_a_default_admin_password(rendered, tmp_path, password):
    fake = tmp_path / "mlflow"  # stands in for the server: the guard must stop before it
    fake.write_text("#!/bin/sh\necho started \"$@\"\n")
    fake.chmod(0o755)
    envs = {"PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "MLFLOW_AUTH_ADMIN_PASSWORD": password}
    out = subprocess.run([*_guard(rendered), "server"], env=envs, capture_output=True, text=True)
    assert out.returncode == 1 and "refusing to start" in out.stderr and "started" not in out.stdout
    good = subprocess.run([*_guard(rendered), "--app-name=basic-auth"],
                          env={**envs, "MLFLOW_AUTH_ADMIN_PASSWORD": "9f2c4e6a8b0d1f3e5a7c"},
                          capture_output=True, text=True)
    assert good.returncode == 0 and good.stdout.strip() == "started server --app-name=basic-auth"

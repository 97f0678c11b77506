"""The whole stack, checked offline: what `fedcore deploy check` adds to schemas and pod policy.

`fedcore.deploy.k8s.check` validates every rendered object strictly and applies the pod
policy (no literal secrets, limits on every container, ...). On top of that the stack must:

- run every MLflow server with its basic-auth app (`--app-name basic-auth`), its config and
  its admin password from a Secret: an MLflow without auth lets any client pod delete
  every experiment and move the champion alias;
- give every fedcore client pod (label fedcore.io/client) its MLflow user through secretKeyRef.

The workloads fedcore creates at run time, a multi-node stage's TrainJob and a Katib Experiment,
are held to the same rules by the modules that render them, which sit above this one:
`fedcore.pipeline.trainjob.trainjob_problems` and `fedcore.tuning.katib.workloads`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from fedcore.deploy import k8s
from fedcore.deploy.env import CLIENT_POD_LABEL, MLFLOW_CLIENT_KEYS
from fedcore.deploy.k8s import name_of, pod_spec

AUTH_APP = "basic-auth"


def check(overlay: str, versions: Iterable[str] = k8s.K8S_VERSIONS, root: Path | None = None) -> list[str]:
    """Every problem of one rendered overlay: schemas, pod policy, MLflow's auth, the pods' MLflow user."""
    objects = k8s.load_objects(k8s.render(overlay, root))
    return (k8s.validate(objects, versions) + k8s.policy_violations(objects) + mlflow_auth_problems(objects)
            + client_credential_problems(objects))


def _containers(obj: Mapping) -> list[Mapping]:
    spec = pod_spec(obj) or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _pod_labels(obj: Mapping) -> Mapping:
    spec = obj.get("spec") or {}
    if obj.get("kind") == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
    return (spec.get("template") or {}).get("metadata", {}).get("labels") or {}


def from_secret(env: Iterable[Mapping], name: str) -> bool:
    return any(e.get("name") == name and "secretKeyRef" in (e.get("valueFrom") or {}) for e in env)


def runs_mlflow_server(c: Mapping) -> bool:
    words = " ".join(str(w) for w in [*(c.get("command") or []), *(c.get("args") or [])])
    return "mlflow server" in words or (c.get("command") or [None])[0] == "mlflow" and "server" in words


def has_auth_app(c: Mapping) -> bool:
    args = [str(a) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
    pairs = zip(args, args[1:], strict=False)
    return f"--app-name={AUTH_APP}" in args or ("--app-name", AUTH_APP) in pairs


def mlflow_auth_problems(objects: Iterable[Mapping]) -> list[str]:
    """Every MLflow server runs the basic-auth app, configured, with its admin password from a Secret."""
    problems = []
    for obj in objects:
        for c in _containers(obj):
            if not runs_mlflow_server(c):
                continue
            env = c.get("env") or []
            where = f"{name_of(obj)}: container {c.get('name')}"
            if not has_auth_app(c):
                problems.append(f"{where}: MLflow runs without an auth app; add --app-name={AUTH_APP}")
            if not any(e.get("name") == "MLFLOW_AUTH_CONFIG_PATH" for e in env):
                problems.append(f"{where}: MLFLOW_AUTH_CONFIG_PATH is not set (the ini of the auth app)")
            if not from_secret(env, "MLFLOW_AUTH_ADMIN_PASSWORD"):
                problems.append(f"{where}: MLFLOW_AUTH_ADMIN_PASSWORD does not come from a Secret")
    return problems


def client_credential_problems(objects: Iterable[Mapping]) -> list[str]:
    """Every fedcore client pod's containers read MLFLOW_TRACKING_USERNAME / _PASSWORD from a Secret."""
    key, value = CLIENT_POD_LABEL
    problems = []
    for obj in objects:
        if _pod_labels(obj).get(key) != value:
            continue
        for c in _containers(obj):
            missing = [k for k in MLFLOW_CLIENT_KEYS if not from_secret(c.get("env") or [], k)]
            if missing:
                problems.append(f"{name_of(obj)}: container {c.get('name')}: {', '.join(missing)} not from a "
                                "secretKeyRef (the MLflow pod user)")
    return problems

"""The MLflow basic-auth app's users for fedcore: a non-admin pod user with the least it needs.

The cluster's MLflow runs `mlflow server --app-name basic-auth` with `default_permission =
NO_PERMISSIONS` (k8s/base/mlflow-auth.ini), so a user sees nothing it was not granted. The
`mlflow-auth-setup` Job runs `fedcore deploy mlflow-auth` as the admin and makes the pod user
(the fedcore-mlflow-client Secret) with EDIT on the fedcore experiments and MANAGE on the
registered models the retrain pipeline promotes, and nothing more: no admin flag, no rights on
any other experiment, so a compromised training pod cannot delete what others logged.

It talks to the auth app's REST API with the standard library alone: MLflow's own
`AuthServiceClient` imports the server side (Flask-WTF), which client images need not carry.
Every step is idempotent, so the Job can run again after a password rotation.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from typing import Any

from fedcore.errors import UserError

EXPERIMENT_PERMISSION = "EDIT"  # log runs, metrics, artifacts; no delete of the experiment, no grants
MODEL_PERMISSION = "MANAGE"  # new versions and the champion alias (retrain), grants on that model only
# Passwords that ship in docs and examples (MLflow's own old default among them): never accepted.
DEFAULT_PASSWORDS = frozenset({"", "password", "password1234", "admin", "changeme", "REPLACE_ME"})
MIN_PASSWORD = 12


def refuse_default(password: str, what: str) -> None:
    """UserError when `password` is a well-known default or too short to be generated."""
    if password in DEFAULT_PASSWORDS or len(password) < MIN_PASSWORD:
        raise UserError(f"{what} is a default or shorter than {MIN_PASSWORD} characters; set a generated one, "
                        "e.g. `openssl rand -hex 24` (see k8s/secrets/)")


class AuthApi:
    """Calls to one MLflow server as one user (HTTP basic auth)."""

    def __init__(self, uri: str, username: str, password: str, timeout: float = 30.0) -> None:
        self.uri = uri.rstrip("/")
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        self.headers = {"Authorization": f"Basic {token}", "Content-Type": "application/json"}
        self.timeout = timeout

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        url = self.uri + path
        data = None
        if method == "GET" and body:
            url += "?" + urllib.parse.urlencode(body)
        elif body is not None:
            data = json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method, headers=self.headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        except OSError as err:
            raise UserError(f"MLflow at {self.uri} is unreachable: {err}") from None
        try:
            payload = json.loads(raw or b"{}")
        except ValueError:
            payload = {"message": raw.decode(errors="replace")[:200]}
        return status, payload if isinstance(payload, dict) else {}

    def ok(self, method: str, path: str, body: dict[str, Any] | None = None, allow: Iterable[int] = ()) -> dict:
        status, payload = self.call(method, path, body)
        if status == 401:
            raise UserError(f"MLflow at {self.uri} refused the admin credentials (HTTP 401); check the "
                            "fedcore-mlflow-admin Secret (MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD)")
        if status != 200 and status not in allow:
            raise UserError(f"MLflow {method} {path} answered {status}: {payload.get('message', payload)}")
        return payload if status == 200 else {}


def setup(uri: str, admin: tuple[str, str], user: tuple[str, str], experiments: Iterable[str],
          models: Iterable[str]) -> list[str]:
    """Make `user` (name, password) with EDIT on `experiments` and MANAGE on `models`, creating those
    as the admin where missing. Returns what was done, one line each."""
    name, password = user
    refuse_default(admin[1], "the MLflow admin password (fedcore-mlflow-admin)")
    refuse_default(password, "the pod user's password (fedcore-mlflow-client)")
    if name == admin[0]:
        raise UserError(f"the pod user must not be the admin '{name}': set another username in fedcore-mlflow-client")
    api, done = AuthApi(uri, *admin), []
    status, _ = api.call("GET", "/api/2.0/mlflow/users/get", {"username": name})
    if status == 200:
        api.ok("PATCH", "/api/2.0/mlflow/users/update-password", {"username": name, "password": password})
        done.append(f"user {name}: password updated")
    else:
        api.ok("POST", "/api/2.0/mlflow/users/create", {"username": name, "password": password})
        done.append(f"user {name}: created")
    api.ok("PATCH", "/api/2.0/mlflow/users/update-admin", {"username": name, "is_admin": False})
    for exp in experiments:
        found = api.ok("GET", "/api/2.0/mlflow/experiments/get-by-name", {"experiment_name": exp}, allow=(404,))
        exp_id = (found.get("experiment") or {}).get("experiment_id")
        if exp_id is None:
            exp_id = api.ok("POST", "/api/2.0/mlflow/experiments/create", {"name": exp})["experiment_id"]
        _grant(api, name, "experiment", str(exp_id), EXPERIMENT_PERMISSION)
        done.append(f"experiment {exp} ({exp_id}): {EXPERIMENT_PERMISSION}")
    for model in models:
        api.ok("POST", "/api/2.0/mlflow/registered-models/create", {"name": model}, allow=(400,))
        _grant(api, name, "registered_model", model, MODEL_PERMISSION)
        done.append(f"registered model {model}: {MODEL_PERMISSION}")
    return done


def _grant(api: AuthApi, user: str, kind: str, resource: str, permission: str) -> None:
    # Grant refuses an existing permission (400) and has no update: revoke first, so a rerun
    # also takes back anything wider that someone granted by hand.
    key = {"username": user, "resource_type": kind, "resource_id": resource}
    api.ok("POST", "/api/3.0/mlflow/users/permissions/revoke", key, allow=(400, 404))
    api.ok("POST", "/api/3.0/mlflow/users/permissions/grant",
           {"username": user, "resource_type": kind, "resource_id": resource, "permission": permission})

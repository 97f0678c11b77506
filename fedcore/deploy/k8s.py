"""Kubernetes deployment helpers: render the kustomize overlays, validate and police them.

Pure functions over plain dicts so tests and `fedcore deploy check` share one code path:
`render` shells out to `kubectl kustomize`, `validate` runs kubernetes-validate in strict
mode, and `policy_violations` returns human-readable problems (empty list = compliant).
`smoke` is what the in-cluster smoke Job runs to prove an image can reach the stack.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

from fedcore.deploy.env import DEFAULT_IMAGE, K8S_NAMESPACE, REQUIRED_FOR_STACK, S3_BUCKET
from fedcore.deploy.mlflow_auth import AuthApi
from fedcore.errors import UserError

OVERLAYS: tuple[str, ...] = ("local", "gpu")
K8S_VERSIONS: tuple[str, ...] = ("1.31.0", "1.33.0")
PLACEHOLDER = "REPLACE_ME"
KUBECTL_HINT = (
    "kubectl (with its bundled kustomize) is needed: run scripts/ensure-kubectl.sh, "
    "or `apt-get install kubectl`, or see https://kubernetes.io/docs/tasks/tools/"
)

_POD_KINDS = {"Pod", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob"}
_SERVER_KINDS = {"Deployment", "StatefulSet", "DaemonSet"}
_SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|ACCESS_KEY|PRIVATE_KEY|API_KEY|CREDENTIAL", re.I)
_CREDENTIAL_TEXT = [
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key id
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    re.compile(r"\b[a-z][a-z0-9+.-]*://[^/\s:@$]+:[^/\s@$]+@"),  # user:password@ inside a URI
]


def k8s_root(start: Path | None = None) -> Path:
    """The repository's `k8s/` directory: searched upward from `start` (default: cwd),
    then next to the installed package (an editable install or a plain checkout)."""
    here = (start or Path.cwd()).resolve()
    for base in (here, *here.parents, Path(__file__).resolve().parents[2]):
        if (base / "k8s" / "base" / "kustomization.yaml").is_file():
            return base / "k8s"
    raise UserError("no k8s/base/kustomization.yaml found: run from a fedcore checkout or pass --k8s-dir")


def find_kubectl() -> str | None:
    """kubectl on PATH, else the copy scripts/ensure-kubectl.sh may have put in the venv."""
    found = shutil.which("kubectl")
    venv_copy = Path(sys.prefix) / "bin" / "kubectl"
    return found or (str(venv_copy) if venv_copy.is_file() else None)


def render(overlay: str = "local", root: Path | None = None, image: str | None = None) -> str:
    """YAML text of `k8s/overlays/<overlay>` as `kubectl kustomize` renders it; `image`
    replaces the project image (DEFAULT_IMAGE), e.g. with a copy in your own registry."""
    if overlay not in OVERLAYS:
        raise UserError(f"unknown overlay {overlay!r}: choose one of {', '.join(OVERLAYS)}")
    path = (root or k8s_root()) / "overlays" / overlay
    if not (path / "kustomization.yaml").is_file():
        raise UserError(f"{path}/kustomization.yaml is missing: pass --k8s-dir pointing at the repo's k8s/")
    kubectl = find_kubectl()
    if kubectl is None:
        raise UserError(KUBECTL_HINT)
    proc = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise UserError(f"kubectl kustomize {path} failed: {proc.stderr.strip()}")
    if image and image != DEFAULT_IMAGE:
        return re.sub(rf"(image: ){re.escape(DEFAULT_IMAGE)}$", rf"\g<1>{image}", proc.stdout, flags=re.M)
    return proc.stdout


def load_objects(text: str) -> list[dict]:
    """Parse a multi-document YAML stream, dropping empty documents."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


def name_of(obj: Mapping) -> str:
    return f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"


def validate(objects: Iterable[Mapping], versions: Iterable[str] = K8S_VERSIONS) -> list[str]:
    """Strict schema validation of every object against each Kubernetes version."""
    try:
        import kubernetes_validate  # lazy: a dev dependency, for `deploy check` only
    except ImportError as err:
        raise UserError("kubernetes-validate is missing: pip install 'fedcore[dev]'") from err
    from kubernetes_validate.utils import VersionNotSupportedError  # lazy: a dev dependency, for `deploy check` only

    problems = []
    for obj in objects:
        for version in versions:
            try:
                kubernetes_validate.validate(dict(obj), version, strict=True)
            except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as err:
                problems.append(f"{name_of(obj)} (k8s {version}): {getattr(err, 'message', err)}")
            except VersionNotSupportedError:  # a typo in --k8s-version, not a problem of the manifests
                raise UserError(f"Kubernetes version {version!r} has no schemas in kubernetes-validate; "
                                f"pass --k8s-version as MAJOR.MINOR.PATCH, e.g. {K8S_VERSIONS[-1]}") from None
    return problems


def pod_spec(obj: Mapping) -> Mapping | None:
    """The pod spec inside a workload object (CronJob nests one level deeper)."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind == "CronJob":
        spec = spec.get("jobTemplate", {}).get("spec", {})
    return spec.get("template", {}).get("spec") if kind in _POD_KINDS else None


def _image_problem(image: str) -> str | None:
    if "@sha256:" in image:
        return None
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"image {image} has no tag"
    if last.rsplit(":", 1)[1] in ("latest", "main", "master", "stable"):
        return f"image {image} uses a moving tag"
    return None


def _container_problems(c: Mapping, pod_sc: Mapping, server: bool) -> list[str]:
    sc = c.get("securityContext") or {}
    res = c.get("resources") or {}
    problems = [_image_problem(c.get("image", ""))]
    if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
        problems.append("runAsNonRoot is not set")
    if 0 in (sc.get("runAsUser"), pod_sc.get("runAsUser")):
        problems.append("runs as uid 0")
    if sc.get("privileged"):
        problems.append("is privileged")
    if sc.get("allowPrivilegeEscalation") is not False:
        problems.append("allowPrivilegeEscalation is not false")
    if "ALL" not in (sc.get("capabilities") or {}).get("drop", []) or (sc.get("capabilities") or {}).get("add"):
        problems.append("capabilities are not dropped to none")
    if sc.get("readOnlyRootFilesystem") is not True:
        problems.append("root filesystem is writable")
    seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
    if seccomp not in ("RuntimeDefault", "Localhost"):
        problems.append("no RuntimeDefault seccomp profile")
    for part in ("requests", "limits"):
        missing = {"cpu", "memory"} - set(res.get(part) or {})
        if missing:
            problems.append(f"resources.{part} lacks {', '.join(sorted(missing))}")
    if server and c.get("ports") and not (c.get("readinessProbe") and c.get("livenessProbe")):
        problems.append("serves a port without readiness and liveness probes")
    for env in c.get("env") or []:
        if "value" in env and _SECRET_NAME.search(env["name"]):
            problems.append(f"env {env['name']} is a literal; use secretKeyRef")
    return [p for p in problems if p]


def _pod_problems(obj: Mapping, spec: Mapping) -> list[str]:
    problems = [f"{flag} is on" for flag in ("hostNetwork", "hostPID", "hostIPC") if spec.get(flag)]
    problems += [f"volume {v['name']} is a hostPath" for v in spec.get("volumes") or [] if "hostPath" in v]
    pod_sc = spec.get("securityContext") or {}
    server = obj.get("kind") in _SERVER_KINDS
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        problems += [f"container {c.get('name')}: {p}" for p in _container_problems(c, pod_sc, server)]
    return problems


def _strings(node) -> Iterable[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _secret_problems(obj: Mapping) -> list[str]:
    problems = []
    if obj.get("kind") == "Secret":
        for field in ("data", "stringData"):
            for key, value in (obj.get(field) or {}).items():
                if value != PLACEHOLDER:
                    problems.append(f"{field}.{key} holds a value; templates carry {PLACEHOLDER} only")
    if obj.get("kind") == "ConfigMap":
        problems += [f"data key {k} looks secret" for k in (obj.get("data") or {}) if _SECRET_NAME.search(k)]
    for text in _strings(obj):
        if any(p.search(text) for p in _CREDENTIAL_TEXT):
            problems.append(f"credential-like text: {text[:40]!r}")
    return problems


def policy_violations(objects: Iterable[Mapping], namespace: str = K8S_NAMESPACE) -> list[str]:
    """Security and hygiene rules for rendered manifests; each problem names its object."""
    problems = []
    for obj in objects:
        found = _secret_problems(obj)
        ns = obj.get("metadata", {}).get("namespace")
        if obj.get("kind") != "Namespace" and ns not in (None, namespace):
            found.append(f"in namespace {ns}, expected {namespace}")
        spec = pod_spec(obj)
        if spec is not None:
            found += _pod_problems(obj, spec)
        problems += [f"{name_of(obj)}: {p}" for p in found]
    return problems


def check(overlay: str, versions: Iterable[str] = K8S_VERSIONS, root: Path | None = None) -> list[str]:
    """Render one overlay, then validate and police it; returns every problem found
    (`fedcore.deploy.stack.check` adds MLflow's auth app and the pods' MLflow user)."""
    objects = load_objects(render(overlay, root))
    return validate(objects, versions) + policy_violations(objects)


def smoke(require_gpu: bool = False, env: Mapping[str, str] | None = None, timeout: float = 10.0) -> list[str]:
    """Can this container use the stack? Checks env, MLflow /health, the bucket, the cache
    directory and (optionally) a CUDA device. Returns problems; empty means healthy."""
    env = os.environ if env is None else env
    problems = [f"{name} is not set" for name in REQUIRED_FOR_STACK if not env.get(name)]
    if problems:
        return problems
    problems += _check_mlflow(env["MLFLOW_TRACKING_URI"], timeout, env)
    problems += _check_bucket(env, timeout)
    cache = Path(env.get("FEDCORE_CACHE") or ".fedcore-cache")
    try:
        cache.mkdir(parents=True, exist_ok=True)
        probe = cache / f".smoke-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as err:
        problems.append(f"cache {cache} is not writable: {err}")
    if require_gpu:
        import torch  # lazy: `fedcore --help` loads this module; the GPU smoke check only

        if not torch.cuda.is_available():
            problems.append("no CUDA device visible (check the nvidia.com/gpu limit and node pool)")
    return problems


def _check_mlflow(uri: str, timeout: float, env: Mapping[str, str] | None = None) -> list[str]:
    if not uri.startswith(("http://", "https://")):  # urllib would raise ValueError or misreport "unreachable"
        return [f"MLFLOW_TRACKING_URI {uri!r} is not an http(s):// URL; fix it in the fedcore-env ConfigMap"]
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as resp:
            if resp.status != 200:
                return [f"MLflow {uri}/health answered {resp.status}"]
    except OSError as err:
        return [f"MLflow at {uri} is unreachable: {err}"]
    # /health needs no login: ask an API call whether the pod user's credentials pass too.
    user, password = (env or {}).get("MLFLOW_TRACKING_USERNAME"), (env or {}).get("MLFLOW_TRACKING_PASSWORD")
    if not user:
        return []

    status, _ = AuthApi(uri, user, password or "", timeout).call("GET", "/api/2.0/mlflow/experiments/search",
                                                                 {"max_results": 1})
    if status in (401, 403):
        return [f"MLflow at {uri} refused MLFLOW_TRACKING_USERNAME / MLFLOW_TRACKING_PASSWORD (HTTP {status}); "
                "check the fedcore-mlflow-client Secret and re-run the mlflow-auth-setup Job"]
    return []


def _check_bucket(env: Mapping[str, str], timeout: float) -> list[str]:
    import boto3  # lazy: `fedcore --help` loads this module
    from botocore.config import Config  # lazy: `fedcore --help` loads this module
    from botocore.exceptions import BotoCoreError, ClientError  # lazy: `fedcore --help` loads this module

    # Building the client is inside the try: a bad FEDCORE_S3_ADDRESSING or endpoint URL is
    # a FAIL line like an unreachable server, not a traceback.
    try:
        config = Config(
            s3={"addressing_style": env.get("FEDCORE_S3_ADDRESSING", "path")},
            connect_timeout=timeout,
            read_timeout=timeout,
            retries={"max_attempts": 1},
        )
        client = boto3.client(
            "s3",
            endpoint_url=env["MLFLOW_S3_ENDPOINT_URL"],
            region_name=env["AWS_DEFAULT_REGION"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            config=config,
        )
        client.head_bucket(Bucket=S3_BUCKET)
    except (BotoCoreError, ClientError, ValueError) as err:
        return [f"bucket s3://{S3_BUCKET} at {env['MLFLOW_S3_ENDPOINT_URL']} is not usable: {err}"]
    return []

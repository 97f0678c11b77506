"""The environment contract between fedcore and the places it runs.

Every environment variable fedcore reads is listed in `ENV_VARS` (except the S3 client's
optional overrides documented in `fedcore.io.s3_client`: AWS_ENDPOINT_URL, FEDCORE_S3_*, ...); the
docker-compose stack, the Kubernetes manifests and the tests check themselves against it,
so a new variable must be added here first. The Kubernetes names below are the ones the
manifests under `k8s/` create; pipeline code imports them instead of repeating strings.
"""

from __future__ import annotations

import os

# name -> one-line description. Only the variables fedcore itself reads.
ENV_VARS: dict[str, str] = {
    "MLFLOW_TRACKING_URI": "MLflow tracking server, e.g. http://mlflow.fedcore.svc.cluster.local:5000",
    "MLFLOW_TRACKING_USERNAME": "user of an MLflow server with authentication (from the fedcore-mlflow-client "
    "Secret on Kubernetes)",
    "MLFLOW_TRACKING_PASSWORD": "its password (from the fedcore-mlflow-client Secret on Kubernetes)",
    "MLFLOW_S3_ENDPOINT_URL": "S3-compatible endpoint for s3:// URIs (unset means AWS S3)",
    "AWS_ACCESS_KEY_ID": "S3 access key (from the fedcore-s3 Secret on Kubernetes)",
    "AWS_SECRET_ACCESS_KEY": "S3 secret key (from the fedcore-s3 Secret on Kubernetes)",
    "AWS_DEFAULT_REGION": "S3 region; S3-compatible stores accept any, e.g. us-east-1",
    "FEDCORE_S3_ADDRESSING": "S3 addressing style: path (in-cluster stores) or virtual (AWS)",
    "FEDCORE_GIT_COMMIT": "optional git commit recorded with every run when .git is absent (images)",
    "FEDCORE_IMAGE": "overrides the container image used by pipeline components",
    "FEDCORE_CACHE": "local directory where s3:// datasets are staged and .gz dataset files unpacked, unless "
    "data.cache_dir is set (the dataset-cache PVC on Kubernetes)",
    "FEDCORE_TRACKING_RETRY_SECONDS": "seconds MLflow's own retries may wait in one tracking call (it sets "
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES and _BACKOFF_FACTOR) before tracking degrades to the run dir's journal, unless "
    "tracking.retry_seconds is set (default 60)",
    "FEDCORE_MALLOPT": "0 keeps glibc's allocator defaults; by default a run raises its mmap and trim thresholds so "
    "freed tensors are reused (fedcore.engine.hostmem; same values, less page faulting)",
}

# Variables a run against a tracking stack cannot do without; FEDCORE_GIT_COMMIT,
# FEDCORE_IMAGE, FEDCORE_CACHE, FEDCORE_TRACKING_RETRY_SECONDS and FEDCORE_MALLOPT have defaults.
REQUIRED_FOR_STACK: tuple[str, ...] = (
    "MLFLOW_TRACKING_URI",
    "MLFLOW_S3_ENDPOINT_URL",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_DEFAULT_REGION",
    "FEDCORE_S3_ADDRESSING",
)

# The project image built from ./Dockerfile; pipeline components run in it.
DEFAULT_IMAGE = "ghcr.io/fedcore/fedcore:0.1.0"
# Upstream MLflow server image; the `-full` flavour has the Postgres drivers and boto3
# (the plain image has neither). Matches the mlflow==3.17.* client pin.
MLFLOW_IMAGE = "ghcr.io/mlflow/mlflow:v3.17.2-full"

# Kubernetes names created by k8s/base.
K8S_NAMESPACE = "fedcore"
S3_SECRET = "fedcore-s3"  # keys: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
DB_SECRET = "fedcore-mlflow-db"  # type kubernetes.io/basic-auth, keys: username, password
# MLflow's basic-auth app: its admin (type basic-auth, keys username, password, flask_secret_key),
# read by the MLflow pod and the setup Job only, and the non-admin user of every other fedcore pod.
MLFLOW_ADMIN_SECRET = "fedcore-mlflow-admin"
MLFLOW_CLIENT_SECRET = "fedcore-mlflow-client"
MLFLOW_CLIENT_KEYS: tuple[str, ...] = ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD")
RUNTIME_CONFIGMAP = "fedcore-env"  # the non-secret ENV_VARS for in-cluster clients
PIPELINE_SERVICE_ACCOUNT = "fedcore-pipeline-runner"
DATASET_CACHE_PVC = "fedcore-dataset-cache"
DATASET_CACHE_MOUNT = "/cache"  # where pipeline tasks mount DATASET_CACHE_PVC; FEDCORE_CACHE points here
S3_BUCKET = "fedcore"
MLFLOW_SERVICE_URL = f"http://mlflow.{K8S_NAMESPACE}.svc.cluster.local:5000"
S3_SERVICE_URL = f"http://seaweedfs-s3.{K8S_NAMESPACE}.svc.cluster.local:8333"

# NetworkPolicies only let pods carrying this label reach MLflow and S3; pipeline tasks
# must set it (kfp-kubernetes add_pod_label). Other namespaces additionally need
# CLIENT_NAMESPACE_LABEL on the namespace itself.
CLIENT_POD_LABEL: tuple[str, str] = ("fedcore.io/client", "true")
CLIENT_NAMESPACE_LABEL: tuple[str, str] = ("fedcore.io/clients", "allowed")
# The pods of a multi-node stage's TrainJob carry this label too; NetworkPolicy trainjob-ranks
# lets them reach each other (torchrun's rendezvous, gloo/NCCL on ephemeral ports).
TRAINJOB_POD_LABEL: tuple[str, str] = ("fedcore.io/trainjob-rank", "true")

# GPU scheduling used by k8s/overlays/gpu; pipeline tasks on GPU use the same values.
GPU_RESOURCE = "nvidia.com/gpu"
GPU_NODE_SELECTOR: dict[str, str] = {"nvidia.com/gpu.present": "true"}
GPU_TOLERATION: dict[str, str] = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def image() -> str:
    """The image pipeline components run in: `FEDCORE_IMAGE` if set, else `DEFAULT_IMAGE`."""
    return os.environ.get("FEDCORE_IMAGE") or DEFAULT_IMAGE

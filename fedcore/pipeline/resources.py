"""Cluster settings of pipeline tasks: image, requests, accelerators, placement, retries.

They describe where a pipeline runs, not what it computes, so they live apart from
ExperimentConfig and never enter a config hash. Defaults come from `fedcore.deploy.env`, the
contract with the manifests under k8s/.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fedcore.deploy import env
from fedcore.errors import ConfigError

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_UNITS = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(text: str) -> float:
    """A Kubernetes quantity as a number: '500m' -> 0.5, '2' -> 2, '16Gi' -> 17179869184."""
    m = _QUANTITY.match(str(text).strip())
    if m is None:
        raise ValueError(f"'{text}' is not a Kubernetes quantity such as 500m, 2, 512Mi or 16Gi")
    return float(m.group(1)) * _UNITS[m.group(2)]


class Toleration(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str | None = None
    operator: str = "Exists"
    value: str | None = None
    effect: str | None = None


class PipelineResources(BaseModel):
    """Per-task Kubernetes settings. Training stages get the accelerator and the GPU node pool."""

    model_config = ConfigDict(extra="forbid")
    image: str = Field(default_factory=env.image, description="image every task runs in")
    cpu_request: str = "1"
    memory_request: str = "2Gi"
    cpu_limit: str = Field("2", description="every CPU task (prepare, evaluate, tracking, compare)")
    memory_limit: str = "4Gi"
    stage_cpu_request: str = "4"
    stage_memory_request: str = "16Gi"
    stage_cpu_limit: str = Field("8", description="every training stage")
    stage_memory_limit: str = "24Gi"
    accelerator_type: str = env.GPU_RESOURCE
    # None follows the config: a stage that may train on CUDA (train.device auto/cuda) gets one GPU,
    # a stage pinned to the CPU none, so a CPU config never waits for a GPU node (`for_device`).
    accelerators: int | None = Field(None, ge=0, description="per training stage; 0 runs stages on CPU nodes; "
                                     "None: 1, or 0 with train.device=cpu")
    node_selector: dict[str, str] = Field(default_factory=lambda: dict(env.GPU_NODE_SELECTOR))
    tolerations: list[Toleration] = Field(default_factory=lambda: [Toleration(**env.GPU_TOLERATION)])
    retries: int = Field(2, ge=0, description="retries of a failed training stage (resumes the same config)")
    workers: int = Field(1, ge=1, description="nodes per training stage; above 1 a stage runs as a Kubeflow "
                         "Trainer TrainJob of that many nodes, `accelerators` GPUs (ranks) each")
    trainjob_prefix: str = Field(f"s3://{env.S3_BUCKET}/trainjobs", description="s3:// prefix where a TrainJob "
                                 "stage stages its inputs and rank 0 writes its run dir")
    trainjob_timeout_s: float = Field(7 * 24 * 3600.0, gt=0, description="how long a stage waits for its TrainJob")
    secret: str = env.S3_SECRET
    tracking_secret: str | None = Field(env.MLFLOW_CLIENT_SECRET, description="Secret with MLFLOW_TRACKING_USERNAME "
                                        "/ _PASSWORD of MLflow's pod user; None for an MLflow without auth")
    config_map: str = env.RUNTIME_CONFIGMAP
    cache_pvc: str | None = env.DATASET_CACHE_PVC
    service_account: str = env.PIPELINE_SERVICE_ACCOUNT

    def gpus(self, device: str = "auto") -> int:
        """GPUs per training stage for a config training on `device` (auto, cpu or cuda)."""
        if self.accelerators is not None:
            return self.accelerators
        return 0 if device == "cpu" else DEFAULT_GPUS

    def for_device(self, device: str) -> PipelineResources:
        """These settings with the GPU count fixed for `device`: what a compiled pipeline carries."""
        return self.model_copy(update={"accelerators": self.gpus(device)})

    @model_validator(mode="after")
    def _limits_cover_requests(self) -> PipelineResources:
        for kind in ("cpu", "memory", "stage_cpu", "stage_memory"):
            request, limit = getattr(self, f"{kind}_request"), getattr(self, f"{kind}_limit")
            if quantity(limit) < quantity(request):
                raise ValueError(f"{kind}_limit {limit} is below {kind}_request {request}")
        if self.workers > 1 and not self.trainjob_prefix.startswith("s3://"):
            # The nodes of a TrainJob share no disk with the stage's pod: S3 is what they all reach.
            raise ValueError(f"trainjob_prefix must be an s3:// prefix for workers > 1, got '{self.trainjob_prefix}'")
        return self

    def with_cli(self, image: str | None = None, gpu_type: str | None = None, gpus: int | None = None,
                 node_selector: list[str] | None = None, resource: list[str] | None = None,
                 workers: int | None = None) -> PipelineResources:
        """Apply CLI options (`--image`, `--gpu-type`, `--gpus`, `--node-selector k=v`,
        `--resource field=value`, e.g. `--resource stage_memory_limit=32Gi`, `--workers N`)."""
        update: dict[str, object] = {}
        if workers is not None:
            if workers < 1:
                raise ConfigError(f"--workers must be >= 1 (nodes per training stage), got {workers}")
            update["workers"] = workers
        if image:
            update["image"] = image
        if gpu_type:
            update["accelerator_type"] = gpu_type
        if gpus is not None:
            if gpus < 0:
                raise ConfigError(f"--gpus must be >= 0, got {gpus}")
            update["accelerators"] = gpus
        if node_selector:
            update["node_selector"] = parse_pairs(node_selector, "--node-selector")
        sizes = parse_pairs(resource or [], "--resource")
        unknown = sorted(k for k in sizes if k not in RESOURCE_FIELDS)
        if unknown:
            raise ConfigError(f"--resource {unknown[0]}: choose one of {', '.join(RESOURCE_FIELDS)}")
        try:
            return PipelineResources.model_validate({**self.model_dump(), **update, **sizes})
        except ValidationError as err:
            first = err.errors()[0]
            raise ConfigError(f"bad task resources: {first['msg'].removeprefix('Value error, ')}") from None


DEFAULT_GPUS = 1  # per training stage of a config that may train on CUDA

RESOURCE_FIELDS: tuple[str, ...] = (*(
    f"{prefix}{kind}_{what}" for prefix in ("", "stage_") for kind in ("cpu", "memory") for what in ("request", "limit")
), "retries", "trainjob_prefix", "trainjob_timeout_s")


def check_accelerators(res: PipelineResources, device: str) -> None:
    """Refuse GPUs a stage could not use: with train.device=cpu, N > 1 GPUs per stage would sit
    idle (on CUDA every GPU gets a rank, see `ops.stage_processes` and the TrainJob's
    numProcPerNode). One GPU stays allowed: a package compiled for train.device=auto holds one,
    and a run may still switch its config to the CPU through the `overrides` input."""
    gpus = res.gpus(device)
    if gpus > 1 and device == "cpu":
        raise ConfigError(f"--gpus {gpus} with train.device=cpu: the stage would hold "
                          f"{gpus} GPUs and train on none; set train.device=auto or cuda "
                          "(one rank per GPU), or --gpus 0")


def secret_env(res: PipelineResources) -> list[dict[str, object]]:
    """Container env entries of the S3 keys and, where MLflow has auth, its pod user: all secretKeyRefs."""
    refs = [(res.secret, k) for k in SECRET_KEYS]
    refs += [(res.tracking_secret, k) for k in env.MLFLOW_CLIENT_KEYS] if res.tracking_secret else []
    return [{"name": k, "valueFrom": {"secretKeyRef": {"name": name, "key": k}}} for name, k in refs]


# The S3 credentials come from the Secret; everything else a task reads from the ConfigMap.
SECRET_KEYS: tuple[str, ...] = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
CONFIG_MAP_KEYS: tuple[str, ...] = (
    *(k for k in env.REQUIRED_FOR_STACK if k not in SECRET_KEYS), "FEDCORE_CACHE",
)


def parse_pairs(items: list[str], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"{option} '{item}' must look like key=value, e.g. nvidia.com/gpu.present=true")
        out[key.strip()] = value.strip()
    return out

"""Experiment configuration: the pydantic v2 schema and its hash.

One `ExperimentConfig` describes a whole experiment: dataset, client partition,
label-noise scene, model, training budget, method and tracking. Unknown keys are
rejected everywhere so a typo never silently falls back to a default.

This module is the schema alone and imports nothing else of fedcore but its errors.
`fedcore.config_parse` reads YAML and overrides into it; whether a name (data.name,
model.name, method.name) exists is the registries' business (`fedcore.registries.load_config`).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
from typing import Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator
from pydantic import Strict as StrictType

INT_MAX = 2**31 - 1
# Integers are strict: `num_clients: true` or `width: 1.0e+12` is refused, not read as 1 or 10**12.
# Every float must be finite (allow_inf_nan=False): `lr: .inf` used to train to NaN silently.
Int = Annotated[int, StrictType(), Field(le=INT_MAX)]


def _finite_tree(tree: Any, path: str = "") -> Any:
    """The free-form params dicts (data, model) hold Any, which allow_inf_nan does not
    reach: `model.params.norm=.inf` was kept, then written back as null by to_yaml."""
    if isinstance(tree, float) and not math.isfinite(tree):
        raise ValueError(f"{path or 'value'} must be a finite number, got {tree}")
    if isinstance(tree, dict):
        for k, v in tree.items():
            _finite_tree(v, f"{path}.{k}" if path else str(k))
    elif isinstance(tree, list | tuple):
        for i, v in enumerate(tree):
            _finite_tree(v, f"{path}[{i}]")
    return tree


Params = Annotated[dict[str, Any], AfterValidator(_finite_tree)]


def did_you_mean(word: Any, choices: Any, prefix: str = "") -> str:
    """" (did you mean 'train.rounds'?)" for the choice nearest `word` (difflib's ratio of 0.6 or more,
    `prefix` put before it), '' when none is that near: a typo gets its fix, a wild guess no noise."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1)
    return f" (did you mean '{prefix}{close[0]}'?)" if close else ""


def tune_range(low: float, high: float, log: bool = False,
               by_optimizer: dict[str, tuple[float, float] | None] | None = None) -> dict[str, Any]:
    """A field's search space for `fedcore tune` (and Katib), kept beside its default:
    `Field(0.05, json_schema_extra=tune_range(1e-3, 0.2, log=True))`. `fedcore.tuning` reads it.
    `by_optimizer` replaces the range under another `train.optimizer` (None: not tuned with it),
    because an SGD learning rate is no Adam one, and Adam has no momentum to tune."""
    spec: dict[str, Any] = {"low": low, "high": high, "log": log}
    if by_optimizer:
        spec["by_optimizer"] = {k: (list(v) if v is not None else None) for k, v in by_optimizer.items()}
    return {"tune": spec}


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class ValidationConfig(Strict):
    fraction: float = Field(
        0.0, ge=0.0, lt=1.0, description="share of each client's training samples held out for validation; "
        "they keep their noisy labels and no method trains on them (val/acc, final/acc_at_val_best); 0 = none")
    server_clean: Int = Field(
        0, ge=0, description="size of a clean, server-side validation set taken from the training pool "
        "(val_server/acc); an extra assumption that every report marks")


class DataConfig(Strict):
    name: str = "digits"
    root: str | None = Field(None, description="local path or s3://bucket/prefix holding the dataset files")
    cache_dir: str = Field(".fedcore-cache", description="where s3:// data is staged locally")
    test_fraction: float = Field(0.25, gt=0.0, lt=1.0, description="held-out split for datasets without one")
    image_size: Int | None = Field(None, ge=8, le=4096, description="resize images (folder datasets) to this side")
    max_train: Int | None = Field(None, ge=1, description="cap on training samples (quick runs)")
    seed: Int | None = Field(
        None, ge=0, description="seed of the partition and noise scene; default: the experiment seed. "
        "Fix it to share one dataset across training seeds"
    )
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    params: Params = Field(default_factory=dict, description="dataset-specific options")


PartitionKind = Literal["iid", "dirichlet", "bernoulli_dirichlet", "shards", "quantity", "natural", "label_sets"]


class PartitionConfig(Strict):
    kind: PartitionKind = "dirichlet"
    num_clients: Int = Field(10, ge=1)
    alpha: float = Field(0.5, gt=0.0, description="Dirichlet concentration (dirichlet, bernoulli_dirichlet)")
    # ge=1: an empty client has nothing to train or score, and its 0/0 loss turned into NaN weights.
    min_size: Int = Field(10, ge=1, description="resample until every client holds at least this many")
    p: float = Field(1.0, gt=0.0, le=1.0, description="bernoulli_dirichlet: probability a client holds a class")
    shards_per_client: Int = Field(2, ge=1)
    beta: float = Field(0.5, gt=0.0, description="quantity skew: client sizes ~ Dir(beta)")


RateKind = Literal["fixed", "uniform", "linspace", "fedcorr"]


class RateConfig(Strict):
    kind: RateKind = "fixed"
    value: float = Field(0.4, ge=0.0, le=1.0, description="fixed rate")
    min: float = Field(0.0, ge=0.0, le=1.0)
    max: float = Field(1.0, ge=0.0, le=1.0)
    rho: float = Field(0.6, ge=0.0, le=1.0, description="fedcorr: probability a client is noisy")
    tau: float = Field(0.5, ge=0.0, le=1.0, description="fedcorr: noisy level ~ U(tau, 1)")

    @model_validator(mode="after")
    def _ordered(self) -> RateConfig:
        if self.min > self.max:
            raise ValueError(f"rate.min ({self.min}) must be <= rate.max ({self.max})")
        return self


NoiseType = Literal["none", "symmetric", "pairflip", "asymmetric", "mixed", "real", "missing", "extra", "flip"]
SINGLE_LABEL_NOISE = ("symmetric", "pairflip", "asymmetric")
MULTI_LABEL_NOISE = ("missing", "extra", "flip")


class NoiseConfig(Strict):
    type: NoiseType = "symmetric"
    scope: Literal["globalized", "localized"] = "globalized"
    noisy_client_fraction: float = Field(
        1.0, ge=0.0, le=1.0, description="phi: fraction of noisy clients (`noise.phi` is accepted as an alias)"
    )
    num_noisy_clients: Int | None = Field(None, ge=0, description="exact count; overrides the fraction")
    rate: RateConfig = Field(default_factory=RateConfig)
    mixed_types: list[Literal["symmetric", "pairflip", "asymmetric"]] = Field(
        default_factory=lambda: ["symmetric", "pairflip", "asymmetric"]
    )
    clean_cover: bool = Field(False, description="pick clean clients that together hold every class")
    min_per_class: Int = Field(1, ge=1, description="clean_cover: samples per class the clean clients hold")

    @model_validator(mode="after")
    def _types(self) -> NoiseConfig:
        if self.type == "mixed" and not self.mixed_types:
            raise ValueError("noise.mixed_types must list at least one type when noise.type is 'mixed'")
        return self


class ModelConfig(Strict):
    name: str = "mlp"
    weights: str | None = Field(None, description="local path or s3:// file with pretrained weights")
    width: Int = Field(128, ge=1, le=8192, description="hidden width for mlp/cnn")
    params: Params = Field(default_factory=dict)


class TrainConfig(Strict):
    rounds: Int = Field(50, ge=0, description="rounds of the main ('train') stage")
    stage_rounds: dict[str, Annotated[Int, Field(ge=0)]] = Field(
        default_factory=dict, description="per-stage round budgets, by the method's stage names")
    client_fraction: float = Field(1.0, gt=0.0, le=1.0)
    warmup_rounds: Int = Field(0, ge=0, description="first rounds visit every client once, no replacement")
    local_epochs: Int = Field(1, ge=1, description="local epochs per round (train.local_steps overrides it)")
    local_steps: Int | None = Field(None, ge=1, description="fixed local steps; overrides local_epochs")
    batch_size: Int = Field(32, ge=1)
    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(0.05, gt=0.0, le=10.0, description="learning rate (above 10 every optimizer diverges)",
                      json_schema_extra=tune_range(0.005, 0.2, log=True, by_optimizer={"adam": (1e-4, 1e-2)}))
    # Adam ignores momentum (its betas stay torch's defaults), so it is not searched there.
    momentum: float = Field(0.9, ge=0.0, lt=1.0, json_schema_extra=tune_range(0.0, 0.95, by_optimizer={"adam": None}))
    weight_decay: float = Field(5e-4, ge=0.0, le=1.0, json_schema_extra=tune_range(1e-5, 1e-2, log=True))
    grad_clip: float | None = Field(
        None, gt=0.0, description="clip each local step's gradient to this global L2 norm "
        "(torch.nn.utils.clip_grad_norm_, per client); default off")
    fused_adam: bool = Field(
        False, description="Adam through torch's fused kernel (one pass over the weights a step, on both "
        "executors); it rounds differently from torch.optim's default loop, so off by default")
    device: Literal["auto", "cpu", "cuda"] = "auto"
    threads: Int | None = Field(
        None, ge=1, description="CPU threads for this run (torch and the BLAS pools of numpy, scipy and "
        "scikit-learn); small models on busy machines run faster with 1"
    )
    eval_every: Int = Field(
        1, ge=1, description="evaluate (test metrics, memorization, probes) every k rounds and in each stage's "
        "last 10 rounds, so final/acc and final/acc_last10 keep their meaning; 1 = every round")
    checkpoint_every: Int = Field(0, ge=0, description="0 = only at stage ends")
    early_stop_patience: Int = Field(
        0, ge=0, description="evaluations without a better val/acc (val/mAP); needs data.validation; 0 = off")
    augment: Literal["none", "weak"] = Field("none", description="augmentation for plain local training")
    memorization: bool = Field(True, description="score memorization of noisy training labels at eval")
    executor: Literal["auto", "sequential", "batched"] = Field(
        "auto", description="how a round's clients train: batched = stacked in one computation (the method must "
        "support it), sequential = one after another, auto = batched wherever the method supports it"
    )
    cohort_chunk: int | None = Field(
        None, ge=1, description="batched executor: clients trained together at most; bounds memory to "
        "O(chunk x model + data). Default: at most 64, fewer when 1 GiB of stacked weights, gradients "
        "and optimizer state or a step's activations (64 MiB on the CPU, 2 GiB on CUDA) would not hold them"
    )
    local_memorization: bool = Field(
        False, description="also score each trained client's local model on its own noisy samples every round "
        "(train/local_memorization; one forward pass over them)"
    )
    loss_probe: bool = Field(
        False, description="at eval, also score a small-loss GMM detector on the global model "
        "(detect/loss_probe/*), whatever the method; never feeds back into training")


class MethodConfig(Strict):
    name: str = "fedavg"
    params: dict[str, Any] = Field(default_factory=dict)  # typed and checked per method (MethodParams)


class TrackingConfig(Strict):
    backend: Literal["mlflow", "none"] = "none"
    uri: str | None = Field(
        None, description="MLflow tracking URI; default: MLFLOW_TRACKING_URI, else an embedded sqlite store "
        "in mlruns/ under the cwd (`pipeline run --local`: under its --out)"
    )
    experiment: str = "fedcore"
    artifact_location: str | None = Field(None, description="local dir or s3:// prefix for new experiments")
    run_name: str | None = None
    parent_run_id: str | None = None
    run_id: str | None = Field(None, description="resume this run (stage components)")
    retry_seconds: float | None = Field(
        None, ge=0.0, le=1080.0, description="seconds MLflow's own retries may wait out an unreachable server or "
        "artifact store in one call before tracking degrades to the run dir's journal; default "
        "FEDCORE_TRACKING_RETRY_SECONDS, else 60 (1080 is MLflow's most: 10 retries, 120 s apart)")
    log_model: bool = Field(
        True, description="log the final model as a served MLflow model (torch.export, ~5 s of CPU a run); "
        "its state_dict artifact is logged either way; the retrain pipeline needs it"
    )
    system_metrics_every: float = Field(
        10.0, ge=0.0, description="seconds between system-metrics samples (CPU, memory, disk, network, GPU); 0 = off"
    )


class ExperimentConfig(Strict):
    data: DataConfig = Field(default_factory=DataConfig)
    partition: PartitionConfig = Field(default_factory=PartitionConfig)
    noise: NoiseConfig = Field(default_factory=NoiseConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    method: MethodConfig = Field(default_factory=MethodConfig)
    tracking: TrackingConfig = Field(default_factory=TrackingConfig)
    seed: Int = Field(0, ge=0)

    @model_validator(mode="after")
    def _cross_field(self) -> ExperimentConfig:
        if self.noise.scope == "localized" and self.partition.num_clients < 2 and self.partition.kind == "iid":
            raise ValueError("noise.scope 'localized' needs a non-IID partition over several clients")
        v = self.data.validation
        if self.train.early_stop_patience and not (v.fraction > 0 or v.server_clean > 0):
            raise ValueError("train.early_stop_patience stops on validation, never on the test split: set "
                             "data.validation.fraction (e.g. 0.1) or data.validation.server_clean")
        n = self.noise.num_noisy_clients
        if n is not None and n > self.partition.num_clients:
            raise ValueError(
                f"noise.num_noisy_clients ({n}) exceeds partition.num_clients ({self.partition.num_clients})"
            )
        return self

    # -- serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def hashed_dict(self) -> dict[str, Any]:
        """to_dict() less the fields added after artifacts were first hashed, where they hold
        their defaults (data.validation, train.grad_clip, train.fused_adam): an artifact or run prepared before
        they existed keeps its data_hash and config_hash, so `--data` and `--resume` still accept it."""
        d = self.to_dict()
        for section, fields in late_defaults().items():
            for key, default in fields.items():
                if d[section][key] == default:
                    del d[section][key]
        return d

    def digested(self) -> dict[str, Any]:
        """What config_hash digests: hashed_dict() less the tracking settings (they never change results)."""
        return {k: v for k, v in self.hashed_dict().items() if k != "tracking"}

    def config_hash(self, sections: tuple[str, ...] | None = None) -> str:
        """Stable 16-hex digest of the config (or of some sections), independent of key order.

        Tracking settings never change results, so they are left out of the default hash.
        """
        d = self.hashed_dict()
        keys = sections or tuple(k for k in d if k != "tracking")
        payload = json.dumps({k: d[k] for k in keys}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def data_seed(self) -> int:
        """Seed of the partition and noise scene."""
        return self.seed if self.data.seed is None else self.data.seed

    def data_identity(self) -> dict[str, Any]:
        """What determines the FederatedDataset (data, partition, noise, data seed): what data_hash
        digests, and what a refused `--data` names the differing keys of."""
        d = self.hashed_dict()
        payload = {k: d[k] for k in ("data", "partition", "noise")}
        payload["data"] = {**payload["data"], "seed": self.data_seed, "cache_dir": None}
        return payload

    def data_hash(self) -> str:
        """Digest of data_identity()."""
        return hashlib.sha256(json.dumps(self.data_identity(), sort_keys=True).encode()).hexdigest()[:16]

    def resume_dict(self) -> dict[str, Any]:
        """Everything a checkpoint depends on: round budgets may grow, tracking may change."""
        d = self.hashed_dict()
        d.pop("tracking")
        free = ("rounds", "stage_rounds", "checkpoint_every", "threads")
        d["train"] = {k: v for k, v in d["train"].items() if k not in free}
        return d

    def resume_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.resume_dict(), sort_keys=True).encode()).hexdigest()[:16]


def late_defaults() -> dict[str, Any]:
    """The fields `hashed_dict` leaves out where they hold these defaults, nested as in to_dict(): a
    config without one of them means its default, which a diff of two configs must know to say
    'no difference' rather than '0 (run) vs unset'."""
    return {"data": {"validation": ValidationConfig().model_dump(mode="json")},
            "train": {"grad_clip": None, "fused_adam": False}}

"""Records exchanged between the round loop and a method (see ARCHITECTURE.md, engine contract).

Nothing here names a method. Method-owned data travels in `ServerState.extra`,
`ClientTask.state`, `ClientUpdate.uploads` and `RoundMetrics.estimates`, none of which
the engine interprets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import torch

if TYPE_CHECKING:
    from fedcore.config import ExperimentConfig
    from fedcore.engine.store import ClientData, TensorStore

Params = dict[str, torch.Tensor]


class DataView(Protocol):
    """What a method may see of the federated dataset: inputs, working labels, client index
    arrays and metadata, never ground truth. `fedcore.data.federated.FederatedView` is the
    one implementation; the engine names only this shape, so it never imports the data layer."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    client_indices: list[np.ndarray]
    num_classes: int
    task: str
    meta: dict[str, Any]


STAGE_YIELDS = ("verdicts", "labels")


@dataclass(frozen=True)
class OptimSpec:
    """A client's local optimizer and budget (the sequential loop and the batched executor read it)."""

    kind: str = "sgd"
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    epochs: int = 1
    steps: int | None = None
    batch_size: int = 32
    grad_clip: float | None = None  # max global L2 norm of a step's gradient; None: no clipping
    fused: bool = False  # Adam through torch's fused kernel (train.fused_adam)

    @classmethod
    def from_train(cls, train, **overrides) -> OptimSpec:  # train: fedcore.config.TrainConfig
        base = dict(kind=train.optimizer, lr=train.lr, momentum=train.momentum, weight_decay=train.weight_decay,
                    epochs=train.local_epochs, steps=train.local_steps, batch_size=train.batch_size,
                    grad_clip=train.grad_clip, fused=train.fused_adam)
        base.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**base)


@dataclass(frozen=True)
class Stage:
    """A named phase with its own round budget.

    cohort='all' visits every client each round; evaluate=False skips test evaluation
    (e.g. self-supervised pretraining, where the head is meaningless). comparable=False: the
    stage's scores are logged but its global model is not yet a model of the method's kind
    (e.g. one client's local model), so they predict nothing about the final score and a tuner
    does not prune on them. yields: what the stage decides besides new weights, from
    STAGE_YIELDS: "verdicts" (which clients are noisy) and "labels" (relabeled working
    labels); a pipeline gives each its own output.
    """

    name: str
    rounds: int
    cohort: Literal["sample", "all"] = "sample"
    evaluate: bool = True
    yields: tuple[str, ...] = ()
    comparable: bool = True

    def __post_init__(self) -> None:
        unknown = [y for y in self.yields if y not in STAGE_YIELDS]
        if unknown:
            raise ValueError(f"stage '{self.name}' yields {unknown}; known: {list(STAGE_YIELDS)}")


@dataclass(frozen=True)
class ServerState:
    """Immutable server record; change it with `replace`."""

    params: Params
    rnd: int = 0  # rounds completed, across all stages (the tracking step)
    stage: str = ""
    stage_round: int = 0  # rounds completed within the current stage
    extra: Mapping[str, Any] = field(default_factory=dict)

    def replace(self, **changes: Any) -> ServerState:
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class RoundPlan:
    """probe: clients asked first, without training, through `method.client_probe(task)`; the
    loop then calls `method.after_probe(state, plan, answers)` for the plan of the main phase
    (e.g. references some clients compute on a model before others train). Probes keep no state.
    """

    stage: str
    cohort: Sequence[int] | None = None  # None: the sampler chooses
    instructions: Mapping[str, Any] = field(default_factory=dict)
    probe: Sequence[int] | None = None


@dataclass
class ClientTask:
    cid: int
    params: Params  # global params with this client's personal params overlaid
    data: ClientData
    instructions: Mapping[str, Any]
    state: dict[str, Any]  # the client's persistent state: the fields of the method's dataclass (store.typed_state)
    rng: np.random.Generator
    gen: torch.Generator
    rnd: int
    stage: str


@dataclass
class ClientUpdate:
    cid: int
    num_examples: int
    params: Params | None = None
    uploads: Any = field(default_factory=dict)  # method-defined (a dataclass); the engine never reads it
    metrics: dict[str, float] = field(default_factory=dict)
    state: Any = None  # new persistent state (a dataclass of checkpoint-safe values, or a dict); None keeps the old


@dataclass
class Estimates:
    """What a method believes about the noise; only the scorer compares it with ground truth.

    client_rate: estimated noise rate per client. client_noisy: identification verdicts.
    sample_noisy: detector name -> client -> bool mask over the client's samples
    ("main" is the method's own detector). labels: client -> current working labels
    (relabeling). extra: anything to keep as an artifact (e.g. descriptor scatter).
    """

    client_rate: dict[int, float] = field(default_factory=dict)
    client_noisy: dict[int, bool] = field(default_factory=dict)
    sample_noisy: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    labels: dict[int, np.ndarray] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def empty(self) -> bool:
        return not (self.client_rate or self.client_noisy or self.sample_noisy or self.labels or self.extra)


@dataclass
class RoundMetrics:
    scalars: dict[str, float] = field(default_factory=dict)
    estimates: Estimates = field(default_factory=Estimates)


@dataclass
class RunContext:
    """Everything a method may use to set itself up. Holds no ground truth."""

    cfg: ExperimentConfig
    view: DataView
    store: TensorStore
    clients: list[ClientData]
    device: torch.device
    seed: int

    @property
    def num_classes(self) -> int:
        return self.view.num_classes

    @property
    def task(self) -> str:
        return self.view.task


class Method(Protocol):
    name: str
    personal_keys: tuple[str, ...]

    @property
    def stages(self) -> tuple[Stage, ...]: ...

    def init(self, ctx: RunContext) -> ServerState: ...

    def plan_round(self, state: ServerState, rnd: int) -> RoundPlan | None: ...

    def client_update(self, task: ClientTask) -> ClientUpdate: ...

    def server_update(
        self, state: ServerState, plan: RoundPlan, updates: Sequence[ClientUpdate]
    ) -> tuple[ServerState, RoundMetrics]: ...

    def eval_model(self, state: ServerState) -> torch.nn.Module: ...

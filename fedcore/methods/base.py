"""`StagedMethod`: the template most methods build on.

It implements the engine contract with small hooks, so FedAvg overrides nothing and
FedProx overrides one hook:

    targets(task)                  working labels for this client (relabeled ones live in client state)
    loss(model, batch, task)       the local objective on one batch (default: CE or BCE)
    regularizer(model, task)       an extra term added to the loss (default: none)
    before_local(task)             per-round client setup; returns a dict passed along as task extras
    after_local(task, extras)      -> (uploads, new client state)
    aggregate(state, updates)      -> new global params (default: FedAvg by sample count)
    summarize(state, plan, updates, params) -> (extra, RoundMetrics)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from fedcore.config import ExperimentConfig
from fedcore.engine.types import (
    ClientTask,
    ClientUpdate,
    Params,
    RoundMetrics,
    RoundPlan,
    RunContext,
    ServerState,
    Stage,
)
from fedcore.methods.registry import MethodParams
from fedcore.models import build_model
from fedcore.train import losses
from fedcore.train.local import Batch, OptimSpec, train_local
from fedcore.train.params import get_params, load_params_, weighted_average


class StagedMethod:
    name: str = ""
    personal_keys: tuple[str, ...] = ()

    def __init__(self, cfg: ExperimentConfig, params: MethodParams) -> None:
        self.cfg = cfg
        self.params = params
        self.ctx: RunContext | None = None
        self.model: nn.Module | None = None

    # -- contract ---------------------------------------------------------------------------
    @property
    def stages(self) -> tuple[Stage, ...]:
        return (Stage("train", self.stage_rounds("train", self.cfg.train.rounds)),)

    def stage_rounds(self, stage: str, default: int) -> int:
        """A stage's budget: `train.stage_rounds[stage]` when set, else the method's default."""
        return int(self.cfg.train.stage_rounds.get(stage, default))

    def init(self, ctx: RunContext) -> ServerState:
        self.ctx = ctx
        self.model = self.build_model().to(ctx.device)
        return ServerState(params=get_params(self.model), stage=self.stages[0].name, extra=self.init_extra())

    def build_model(self) -> nn.Module:
        ctx = self.ctx
        return build_model(self.cfg.model, ctx.store.in_shape, ctx.num_classes, seed=ctx.seed)

    def init_extra(self) -> dict[str, Any]:
        return {}

    def plan_round(self, state: ServerState, rnd: int) -> RoundPlan | None:
        return RoundPlan(stage=state.stage)

    def client_update(self, task: ClientTask) -> ClientUpdate:
        load_params_(self.model, task.params)
        labels = self.targets(task)
        extras = self.before_local(task)
        task_extras = {**extras, "labels": labels}

        def loss_fn(model: nn.Module, batch: Batch) -> torch.Tensor:
            return self.loss(model, batch, task, task_extras) + self.regularizer(model, batch, task, task_extras)

        stats = train_local(
            self.model, task.data, labels, loss_fn, self.optim_spec(task), task.gen,
            make_x=self.make_x(task), after_step=self.after_step(task, task_extras),
            optimizer=self.local_optimizer(task),
        )
        uploads, new_state = self.after_local(task, task_extras)
        return ClientUpdate(
            cid=task.cid, num_examples=task.data.n, params=get_params(self.model), uploads=uploads,
            metrics={**stats, **task_extras.get("metrics", {})}, state=new_state,
        )

    def server_update(
        self, state: ServerState, plan: RoundPlan, updates: Sequence[ClientUpdate]
    ) -> tuple[ServerState, RoundMetrics]:
        params = self.aggregate(state, updates)
        extra, metrics = self.summarize(state, plan, updates, params)
        return state.replace(params=params, extra=extra), metrics

    def eval_model(self, state: ServerState) -> nn.Module:
        load_params_(self.model, state.params)
        return self.model.eval()

    # -- hooks ------------------------------------------------------------------------------
    def targets(self, task: ClientTask) -> torch.Tensor:
        relabeled = task.state.get("labels")
        return relabeled if relabeled is not None else task.data.labels

    def before_local(self, task: ClientTask) -> dict[str, Any]:
        return {}

    def loss(self, model: nn.Module, batch: Batch, task: ClientTask, extras: dict[str, Any]) -> torch.Tensor:
        return self.base_loss(model(batch.x), batch.y)

    def base_loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.ctx is not None and self.ctx.task == "multi":
            return losses.bce(logits, y.float())
        return losses.ce(logits, y)

    def regularizer(self, model: nn.Module, batch: Batch, task: ClientTask, extras: dict[str, Any]) -> torch.Tensor:
        return torch.zeros((), device=batch.x.device)

    def make_x(self, task: ClientTask):
        """pos -> model inputs; weak augmentation when train.augment says so."""
        if self.cfg.train.augment == "none":
            return None
        aug = self.augmenter()
        data = task.data
        return lambda pos: data.store.normalize(aug.weak(data.x01(pos), task.gen))

    def augmenter(self):
        from fedcore.train.augment import Augmenter

        if getattr(self, "_aug", None) is None:
            self._aug = Augmenter.for_dataset(self.ctx.view.meta, self.ctx.store.in_shape)
        return self._aug

    def after_step(self, task: ClientTask, extras: dict[str, Any]):
        return None

    def after_local(self, task: ClientTask, extras: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
        return {}, None

    def local_optimizer(self, task: ClientTask) -> torch.optim.Optimizer | None:
        """A ready optimizer for this client's local run (e.g. per-group weight decay); None = from optim_spec."""
        return None

    def optim_spec(self, task: ClientTask) -> OptimSpec:
        lr = task.instructions.get("lr") if task.instructions else None
        return OptimSpec.from_train(self.cfg.train, lr=lr)

    def aggregate(
        self, state: ServerState, updates: Sequence[ClientUpdate], weights: Sequence[float] | None = None
    ) -> Params:
        """Weighted mean of client params (default weights: sample counts); personal keys stay global."""
        ups = [u for u in updates if u.params is not None]
        if not ups:
            return state.params
        w = weights if weights is not None else [u.num_examples for u in ups]
        shared = [k for k in state.params if not k.startswith(self.personal_keys or ("\0",))]
        return {**state.params, **weighted_average([u.params for u in ups], w, keys=shared)}

    def summarize(
        self, state: ServerState, plan: RoundPlan, updates: Sequence[ClientUpdate], params: Params
    ) -> tuple[dict[str, Any], RoundMetrics]:
        return dict(state.extra), RoundMetrics()

"""`StagedMethod`: the template most methods build on.

It implements the engine contract with small hooks, so FedAvg overrides nothing and
FedProx overrides one hook:

    prepare_local(task)            client work before local training that may use any model (e.g. relabeling)
    targets(task)                  working labels for this client (relabeled ones live in client state)
    loss(model, batch, task)       the local objective on one batch (default: CE or BCE)
    regularizer(model, task)       an extra term added to the loss (default: none)
    before_local(task)             per-round client setup; returns a dict passed along as task extras
    after_local(task, extras)      -> (uploads, new client state); self.model holds the trained params
    aggregate(state, updates)      -> new global params (default: FedAvg by sample count)
    summarize(state, plan, updates, params) -> (extra, RoundMetrics)

Batched training (`fedcore.engine.batched`) asks for the same local step in functional
form, over a stack of K clients (`StackedStep`: params (K, ...), batch fields (K, B, ...)):

    batched_loss(step)             per-sample losses (K * B,) whose client means are `loss` (default: CE or BCE)
    batched_regularizer(step)      (K,) per-client values of `regularizer`, or None
    batched_samples/consts/static(task, extras)  per-sample fields, per-client tensors, Python settings
    batched_inputs(task, extras)   pos -> per-sample fields drawn on the host (default: from make_x)

A class that overrides `loss`, `regularizer` or `after_step` below the class that defines
the batched counterpart, or that builds its own optimizer, trains sequentially
(`batched_support` says why), so a method opts in only by writing the functional form.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from fedcore.config import ExperimentConfig
from fedcore.engine.batched import model_support
from fedcore.engine.program import LocalProgram, StackedStep
from fedcore.engine.store import typed_state
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

_BATCHED_TWINS = (("loss", "batched_loss"), ("regularizer", "batched_regularizer"),
                  ("after_step", "batched_after_step"), ("make_x", "batched_inputs"))


# Hooks that run before local training and may read self.model (with the task's params loaded).
_READ_MODEL = ("prepare_local", "targets", "before_local")


def _owner(cls: type, name: str) -> type:
    """The class in cls's MRO that defines attribute `name`."""
    return next(c for c in cls.__mro__ if name in c.__dict__)


class StagedMethod:
    name: str = ""
    personal_keys: tuple[str, ...] = ()
    # The dataclass of this method's client state (None: it keeps none, or a plain dict). The store
    # holds its fields; `client_state(task)` gives it back typed.
    client_state_type: type | None = None

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
        extras = self.start_local(task)

        def loss_fn(model: nn.Module, batch: Batch) -> torch.Tensor:
            return self.loss(model, batch, task, extras) + self.regularizer(model, batch, task, extras)

        stats = train_local(
            self.model, task.data, extras["labels"], loss_fn, self.optim_spec(task), task.gen,
            make_x=self.make_x(task), after_step=self.after_step(task, extras),
            optimizer=self.local_optimizer(task),
        )
        return self.finish_local(task, extras, None, stats)

    def start_local(self, task: ClientTask, load: bool = True) -> dict[str, Any]:
        """Everything before the optimizer loop, shared by the sequential and batched paths.

        load=False skips putting task.params into self.model (the batched path, when no hook
        that runs here can read the model)."""
        pre = self.prepare_local(task)
        if load:
            load_params_(self.model, task.params)
        labels = self.targets(task)
        extras = self.before_local(task)
        metrics = {**pre.get("metrics", {}), **extras.get("metrics", {})}
        return {**pre, **extras, "labels": labels, **({"metrics": metrics} if metrics else {})}

    def finish_local(self, task: ClientTask, extras: dict[str, Any], params: Params | None,
                     stats: dict[str, float]) -> ClientUpdate:
        """The ClientUpdate after training; params None = they are in self.model (sequential path)."""
        if params is not None and _owner(type(self), "after_local") is not StagedMethod:
            load_params_(self.model, params)  # after_local may read the trained model
        uploads, new_state = self.after_local(task, extras)
        return ClientUpdate(
            cid=task.cid, num_examples=task.data.n, params=params if params is not None else get_params(self.model),
            uploads=uploads, metrics={**stats, **extras.get("metrics", {})}, state=new_state,
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
    def prepare_local(self, task: ClientTask) -> dict[str, Any]:
        """Client work before local training (it may load any model); the dict joins the extras."""
        return {}

    def client_state(self, task: ClientTask) -> Any:
        """The client's state as `client_state_type` (its defaults on a first visit), built from the
        store's plain dict, so changing it changes nothing until it is returned as the new state."""
        cls = self.client_state_type
        return dict(task.state) if cls is None else typed_state(cls, task.state)

    def targets(self, task: ClientTask) -> torch.Tensor:
        """The client's working labels: relabeled ones from its state (field or key `labels`), else the given."""
        st = self.client_state(task)
        relabeled = st.get("labels") if isinstance(st, dict) else getattr(st, "labels", None)
        return relabeled if relabeled is not None else task.data.labels

    def before_local(self, task: ClientTask) -> dict[str, Any]:
        return {}

    def loss(self, model: nn.Module, batch: Batch, task: ClientTask, extras: dict[str, Any]) -> torch.Tensor:
        return self.base_loss(model(batch.x), batch.y)

    def base_loss(self, logits: torch.Tensor, y: torch.Tensor, reduction: losses.Reduction = "mean") -> torch.Tensor:
        if self.ctx is not None and self.ctx.task == "multi":
            return losses.bce(logits, y.float(), reduction)
        return losses.ce(logits, y, reduction)

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
        from fedcore.train.augment import Augmenter  # lazy: torchvision, for augmenting methods

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
        ins = task.instructions  # a Mapping or a method's dataclass; either may name a server-set lr
        lr = ins.get("lr") if isinstance(ins, Mapping) else getattr(ins, "lr", None)
        return OptimSpec.from_train(self.cfg.train, lr=lr)

    # -- batched local training (fedcore.engine.batched) -----------------------------------------
    def batched_support(self) -> str | None:
        """None when this method's local step can train batched, else the reason it cannot
        (its hooks, then its model once built)."""
        cls = type(self)
        for seq, fn in _BATCHED_TWINS:
            if _owner(cls, seq) is not _owner(cls, fn) and issubclass(_owner(cls, seq), _owner(cls, fn)):
                return f"it overrides {seq}() without {fn}()"
        for own in ("local_optimizer", "client_update"):
            if _owner(cls, own) is not StagedMethod:
                return f"it overrides {own}()"
        return model_support(self.model) if self.model is not None else None

    def local_program(self, task: ClientTask) -> LocalProgram | None:
        """The client's local run for the batched executor (the same steps as client_update)."""
        cls = type(self)
        extras = self.start_local(task, load=any(_owner(cls, h) is not StagedMethod for h in _READ_MODEL))
        if getattr(self, "_stack_keys", None) is None:  # the model's entries never change after init
            self._stack_keys = (list(self.model.state_dict()),
                                tuple(n for n, p in self.model.named_parameters() if p.requires_grad))
        keys, trainable = self._stack_keys
        return LocalProgram(
            data=task.data, gen=task.gen, spec=self.optim_spec(task), params={k: task.params[k] for k in keys},
            trainable=trainable,
            model=self.model, loss=self.batched_loss, regularizer=self.batched_regularizer,
            after_step=self.batched_after_step(task, extras),
            finish=lambda params, stats, consts: self.finish_local(task, {**extras, "batched_consts": consts},
                                                                   params, stats),
            samples={"y": extras["labels"], **self.batched_samples(task, extras)},
            consts=self.batched_consts(task, extras), static=self.batched_static(task, extras),
            inputs=self.batched_inputs(task, extras),
        )

    def batched_loss(self, step: StackedStep) -> torch.Tensor:
        """Per-sample twin of `loss` over the stack: (K * B,) values whose per-client means are the loss."""
        logits = step.net(step.params, step.batch["x"])
        if self.ctx is not None and self.ctx.task == "multi":
            return self.base_loss(step.flat(logits), step.flat(step.batch["y"]), reduction="none")
        return losses.ce_stacked(logits, step.batch["y"])

    def batched_regularizer(self, step: StackedStep) -> torch.Tensor | None:
        """Twin of `regularizer`: (K,) per-client terms added to each client's batch loss, or None."""
        return None

    def batched_after_step(self, task: ClientTask, extras: dict[str, Any]):
        """Twin of `after_step`: a function (params, consts, static) -> updated consts on the
        stacked (K, ...) tensors, or None. Share one function across clients (a bound method): the
        engine only stacks clients whose hooks are the same object; per-client values go in consts.
        The client's final consts reach `after_local` as extras["batched_consts"]."""
        return None

    def batched_samples(self, task: ClientTask, extras: dict[str, Any]) -> dict[str, torch.Tensor]:
        """Per-sample tensors (n, ...) in local order besides the labels "y"."""
        return {}

    def batched_consts(self, task: ClientTask, extras: dict[str, Any]) -> dict[str, Any]:
        """Per-client tensors (or dicts of them) the batched loss reads; shapes equal across clients."""
        return {}

    def batched_static(self, task: ClientTask, extras: dict[str, Any]) -> dict[str, Any]:
        """Hashable Python settings the batched loss branches on; clients differing here train apart."""
        return {}

    def batched_inputs(self, task: ClientTask, extras: dict[str, Any]):
        """pos -> per-sample fields drawn on the host (default: "x" from make_x), or None = plain x."""
        make_x = self.make_x(task)
        return None if make_x is None else (lambda pos: {"x": make_x(pos)})

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

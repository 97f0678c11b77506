"""The batched executor: a round's clients trained as one computation over stacked parameters.

A method opts in structurally, without the engine knowing which method it is: it offers
`batched_support() -> None` (or a reason why not) and `local_program(task) -> LocalProgram`,
which describes the client's local run as a per-batch loss over (params, batch, client
constants, static settings). The engine owns the optimizer loop (`engine.stacked`): it
stacks the parameters of clients whose programs have the same structure, draws each
client's batches from that client's own generator exactly as the sequential loop does,
evaluates the per-sample losses of all of them in one pass (`StackedNet`: grouped layers,
or torch.func.vmap) and steps a stacked SGD/Adam (`train.foptim`).

Chunks of at most `cohort_chunk` clients are trained at a time, so memory is
O(chunk x model + data), never O(cohort x data).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

from fedcore.engine.executor import SequentialExecutor
from fedcore.engine.stacknet import StackedNet
from fedcore.engine.store import ClientData
from fedcore.engine.types import ClientTask, ClientUpdate, Params
from fedcore.errors import ConfigError
from fedcore.train.local import OptimSpec

EXECUTORS = ("auto", "sequential", "batched")


@dataclass
class StackedStep:
    """What a batched loss sees: one step of K clients at once (rows = clients).

    params: current parameters (K, ...); start: the parameters each client started the round
    from; batch: per-sample fields of the step (K, B, ...) ("x", "y" and the program's
    fields; rows of a short batch are padded, and the engine masks the padding out of each
    client's mean); consts: the programs' per-client tensors, stacked (K, ...); static:
    their Python settings (equal across the stack); net: the model over stacked params.
    """

    net: StackedNet
    params: Params
    start: Params
    batch: dict[str, torch.Tensor]
    consts: dict[str, Any]
    static: Mapping[str, Hashable]
    k: int
    b: int

    def flat(self, t: torch.Tensor) -> torch.Tensor:
        """(K, B, ...) -> (K * B, ...): per-sample rows, as the loss functions take them."""
        return t.reshape(self.k * self.b, *t.shape[2:])

    def each(self, c: torch.Tensor) -> torch.Tensor:
        """A per-client tensor (K, ...) repeated for each of its samples -> (K * B, ...)."""
        return c.unsqueeze(1).expand(self.k, self.b, *c.shape[1:]).reshape(self.k * self.b, *c.shape[1:])


# loss(step) -> per-sample losses (K * B,) or (K, B), or (those, {name: per-sample values to report})
BatchedLoss = Callable[[StackedStep], "torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]"]


@dataclass
class LocalProgram:
    """One client's local run, described for the batched executor.

    samples: per-sample tensors in local order (n, ...), gathered at each batch's positions.
    inputs: pos -> per-sample fields of the batch (one row per position), called on the host
      right after the batch is drawn, for anything that draws randomness (augmentation,
      mixup); None = the engine gathers the plain normalized inputs as "x" itself.
    regularizer(step) -> (K,) per-client terms added to each client's batch loss, or None.
    after_step(params, consts, static) -> updated consts (stacked) after every optimizer step.
    finish(params, stats, consts) -> the ClientUpdate, once training ends.
    """

    data: ClientData
    gen: torch.Generator
    spec: OptimSpec
    params: Params
    trainable: tuple[str, ...]
    model: nn.Module
    loss: BatchedLoss
    finish: Callable[[Params, dict[str, float], dict[str, Any]], ClientUpdate]
    samples: dict[str, torch.Tensor] = field(default_factory=dict)
    consts: dict[str, Any] = field(default_factory=dict)
    static: Mapping[str, Hashable] = field(default_factory=dict)
    inputs: Callable[[torch.Tensor], dict[str, torch.Tensor]] | None = None
    regularizer: Callable[[StackedStep], torch.Tensor | None] | None = None
    after_step: Callable[[Params, dict[str, Any], Mapping[str, Hashable]], dict[str, Any]] | None = None


def model_support(model: nn.Module) -> str | None:
    """None when the model can be trained stacked, else why not.

    BatchNorm mixes the samples of a batch (so padded rows would change the statistics) and
    updates running buffers; dropout would draw different masks than the sequential loop.
    """
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            return f"its model has BatchNorm ({name}); use a GroupNorm model (e.g. model.params.norm=group)"
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            return f"its model has dropout ({name})"
    return None


def _tree_sig(tree: Any) -> Any:
    if isinstance(tree, Mapping):
        return tuple((k, _tree_sig(v)) for k, v in sorted(tree.items()))
    if isinstance(tree, torch.Tensor):
        return (tuple(tree.shape), tree.dtype, tree.device)
    raise TypeError(f"batched consts must be tensors or dicts of tensors, got {type(tree).__name__}")


def _fn_id(fn: Callable | None) -> Any:
    return None if fn is None else (getattr(fn, "__func__", fn), id(getattr(fn, "__self__", None)))


def signature(p: LocalProgram) -> Hashable:
    """Programs with equal signatures can share one stacked computation."""
    return (
        p.spec, p.trainable, id(p.model), tuple(sorted(p.static.items())), _tree_sig(p.consts),
        tuple((k, v.dtype, tuple(v.shape[1:])) for k, v in sorted(p.samples.items())),
        tuple((k, tuple(v.shape), v.dtype) for k, v in p.params.items()),
        p.inputs is None, _fn_id(p.loss), _fn_id(p.regularizer), _fn_id(p.after_step),
    )


class BatchedMethod(Protocol):
    """What a method offers to train batched (checked structurally, by `batched_reason`)."""

    def batched_support(self) -> str | None: ...  # None, or why this method cannot

    def local_program(self, task: ClientTask) -> LocalProgram | None: ...  # None: this task trains sequentially

    def client_update(self, task: ClientTask) -> ClientUpdate: ...


def batched_reason(method: Any) -> str | None:
    """None when `method` can train batched, else why not (from its own `batched_support`)."""
    support = getattr(method, "batched_support", None)
    if not callable(support) or not callable(getattr(method, "local_program", None)):
        return "it describes no batched local step"
    return support()


MAX_CHUNK = 64
STATE_BUDGET = 1 << 30  # bytes of stacked weights, gradients and optimizer state in a default chunk
# Bytes of one step's activations in a default chunk. On the CPU a stack is fastest while its
# activations stay cache-sized: a 28x28 CNN stack of 64 clients ran at 0.7x the sequential
# speed, of 8 at 0.97x (docs/performance.md). On CUDA only memory bounds it (not measured).
ACT_BUDGET = {"cpu": 64 << 20, "cuda": 2 << 30}


def activation_bytes(model: nn.Module, in_shape: tuple[int, ...], device: torch.device) -> int:
    """Bytes of the outputs of every leaf module for one sample (what the backward keeps, roughly)."""
    total = 0

    def hook(module, inputs, output):
        nonlocal total
        if isinstance(output, torch.Tensor):
            total += output.numel() * output.element_size()

    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(hook) for m in leaves]
    try:
        with torch.no_grad():
            model(torch.zeros(1, *in_shape, device=device))
    finally:
        for h in handles:
            h.remove()
    return total


def auto_chunk(p: LocalProgram) -> int:
    """Clients per stack when train.cohort_chunk is unset: about five copies of the weights per
    client (weights, gradients, two optimizer moments, a start copy) within STATE_BUDGET, one
    step's activations within ACT_BUDGET, at most MAX_CHUNK."""
    state = 5 * sum(t.numel() * t.element_size() for t in p.params.values())
    store = p.data.store
    act = p.spec.batch_size * activation_bytes(p.model, store.in_shape, store.device)
    budget = ACT_BUDGET.get(store.device.type, ACT_BUDGET["cpu"])
    return max(1, min(MAX_CHUNK, STATE_BUDGET // max(state, 1), budget // max(act, 1)))


class BatchedExecutor(SequentialExecutor):
    """Trains a round's clients in stacks of at most `chunk` (None: `auto_chunk`); probes stay
    sequential. A round of one client trains on the sequential path (nothing to stack)."""

    name = "batched"

    def __init__(self, chunk: int | None = None) -> None:
        if chunk is not None and chunk < 1:
            raise ValueError("cohort chunk must be >= 1")
        self.chunk = chunk
        self._auto: dict[Hashable, int] = {}

    def chunk_for(self, p: LocalProgram) -> int:
        if self.chunk is not None:
            return self.chunk
        key = (id(p.model), p.spec.batch_size, p.data.store.device)
        if key not in self._auto:
            self._auto[key] = auto_chunk(p)
        return self._auto[key]

    def run_clients(self, method: Any, tasks: Sequence[ClientTask]) -> list[ClientUpdate]:
        from fedcore.engine.stacked import finish_stats, train_stacked

        if len(tasks) < 2:
            return super().run_clients(method, tasks)
        programs = [method.local_program(t) for t in tasks]
        out: list[ClientUpdate | None] = [None] * len(tasks)
        groups: dict[Hashable, list[int]] = {}
        for i, p in enumerate(programs):
            if p is None:
                out[i] = method.client_update(tasks[i])
            else:
                groups.setdefault(signature(p), []).append(i)
        for idx in groups.values():
            chunk = self.chunk_for(programs[idx[0]])
            for s in range(0, len(idx), chunk):
                part = idx[s:s + chunk]
                for i, (params, sums, consts) in zip(part, train_stacked([programs[i] for i in part]), strict=True):
                    out[i] = programs[i].finish(params, finish_stats(sums, programs[i].spec), consts)
        return out  # type: ignore[return-value]


def make_executor(choice: str, method: Any, chunk: int | None = None) -> SequentialExecutor:
    """The executor `train.executor` asks for; 'auto' = batched wherever the method supports it."""
    if choice not in EXECUTORS:
        raise ConfigError(f"train.executor must be one of {', '.join(EXECUTORS)}, got '{choice}'")
    if choice == "sequential":
        return SequentialExecutor()
    reason = batched_reason(method)
    if reason is None:
        return BatchedExecutor(chunk)
    if choice == "batched":
        raise ConfigError(f"method '{getattr(method, 'name', '?')}' cannot train batched: {reason}; "
                          "set train.executor=auto or sequential")
    return SequentialExecutor()

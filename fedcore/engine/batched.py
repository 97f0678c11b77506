"""The batched executor: a round's clients trained as one computation over stacked parameters.

A method opts in structurally, without the engine knowing which method it is: it offers
`batched_support() -> None` (or a reason why not) and `local_program(task) -> LocalProgram`,
which describes the client's local run as a per-batch loss over (params, batch, client
constants, static settings). The engine owns the optimizer loop (`engine.stacked`): it
stacks the parameters of clients whose programs have the same structure, draws each
client's batches from that client's own generator exactly as the sequential loop does,
evaluates the per-sample losses of all of them in one pass (`StackedNet`: grouped layers,
or torch.func.vmap) and steps a stacked SGD/Adam (`engine.foptim`).

Chunks of at most `cohort_chunk` clients are trained at a time, so memory is
O(chunk x model + data), never O(cohort x data).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import torch
from torch import nn

from fedcore.engine.executor import SequentialExecutor
from fedcore.engine.program import LocalProgram
from fedcore.engine.stacked import finish_stats, train_stacked
from fedcore.engine.stacknet import StackedNet
from fedcore.engine.types import ClientTask, ClientUpdate
from fedcore.errors import ConfigError

EXECUTORS = ("auto", "sequential", "batched")


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
        self._nets: dict[int, StackedNet] = {}  # per model (id): compiled once per run, not per chunk

    def chunk_for(self, p: LocalProgram) -> int:
        if self.chunk is not None:
            return self.chunk
        key = (id(p.model), p.spec.batch_size, p.data.store.device)
        if key not in self._auto:
            self._auto[key] = auto_chunk(p)
        return self._auto[key]

    def net_for(self, model: nn.Module) -> StackedNet:
        net = self._nets.get(id(model))
        if net is None or net.model is not model:  # (an id may be reused by a later model)
            net = self._nets[id(model)] = StackedNet(model)
        return net

    def run_clients(self, method: Any, tasks: Sequence[ClientTask]) -> list[ClientUpdate]:
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
                trained = train_stacked([programs[i] for i in part], self.net_for(programs[part[0]].model))
                for i, (params, sums, consts) in zip(part, trained, strict=True):
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

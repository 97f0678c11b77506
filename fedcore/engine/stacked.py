"""The stacked optimizer loop behind the batched executor.

K clients with the same program structure train as rows of (K, ...) tensors. Every step,
each client draws its next batch from its own generator, exactly as `train_local` does
(same shuffles, same skip of a lone trailing sample, the program's `inputs` hook right
after the draw); short batches are padded and the padding is masked out of the client's
mean, so a batch's size counts as in the sequential loop. A client whose steps have run
out takes no more: it leaves the stack at once, so clients of unequal size neither change
each other's results nor keep idle rows computing.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence

from fedcore.engine.batched import LocalProgram, StackedStep
from fedcore.engine.stacknet import StackedNet
from fedcore.engine.types import Params
from fedcore.train.foptim import make_stacked_optimizer
from fedcore.train.local import OptimSpec

Tensor = torch.Tensor


def _positions(p: LocalProgram) -> Iterator[Tensor]:
    """The client's batches in `train_local`'s order and with its skip rule."""
    data, spec = p.data, p.spec
    for pos in data.batches(spec.batch_size, p.gen, epochs=spec.epochs, steps=spec.steps):
        if len(pos) < 2 and data.n >= 2:
            continue  # a lone trailing sample breaks BatchNorm and adds nothing (as train_local)
        yield pos


def _stack(trees: Sequence[Any]) -> Any:
    if isinstance(trees[0], dict):
        return {k: _stack([t[k] for t in trees]) for k in trees[0]}
    return torch.stack(list(trees))


def _map(tree: Any, fn) -> Any:
    return {k: _map(v, fn) for k, v in tree.items()} if isinstance(tree, dict) else fn(tree)


class _Stack:
    """Stacked parameters, optimizer state, constants and running sums of the rows still in training."""

    def __init__(self, programs: Sequence[LocalProgram]) -> None:
        first = programs[0]
        self.dev = first.data.store.device
        self.names = list(first.params)
        self.trainable = [n for n in self.names if n in set(first.trainable)]
        self.ids = list(range(len(programs)))
        self.params = {n: torch.stack([p.params[n].detach() for p in programs]) for n in self.names}
        self._set_start()
        self.consts = _stack([p.consts for p in programs]) if first.consts else {}
        sizes = torch.tensor([p.data.n for p in programs], device=self.dev)
        self.offsets = torch.cumsum(sizes, 0) - sizes
        self.fields = {k: torch.cat([p.samples[k] for p in programs]) for k in first.samples}
        if first.inputs is None:
            self.fields["__idx"] = torch.cat([p.data.indices for p in programs])
        s = first.spec
        self.opt = make_stacked_optimizer(s.kind, s.lr, s.momentum, s.weight_decay)
        self.loss_sum = torch.zeros(len(programs), device=self.dev)
        self.steps = torch.zeros(len(programs), dtype=torch.long, device=self.dev)
        self.logs: dict[str, Tensor] = {}

    def _set_start(self) -> None:
        self.start = {n: (self.params[n].clone() if n in self.trainable else self.params[n]) for n in self.names}
        for n in self.trainable:
            self.params[n].requires_grad_(True)

    def leaves(self) -> list[Tensor]:
        return [self.params[n] for n in self.trainable]

    def take(self, r: int) -> tuple[Params, dict[str, Any], dict[str, Any]]:
        params = {n: self.params[n][r].detach().clone() for n in self.names}
        sums = {"loss": self.loss_sum[r], "steps": self.steps[r], "logs": {k: v[r] for k, v in self.logs.items()}}
        return params, sums, _map(self.consts, lambda t: t[r].clone())

    def keep(self, rows: list[int]) -> None:
        """Drop every row not in `rows` (finished clients, already taken)."""
        idx = torch.tensor(rows, device=self.dev)
        start = {n: self.start[n].index_select(0, idx) for n in self.trainable}
        self.params = {n: self.params[n].detach().index_select(0, idx) for n in self.names}
        self.start = {n: start.get(n, self.params[n]) for n in self.names}
        for n in self.trainable:
            self.params[n].requires_grad_(True)
        self.consts = _map(self.consts, lambda t: t.index_select(0, idx))
        self.opt.select(idx)
        self.offsets, self.loss_sum, self.steps = (t.index_select(0, idx) for t in (self.offsets, self.loss_sum,
                                                                                   self.steps))
        self.logs = {k: v.index_select(0, idx) for k, v in self.logs.items()}
        self.ids = [self.ids[r] for r in rows]


def _client_losses(st: _Stack, first: LocalProgram, net: StackedNet, batch: dict, w: Tensor):
    """Each client's batch loss: masked mean of its per-sample losses, plus its regularizer -> (K,), logs."""
    k, b = w.shape
    step = StackedStep(net, st.params, st.start, batch, st.consts, first.static, k, b)
    out = first.loss(step)
    per, logs = out if isinstance(out, tuple) else (out, {})
    den = w.sum(1).clamp(min=1.0)
    loss = (per.reshape(k, b) * w).sum(1) / den
    reg = first.regularizer(step) if first.regularizer is not None else None
    if reg is not None:
        loss = loss + reg
    return loss, {name: (v.reshape(k, b) * w).sum(1) / den for name, v in logs.items()}


def _pad(rows: list[Tensor | None], like: Tensor) -> Tensor:
    empty = like.new_zeros((0, *like.shape[1:]))
    return pad_sequence([empty if r is None else r for r in rows], batch_first=True)


def _batch(st: _Stack, first: LocalProgram, pos: list[Tensor | None], host: list[dict | None]) -> tuple[dict, Tensor]:
    """Per-sample fields (R, B, ...) of this step and the weights (R, B) that mask the padding."""
    like = next(p for p in pos if p is not None)
    pm = _pad(pos, like)
    lens = torch.tensor([0 if p is None else len(p) for p in pos], device=st.dev)
    w = (torch.arange(pm.shape[1], device=st.dev)[None, :] < lens[:, None]).to(st.loss_sum.dtype)
    g = pm + st.offsets[:, None]
    batch = {k: v[g] for k, v in st.fields.items() if k != "__idx"}
    if "__idx" in st.fields:
        store = first.data.store
        batch["x"] = store.get(st.fields["__idx"][g].reshape(-1)).view(*g.shape, *store.in_shape)
    h0 = next((h for h in host if h is not None), None)
    for k, v0 in (h0 or {}).items():
        for p, h in zip(pos, host, strict=True):
            if h is not None and len(h[k]) != len(p):
                raise ValueError(f"inputs() field '{k}' has {len(h[k])} rows for a batch of {len(p)}; "
                                 "give one row per sample")
        batch[k] = _pad([None if h is None else h[k] for h in host], v0)
    return batch, w


def _draw(st: _Stack, programs, its) -> tuple[list[Tensor | None], list[dict | None]]:
    pos, host = [], []
    for pid in st.ids:
        p = next(its[pid], None)
        pos.append(p)
        host.append(programs[pid].inputs(p) if p is not None and programs[pid].inputs is not None else None)
    return pos, host


def train_stacked(programs: Sequence[LocalProgram]) -> list[tuple[Params, dict[str, Any], dict[str, Any]]]:
    """Train programs of one signature together -> per program (params, sums, consts), in order.

    sums: {"loss": summed batch losses, "steps": optimizer steps taken, "logs": summed logged
    terms}, as 0-d tensors on the device (see `finish_stats`).
    """
    first = programs[0]
    first.model.train()  # as train_local (the functional calls read the module's mode)
    st = _Stack(programs)
    net = StackedNet(first.model)
    its = [_positions(p) for p in programs]
    out: dict[int, tuple] = {}
    while st.ids:
        pos, host = _draw(st, programs, its)
        rows = [r for r, p in enumerate(pos) if p is not None]
        if len(rows) < len(pos):
            # A client whose steps ran out takes no more steps: it leaves the stack with its
            # params and sums (leaving costs one copy of the stack; freezing its row would cost
            # that on every remaining step).
            for r, p in enumerate(pos):
                if p is None:
                    out[st.ids[r]] = st.take(r)
            if not rows:
                break
            st.keep(rows)
            pos, host = [pos[r] for r in rows], [host[r] for r in rows]
        _step(st, first, net, pos, host)
    return [out[i] for i in range(len(programs))]


def _step(st: _Stack, first: LocalProgram, net: StackedNet, pos, host) -> None:
    batch, w = _batch(st, first, pos, host)
    loss, logs = _client_losses(st, first, net, batch, w)
    leaves = st.leaves()
    grads = torch.autograd.grad(loss.sum(), leaves, allow_unused=True)
    st.opt.step(leaves, list(grads))
    st.loss_sum += loss.detach()
    st.steps += 1
    for k, v in logs.items():
        st.logs[k] = st.logs.get(k, torch.zeros_like(st.loss_sum)) + v.detach()
    if first.after_step is not None:
        st.consts = {**st.consts, **first.after_step({n: t.detach() for n, t in st.params.items()}, st.consts,
                                                     first.static)}


def finish_stats(sums: dict[str, Any], spec: OptimSpec) -> dict[str, float]:
    """`train_local`'s metrics from the sums: mean batch loss, steps, lr (and logged terms' means)."""
    steps = int(sums["steps"])
    out = {"train/loss": float(sums["loss"]) / max(steps, 1), "train/steps": float(steps), "lr": float(spec.lr)}
    out.update({k: float(v) / max(steps, 1) for k, v in sums["logs"].items()})
    return out

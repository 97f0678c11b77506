"""The stacked optimizer loop behind the batched executor.

K clients with the same program structure train as rows of (K, ...) tensors. Every step,
each client draws its next batch from its own generator exactly as `train_local` does
(same shuffles, same skip of a lone trailing sample, the program's `inputs` hook right
after the draw); short batches are padded and the padding is masked out of the client's
mean, so a batch's size counts as in the sequential loop.

Clients of unequal size take unequal numbers of steps. The rows are ordered by that number
(it follows from the client's size and the optimizer spec alone), so the clients still
training are always the first rows: a client whose steps have run out drops off the end
of the stack, keeps its parameters and optimizer state where they are, and costs no more
compute, copies or padding.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch

from fedcore.engine.drawn import Drawn
from fedcore.engine.foptim import clip_rows_, make_stacked_optimizer
from fedcore.engine.program import LocalProgram, StackedStep
from fedcore.engine.stacknet import StackedNet
from fedcore.engine.types import OptimSpec, Params

Tensor = torch.Tensor


def _positions(p: LocalProgram, gen: torch.Generator) -> Iterator[Tensor]:
    """The client's batches in `train_local`'s order and with its skip rule."""
    data, spec = p.data, p.spec
    for pos in data.batches(spec.batch_size, gen, epochs=spec.epochs, steps=spec.steps):
        if len(pos) < 2 and data.n >= 2:
            continue  # a lone trailing sample breaks BatchNorm and adds nothing (as train_local)
        yield pos


def num_steps(n: int, spec: OptimSpec) -> int:
    """How many optimizer steps a client of n samples takes in `train_local` (the batch sizes,
    unlike their contents, do not depend on the shuffle)."""
    if n == 0:
        return 0
    bs = spec.batch_size
    sizes = [min(bs, n - s) for s in range(0, n, bs)]  # one epoch
    ok = [s >= 2 or n < 2 for s in sizes]  # a lone sample is skipped when the client has more
    if spec.steps is None:
        return max(spec.epochs, 1) * sum(ok)  # the loop runs one epoch even for epochs <= 0
    full, part = divmod(spec.steps, len(sizes))
    return full * sum(ok) + sum(ok[:part])


def _tree(trees: Sequence[Any], fn) -> Any:
    if isinstance(trees[0], dict):
        return {k: _tree([t[k] for t in trees], fn) for k in trees[0]}
    return fn(trees)


def _rows(tree: Any, k: int | slice) -> Any:
    return {n: _rows(v, k) for n, v in tree.items()} if isinstance(tree, dict) else tree[k]


class _Stack:
    """Stacked parameters, optimizer, constants and running sums; rows [0, k) are still training."""

    def __init__(self, programs: Sequence[LocalProgram]) -> None:
        first = programs[0]
        self.dev = first.data.store.device
        self.names = list(first.params)
        self.trainable = [n for n in self.names if n in set(first.trainable)]
        self.k = len(programs)
        self.params, self.start = {}, {}
        for n in self.names:
            first_t = first.params[n].detach()
            if all(p.params[n] is first.params[n] for p in programs):  # the global model, as usual
                # One copy to train; the round's starting point (a proximal anchor, a KD teacher)
                # is the shared tensor itself, seen K times.
                self.start[n] = first_t.unsqueeze(0).expand(self.k, *first_t.shape)
                self.params[n] = self.start[n].clone()
            else:  # e.g. personal parameters differ per client
                self.params[n] = torch.stack([p.params[n].detach() for p in programs])
                self.start[n] = self.params[n].clone() if n in self.trainable else self.params[n]
        self.consts = _tree([p.consts for p in programs], torch.stack) if first.consts else {}
        sizes = [p.data.n for p in programs]
        self.starts = [sum(sizes[:r]) for r in range(len(sizes))]  # each client's first row in the fields
        self.offsets = torch.tensor(self.starts, dtype=torch.long, device=self.dev)
        self.fields = {k: torch.cat([p.samples[k] for p in programs]) for k in first.samples}
        if first.inputs is None:
            self.fields["__idx"] = torch.cat([p.data.indices for p in programs])
        s = first.spec
        self.opt = make_stacked_optimizer(s.kind, s.lr, s.momentum, s.weight_decay, fused=s.fused)
        self.grad_clip = s.grad_clip
        self.loss_sum = torch.zeros(len(programs), device=self.dev)
        self.logs: dict[str, Tensor] = {}

    def step_params(self) -> tuple[Params, list[Tensor]]:
        """This step's parameters (rows [0, k)) and the trained ones among them as fresh leaves."""
        params = {n: self.params[n][: self.k] for n in self.names}
        leaves = [params[n].detach().requires_grad_(True) for n in self.trainable]
        params.update(zip(self.trainable, leaves, strict=True))
        return params, leaves

    def take(self, r: int, steps: int) -> tuple[Params, dict[str, Any], dict[str, Any]]:
        """Row r's results. Views, not copies: a finished row is never written again."""
        params = {n: self.params[n][r] for n in self.names}
        sums = {"loss": self.loss_sum[r], "steps": steps, "logs": {k: v[r] for k, v in self.logs.items()}}
        return params, sums, _rows(self.consts, r)


def _client_losses(first: LocalProgram, net: StackedNet, params: Params, st: _Stack, batch: dict, w: Tensor):
    """Each client's batch loss: masked mean of its per-sample losses, plus its regularizer -> (k,), logs."""
    k, b = w.shape
    step = StackedStep(net, params, _rows(st.start, slice(0, k)), batch, _rows(st.consts, slice(0, k)),
                       first.static, k, b)
    out = first.loss(step)
    per, logs = out if isinstance(out, tuple) else (out, {})
    den = w.sum(1).clamp(min=1.0)
    loss = (per.reshape(k, b) * w).sum(1) / den
    reg = first.regularizer(step) if first.regularizer is not None else None
    if reg is not None:
        loss = loss + reg
    return loss, {name: (v.reshape(k, b) * w).sum(1) / den for name, v in logs.items()}


def _pad(rows: list[Tensor]) -> Tensor:
    """Rows of per-sample values (b_i, ...) -> (k, max b_i, ...), zero-padded. (Only the few short
    rows get a copy; torch's pad_sequence copies every row and costs several times more.)"""
    b = max(len(r) for r in rows)
    return torch.stack([r if len(r) == b else torch.cat([r, r.new_zeros((b - len(r), *r.shape[1:]))]) for r in rows])


def _batch(st: _Stack, first: LocalProgram, pos: list[Tensor], host: list[dict | None]) -> tuple[dict, Tensor]:
    """Per-sample fields (k, B, ...) of this step and the weights (k, B) that mask the padding."""
    pm = _pad(pos)
    lens = torch.tensor([len(p) for p in pos], device=st.dev)
    w = (torch.arange(pm.shape[1], device=st.dev)[None, :] < lens[:, None]).to(st.loss_sum.dtype)
    g = pm + st.offsets[: len(pos), None]
    batch = {k: v[g] for k, v in st.fields.items() if k != "__idx"}
    if "__idx" in st.fields:
        store = first.data.store
        batch["x"] = store.get(st.fields["__idx"][g].reshape(-1)).view(*g.shape, *store.in_shape)
    if host[0] is not None:
        for k in host[0]:
            for p, h in zip(pos, host, strict=True):
                if len(h[k]) != len(p):
                    raise ValueError(f"inputs() field '{k}' has {len(h[k])} rows for a batch of {len(p)}; "
                                     "give one row per sample")
            batch[k] = _pad([h[k] for h in host])
    return batch, w


def train_stacked(programs: Sequence[LocalProgram], net: StackedNet | None = None,
                  ) -> list[tuple[Params, dict[str, Any], dict[str, Any]]]:
    """Train programs of one signature together -> per program (params, sums, consts), in order.

    sums: {"loss": summed batch losses (0-d tensor), "steps": optimizer steps, "logs": summed
    logged terms (0-d tensors)}; see `finish_stats`. net: the programs' model stacked (default:
    built here; a caller training many chunks passes one, as building it costs milliseconds).
    """
    steps = [num_steps(p.data.n, p.spec) for p in programs]
    order = sorted(range(len(programs)), key=lambda i: -steps[i])  # stable: longest runs first
    progs = [programs[i] for i in order]
    first = progs[0]
    first.model.train()  # as train_local (the functional calls read the module's mode)
    st = _Stack(progs)
    net = net if net is not None else StackedNet(first.model)
    its = [_positions(p, p.gen) for p in progs]
    plan = [steps[i] for i in order]
    # Without a host hook only the shuffles draw from the generators: draw the round up front.
    drawn = None if first.inputs is not None else Drawn(
        st.fields, first.data.store, its, plan, st.starts, first.spec.batch_size, st.loss_sum.dtype, st.dev)
    for s in range(plan[0] if plan else 0):
        st.k = sum(1 for n in plan if n > s)  # rows still training form a prefix
        if drawn is not None:
            batch, w = drawn.batch(s, st.k)
        else:
            batch, w = _drawn_now(st, first, its, progs, plan)
        _step(st, first, net, batch, w)
    if drawn is None:
        for r, it in enumerate(its):
            if next(it, None) is not None:
                raise RuntimeError(f"client {progs[r].data.cid} has more batches than its predicted {plan[r]}")
    out: list[Any] = [None] * len(programs)
    for r, i in enumerate(order):
        out[i] = st.take(r, steps[i])
    return out


def _drawn_now(st: _Stack, first: LocalProgram, its: list[Iterator[Tensor]], progs: Sequence[LocalProgram],
               plan: list[int]) -> tuple[dict, Tensor]:
    """This step's batch, drawn step by step: the inputs hook draws from the generators between shuffles."""
    pos = [next(its[r], None) for r in range(st.k)]
    if any(p is None for p in pos):
        raise RuntimeError(f"a client ran out of batches before its predicted {plan[0]} steps")
    host = [progs[r].inputs(pos[r]) if progs[r].inputs is not None else None for r in range(st.k)]
    return _batch(st, first, pos, host)


def _step(st: _Stack, first: LocalProgram, net: StackedNet, batch: dict, w: Tensor) -> None:
    params, leaves = st.step_params()
    loss, logs = _client_losses(first, net, params, st, batch, w)
    grads = torch.autograd.grad(loss.sum(), leaves, allow_unused=True)
    if st.grad_clip:
        clip_rows_(grads, st.grad_clip)
    st.opt.step([st.params[n][: st.k] for n in st.trainable], list(grads))
    k = st.k
    st.loss_sum[:k] += loss.detach()
    for name, v in logs.items():
        st.logs.setdefault(name, torch.zeros_like(st.loss_sum))[:k] += v.detach()
    if first.after_step is not None:
        new = first.after_step({n: t[:k] for n, t in st.params.items()}, _rows(st.consts, slice(0, k)), first.static)
        for name, v in new.items():  # written into rows [0, k): finished rows keep their values
            _assign(st.consts[name], v)


def _assign(dst: Any, src: Any) -> None:
    if isinstance(dst, dict):
        for n in dst:
            _assign(dst[n], src[n])
    else:
        dst[: len(src)].copy_(src)


def finish_stats(sums: dict[str, Any], spec: OptimSpec) -> dict[str, float]:
    """`train_local`'s metrics from the sums: mean batch loss, steps, lr (and logged terms' means)."""
    steps = int(sums["steps"])
    out = {"train/loss": float(sums["loss"]) / max(steps, 1), "train/steps": float(steps), "lr": float(spec.lr)}
    out.update({k: float(v) / max(steps, 1) for k, v in sums["logs"].items()})
    return out

"""SGD and Adam over stacked parameters (one row per client), update for update like torch.optim.

The batched executor trains a cohort as tensors of shape (K, ...). These optimizers repeat
the single-tensor updates of torch.optim.SGD and torch.optim.Adam op for op (the order in
which they apply weight decay, momentum and the bias corrections), so a client's row ends
where its own optimizer would have taken it; the row-wise maths is the same, so the rows
never interact. As in torch.optim, a tensor whose gradient is None is skipped and keeps no
state until it first gets one.

The stack may shrink between steps (clients that have taken all their local steps drop off
its end; see `fedcore.engine.stacked`): a step updates the first rows its params have and
leaves the state of the rows beyond untouched.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

Tensor = torch.Tensor


def _present(params: Sequence[Tensor], grads: Sequence[Tensor | None]) -> tuple[list[int], list[Tensor], list[Tensor]]:
    idx = [i for i, g in enumerate(grads) if g is not None]
    return idx, [params[i] for i in idx], [grads[i] for i in idx]  # type: ignore[misc]


class StackedSGD:
    """torch.optim.SGD(lr, momentum, weight_decay) with dampening 0 and no Nesterov."""

    def __init__(self, lr: float, momentum: float = 0.0, weight_decay: float = 0.0) -> None:
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.buf: dict[int, Tensor] = {}  # momentum buffer per tensor index, made at its first gradient

    @torch.no_grad()
    def step(self, params: Sequence[Tensor], grads: Sequence[Tensor | None]) -> None:
        """One update; consumes `grads` (they are overwritten, or kept as momentum buffers)."""
        idx, ps, gs = _present(params, grads)
        if not idx:
            return
        if self.weight_decay != 0:
            torch._foreach_add_(gs, ps, alpha=self.weight_decay)  # grad + wd * param
        if self.momentum != 0:
            old = [j for j, i in enumerate(idx) if i in self.buf]
            if old:
                bufs = [self.buf[idx[j]][: len(ps[j])] for j in old]
                torch._foreach_mul_(bufs, self.momentum)
                torch._foreach_add_(bufs, [gs[j] for j in old])
            for i, g in zip(idx, gs, strict=True):
                if i not in self.buf:  # first gradient: the buffer is the gradient (ours to keep)
                    self.buf[i] = g.detach()
            gs = [self.buf[i][: len(p)] for i, p in zip(idx, ps, strict=True)]
        torch._foreach_add_(ps, gs, alpha=-self.lr)


class StackedAdam:
    """torch.optim.Adam(lr, betas, eps, weight_decay) with amsgrad off (L2 decay, not AdamW)."""

    def __init__(self, lr: float, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, fused: bool = False) -> None:
        self.lr, self.betas, self.eps, self.weight_decay, self.fused = lr, betas, eps, weight_decay, fused
        self.state: dict[int, dict] = {}  # per tensor index: step count, exp_avg, exp_avg_sq

    @torch.no_grad()
    def step(self, params: Sequence[Tensor], grads: Sequence[Tensor | None]) -> None:
        """One update; consumes `grads`. Every row still in the stack has taken the same number
        of steps (rows leave rather than pause), so one count per tensor serves them all."""
        if self.fused:
            return self._fused_step(params, grads)
        beta1, beta2 = self.betas
        for i, p in enumerate(params):
            d = grads[i]
            if d is None:
                continue
            if i not in self.state:
                # denom: scratch for the step's denominator, kept so that a step allocates nothing
                # (a fresh few-MiB tensor per step per layer page-faults; same values either way)
                self.state[i] = {"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p),
                                 "denom": torch.empty_like(p)}
            st = self.state[i]
            m, v, denom = st["exp_avg"][: len(p)], st["exp_avg_sq"][: len(p)], st["denom"][: len(p)]
            st["step"] += 1
            if self.weight_decay != 0:
                d.add_(p, alpha=self.weight_decay)
            m.lerp_(d, 1 - beta1)
            v.mul_(beta2).addcmul_(d, d, value=1 - beta2)
            step = float(st["step"])
            step_size = self.lr / (1 - beta1**step)
            torch.sqrt(v, out=denom)  # torch.optim's (v.sqrt() / sqrt(bc2)) + eps, in place: same rounding
            denom.div_((1 - beta2**step) ** 0.5).add_(self.eps)
            p.addcdiv_(m, denom, value=-step_size)

    def _fused_step(self, params: Sequence[Tensor], grads: Sequence[Tensor | None]) -> None:
        """torch.optim.Adam(fused=True)'s update: one kernel over every tensor, elementwise, so each
        row still ends where its own fused optimizer would, up to the kernel's rounding (it is not
        bitwise across tensor shapes; tests/engine/test_foptim.py bounds the gap)."""
        idx, ps, gs = _present(params, grads)
        if not idx:
            return
        for i, p in zip(idx, ps, strict=True):
            if i not in self.state:  # torch.optim keeps the step as a float32 tensor for this kernel
                self.state[i] = {"step_t": torch.zeros((), dtype=torch.float32, device=p.device),
                                 "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}
        sts = [self.state[i] for i in idx]
        steps = [st["step_t"] for st in sts]
        torch._foreach_add_(steps, 1)
        torch._fused_adam_(ps, gs, [st["exp_avg"][: len(p)] for st, p in zip(sts, ps, strict=True)],
                           [st["exp_avg_sq"][: len(p)] for st, p in zip(sts, ps, strict=True)], [], steps,
                           lr=self.lr, beta1=self.betas[0], beta2=self.betas[1], weight_decay=self.weight_decay,
                           eps=self.eps, amsgrad=False, maximize=False)


@torch.no_grad()
def clip_rows_(grads: Sequence[Tensor | None], max_norm: float) -> Tensor | None:
    """torch.nn.utils.clip_grad_norm_ for each row of a stack: row r's gradients (every tensor's
    r-th slice) are scaled by min(1, max_norm / (||g_r|| + 1e-6)), the global L2 norm over all its
    tensors. Returns the rows' norms before clipping (K,), or None when no gradient is present."""
    present = [g for g in grads if g is not None]
    if not present:
        return None
    sq = torch.stack([g.flatten(1).pow(2).sum(1) for g in present]).sum(0)
    norms = sq.sqrt()
    coef = (max_norm / (norms + 1e-6)).clamp_(max=1.0)
    for g in present:
        g.mul_(coef.view(-1, *([1] * (g.dim() - 1))))
    return norms


def make_stacked_optimizer(kind: str, lr: float, momentum: float, weight_decay: float,
                           fused: bool = False) -> StackedSGD | StackedAdam:
    """The stacked twin of `fedcore.train.local.make_optimizer` (same kinds and defaults)."""
    if kind == "adam":
        return StackedAdam(lr, weight_decay=weight_decay, fused=fused)
    return StackedSGD(lr, momentum=momentum, weight_decay=weight_decay)

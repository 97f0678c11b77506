"""The local training loop shared by every method, plus whole-client scoring passes.

Methods supply a loss closure `(model, batch) -> scalar`; the loop owns batching,
the optimizer and step hooks, so methods only write maths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from fedcore.engine.store import ClientData
from fedcore.engine.types import OptimSpec


@dataclass
class Batch:
    pos: torch.Tensor  # local positions (B,)
    x: torch.Tensor  # normalized inputs (B, C, H, W)
    y: torch.Tensor  # working labels (B,) or (B, C)


def make_optimizer(params, spec: OptimSpec) -> torch.optim.Optimizer:
    if spec.kind == "adam":
        return torch.optim.Adam(params, lr=spec.lr, weight_decay=spec.weight_decay, fused=spec.fused or None)
    return torch.optim.SGD(params, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay)


LossFn = Callable[[nn.Module, Batch], torch.Tensor]


def train_local(
    model: nn.Module,
    data: ClientData,
    labels: torch.Tensor,
    loss_fn: LossFn,
    spec: OptimSpec,
    gen: torch.Generator,
    make_x: Callable[[torch.Tensor], torch.Tensor] | None = None,
    after_step: Callable[[nn.Module], None] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
) -> dict[str, float]:
    """Run local SGD/Adam on one client; returns {'train/loss': mean loss, 'train/steps': n, 'lr': lr}.

    labels: the client's working labels in local order. make_x: pos -> inputs (for
    augmentation); default is the plain normalized batch. after_step: e.g. EMA updates.
    """
    model.train()
    opt = optimizer or make_optimizer([p for p in model.parameters() if p.requires_grad], spec)
    clipped = [p for g in opt.param_groups for p in g["params"]] if spec.grad_clip else None
    total, steps = torch.zeros((), device=labels.device), 0
    for pos in data.batches(spec.batch_size, gen, epochs=spec.epochs, steps=spec.steps):
        if len(pos) < 2 and data.n >= 2:
            continue  # a lone trailing sample breaks BatchNorm and adds nothing
        x = make_x(pos) if make_x is not None else data.x(pos)
        loss = loss_fn(model, Batch(pos=pos, x=x, y=labels[pos]))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clipped:
            torch.nn.utils.clip_grad_norm_(clipped, spec.grad_clip)
        opt.step()
        if after_step is not None:
            after_step(model)
        total += loss.detach()
        steps += 1
    # lr is reported per round so schedules and per-stage optimizers show up in the curves.
    lr = float(opt.param_groups[0]["lr"])
    return {"train/loss": float(total) / max(steps, 1), "train/steps": float(steps), "lr": lr}


@torch.no_grad()
def predict_client(model: nn.Module, data: ClientData, batch_size: int = 1024,
                   features: bool = False) -> torch.Tensor:
    """Logits (or backbone features) for every local sample, in local order: (n, C) or (n, d)."""
    model.eval()
    outs = [(model.features(data.x(pos)) if features else model(data.x(pos))) for pos in data.eval_batches(batch_size)]
    return torch.cat(outs) if outs else torch.empty(0)


def per_sample_losses(model: nn.Module, data: ClientData, labels: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """Cross-entropy of the model on every local sample against `labels`: (n,)."""
    logits = predict_client(model, data, batch_size)
    return torch.nn.functional.cross_entropy(logits, labels, reduction="none")

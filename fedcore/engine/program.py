"""What a method hands the batched executor: a client's local run as a per-batch loss.

`LocalProgram` describes one client's run (its data, generator, optimizer spec, start
parameters, loss and hooks); `StackedStep` is what that loss sees at every step, for K
clients at once. `engine.batched` groups and chunks programs, `engine.stacked` trains them.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from fedcore.engine.stacknet import StackedNet
from fedcore.engine.store import ClientData
from fedcore.engine.types import ClientUpdate, OptimSpec, Params


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

"""FedProx: FedAvg plus a proximal pull towards the global model.

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith. "Federated Optimization in Heterogeneous
Networks." MLSys 2020, arXiv:1812.06127.

Adds the proximal term mu/2 * ||w - w_g||^2 to the local loss, w_g being the global
model the client started from. Departures: a fixed number of local epochs instead of
the paper's inexact-solver stopping rule (the common FL-benchmark practice).
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from fedcore.config import tune_range
from fedcore.methods.base import StagedMethod
from fedcore.methods.registry import MethodParams, register


class FedProxParams(MethodParams):
    mu: float = Field(0.01, ge=0.0, description="proximal weight", json_schema_extra=tune_range(1e-3, 1.0, log=True))


def proximal_term(params: list[torch.Tensor], anchors: list[torch.Tensor], mu: float) -> torch.Tensor:
    """mu/2 * sum ||p - a||^2 over matching tensors."""
    diffs = torch._foreach_sub(params, anchors)
    return 0.5 * mu * sum(torch.sum(d * d) for d in diffs)


def stacked_proximal_term(params: list[torch.Tensor], anchors: list[torch.Tensor], mu: float) -> torch.Tensor:
    """`proximal_term` for each row of stacked tensors (K, ...) -> (K,)."""
    return 0.5 * mu * sum(((p - a) * (p - a)).flatten(1).sum(1) for p, a in zip(params, anchors, strict=True))


@register("fedprox", params=FedProxParams)
class FedProx(StagedMethod):
    def before_local(self, task) -> dict[str, Any]:
        names = [n for n, _ in self.model.named_parameters()]
        return {"anchors": [task.params[n].detach() for n in names]}

    def regularizer(self, model, batch, task, extras) -> torch.Tensor:
        if self.params.mu == 0:
            return torch.zeros((), device=batch.x.device)
        return proximal_term(list(model.parameters()), extras["anchors"], self.params.mu)

    def batched_regularizer(self, step) -> torch.Tensor | None:
        if self.params.mu == 0:
            return None
        names = [n for n, _ in self.model.named_parameters()]
        return stacked_proximal_term([step.params[n] for n in names], [step.start[n] for n in names], self.params.mu)

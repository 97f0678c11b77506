"""Symmetric cross-entropy (SCE) in federated training.

Wang, Ma, Chen, Luo, Yi, Bailey. "Symmetric Cross Entropy for Robust Learning with
Noisy Labels." ICCV 2019, arXiv:1908.06112.

Every client trains on alpha * CE + beta * RCE, RCE taking log(0) as -4; aggregation
is FedAvg. Departures: none beyond running it federated (the baseline the FedRG and
FedNoisy tables use).
"""

from __future__ import annotations

from pydantic import Field

from fedcore.errors import ConfigError
from fedcore.methods.base import StagedMethod
from fedcore.methods.registry import MethodParams, register
from fedcore.train import losses


class SCEParams(MethodParams):
    alpha: float = Field(0.1, ge=0.0, description="CE weight")
    beta: float = Field(1.0, ge=0.0, description="reverse-CE weight")


@register("symmetric_ce", params=SCEParams)
class SymmetricCE(StagedMethod):
    def init(self, ctx):
        if ctx.task == "multi":
            raise ConfigError("method 'symmetric_ce' is single-label; use fedavg/fedprox/fedharmony for multi-label")
        return super().init(ctx)

    def loss(self, model, batch, task, extras):
        return losses.sce(model(batch.x), batch.y, alpha=self.params.alpha, beta=self.params.beta)

    def batched_loss(self, step):
        logits, y = step.flat(step.net(step.params, step.batch["x"])), step.flat(step.batch["y"])
        return losses.sce(logits, y, alpha=self.params.alpha, beta=self.params.beta, reduction="none")

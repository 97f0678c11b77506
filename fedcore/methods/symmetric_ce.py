"""Symmetric cross-entropy (SCE) in federated training.

Wang, Ma, Chen, Luo, Yi, Bailey. "Symmetric Cross Entropy for Robust Learning with
Noisy Labels." ICCV 2019, arXiv:1908.06112.

Every client trains on alpha * CE + beta * RCE, RCE taking log(0) as A = `log_zero`;
aggregation is FedAvg (the baseline the FedRG and FedNoisy tables use).

Departures: run federated. A = -4 is the paper's value; the authors' code and much
other code clamp the one-hot at 1e-4 instead, i.e. A = log(1e-4) ~ -9.21, which scales
RCE by 2.3x. The choice matters: on fmnist fedrg_sym_localized (seed 0) the two differ by
31 points (lab/results/baselines.md, "Parity with the reference code").
"""

from __future__ import annotations

from pydantic import Field

from fedcore.config import tune_range
from fedcore.errors import ConfigError
from fedcore.methods.base import StagedMethod
from fedcore.methods.registry import MethodParams, register
from fedcore.train import losses


class SCEParams(MethodParams):
    alpha: float = Field(0.1, ge=0.0, description="CE weight", json_schema_extra=tune_range(0.01, 1.0, log=True))
    beta: float = Field(1.0, ge=0.0, description="reverse-CE weight", json_schema_extra=tune_range(0.1, 2.0, log=True))
    log_zero: float = Field(-4.0, lt=0.0, description="A = log 0 in RCE (paper -4; log(1e-4) = -9.21 in other code)")


@register("symmetric_ce", params=SCEParams)
class SymmetricCE(StagedMethod):
    def init(self, ctx):
        if ctx.task == "multi":
            raise ConfigError("method 'symmetric_ce' is single-label; use fedavg/fedprox/fedharmony for multi-label")
        return super().init(ctx)

    def loss(self, model, batch, task, extras):
        return losses.sce(model(batch.x), batch.y, alpha=self.params.alpha, beta=self.params.beta,
                          log_zero=self.params.log_zero)

    def batched_loss(self, step):
        logits, y = step.flat(step.net(step.params, step.batch["x"])), step.flat(step.batch["y"])
        return losses.sce(logits, y, alpha=self.params.alpha, beta=self.params.beta,
                          log_zero=self.params.log_zero, reduction="none")

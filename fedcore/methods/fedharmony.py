"""FedHarmony: multi-label training aligned to leave-one-out consensus label correlations.

"FedHarmony: Harmonizing Heterogeneous Label Correlations in Federated Multi-Label
Learning." CVPR 2026, arXiv:2604.28024. No public code; this follows the spec
(docs: /work/shared/spec/fedharmony.md, with its v2 notes).

Each round, client k trains with BCE + lam * Psi over the blocks S_g of
R_k - R*_k, R_k being the phi correlation of its sigmoid outputs
(`stats.correlation.phi_correlation`), R*_k its leave-one-out consensus teacher and S_g
spectral blocks of |R*_k|. After training it uploads R_k of its whole local data. The
server forms every client's teacher from the other clients' latest R_j, re-derives the
blocks, and aggregates with CAA weights w_k = alpha(t) nbar_k + (1 - alpha(t)) qbar_k,
q_k = exp(-gamma s_k), s_k the block gap between the uploaded R_k and R*_k,
alpha(t) = max(0, 1 - t / T0).

Switches (the paper's ablation): `consensus` (the ECL alignment term; off = plain BCE
locally), `caa` (off = sample-count weights), `blocks` (off = align the full matrix).

The alignment term (v2; `estimate: batch, scale: sum` is the spec-v1 form, kept for comparison):
- estimate 'whole' (default): R_k in the loss is the phi of the client's *whole local set*:
  every local sample is scored at the round start, and each step refreshes the batch's
  rows with the current, differentiable outputs (`refreshed_phi`); the refreshed rows are
  then written back, so the table follows the model within the epoch. A phi of the 32 batch
  rows alone (estimate 'batch', spec v1) carries sampling variance of the order of the BCE
  (about 0.9 in squared Frobenius over 28 entries), and its squared gap rewards near-constant
  outputs. The whole-set estimate is chosen over an EMA of batch moments because it is
  exactly the statistic the client uploads and is compared on (an EMA still carries a share
  of the batch variance and lags the model); it costs one scoring pass over the local set per
  round. Gradients reach the model through the batch rows, each weighted 1/n; they are scaled
  by n / B so that each step is an unbiased estimate of the whole-set gradient.
- scale 'entry' (default): Psi is the *mean* squared gap over the aligned entries, so lam
  means the same at any label count and block size ('sum': the spec-v1 squared Frobenius).
  CAA's s_k stays the spec's sum over the block entries (gamma is a temperature on it).

Choices (the paper leaves them open; all are params):
- consensus operator A: sample-count weighted mean of the other clients' R_j (`teacher:
  median` for the elementwise median);
- lam = 1.0; gamma = 1.0; G = ceil(C / 4); T0 = T / 2 with T = train.rounds (`t0_fraction`);
- R_k uploaded is computed with the client's *trained* local model f_k on all its data;
- the teacher used in round t was formed at the end of round t-1 (one exchange per round,
  so round 0 trains without alignment); the server forms it from the same uploads it
  weighs with CAA, so s_k is measured against the consensus of round t;
- the diagonal of R is left out of the alignment and of s_k (for soft scores it measures
  confidence, not co-occurrence);
- blocks are recomputed every round per client from |R*_k|, with
  SpectralClustering(affinity="precomputed", random_state=seed).

Departures: a client's latest R_k stays in the server's memory and keeps feeding the
other clients' teachers while that client is not sampled (partial participation); the
paper samples clients in proportion to data size on FLAIR, here the engine's sampler
decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from fedcore.config import tune_range
from fedcore.engine.types import ClientTask, ClientUpdate, RoundMetrics, RoundPlan, ServerState
from fedcore.errors import ConfigError
from fedcore.methods.base import StagedMethod
from fedcore.methods.registry import MethodParams, register
from fedcore.stats.correlation import (
    alignment_gap,
    alpha_schedule,
    block_mask,
    caa_weights,
    default_num_blocks,
    leave_one_out,
    phi_correlation,
    refreshed_phi,
    scale_grad,
    spectral_blocks,
)
from fedcore.train.local import predict_client


class FedHarmonyParams(MethodParams):
    lam: float = Field(1.0, ge=0.0, description="weight of the consensus alignment loss",
                       json_schema_extra=tune_range(0.01, 2.0, log=True))
    gamma: float = Field(1.0, ge=0.0, description="CAA quality temperature: q_k = exp(-gamma s_k)",
                         json_schema_extra=tune_range(0.1, 10.0, log=True))
    num_blocks: int | None = Field(None, ge=1, description="G label blocks; default ceil(C / 4)")
    t0_fraction: float = Field(0.5, gt=0.0, description="T0 = t0_fraction * train.rounds in alpha(t)")
    teacher: Literal["mean", "median"] = Field("mean", description="leave-one-out consensus operator")
    consensus: bool = Field(True, description="ECL: align local correlation with the consensus teacher")
    caa: bool = Field(True, description="correlation-aware aggregation (off: sample-count weights)")
    blocks: bool = Field(True, description="align within spectral blocks (off: the full matrix)")
    eps: float = Field(1e-6, gt=0.0, description="phi correlation denominator guard")
    estimate: Literal["whole", "batch"] = Field(
        "whole", description="R_k in the loss: whole local set refreshed per step, or the mini-batch alone (spec v1)")
    scale: Literal["entry", "sum"] = Field(
        "entry", description="alignment Psi: mean squared gap per aligned entry, or the sum (spec v1)")


@register("fedharmony", params=FedHarmonyParams)
class FedHarmony(StagedMethod):
    def init(self, ctx):
        if ctx.task != "multi":
            raise ConfigError("method 'fedharmony' needs a multi-label dataset (e.g. digits_mosaic, voc2007)")
        return super().init(ctx)

    def init_extra(self) -> dict[str, Any]:
        # stats: cid -> latest uploaded R_k; teachers / blocks: cid -> R*_k and its label blocks.
        return {"stats": {}, "sizes": {}, "teachers": {}, "blocks": {}}

    def plan_round(self, state: ServerState, rnd: int) -> RoundPlan:
        return RoundPlan(stage=state.stage, instructions={"teachers": state.extra["teachers"],
                                                          "blocks": state.extra["blocks"]})

    # -- client -----------------------------------------------------------------------------
    def before_local(self, task: ClientTask) -> dict[str, Any]:
        teacher = task.instructions.get("teachers", {}).get(task.cid)
        if not self.params.consensus or self.params.lam == 0 or teacher is None:
            return {}
        dev = self.ctx.device
        mask = self._mask(task.instructions["blocks"].get(task.cid))
        extras = {"teacher": torch.as_tensor(teacher, dtype=torch.float32, device=dev),
                  "mask": torch.as_tensor(mask, dtype=torch.float32, device=dev)}
        if self.params.estimate == "whole":  # every local sample's scores at the round start
            extras["table"] = torch.sigmoid(predict_client(self.model, task.data)).double()
        return extras

    def loss(self, model, batch, task, extras) -> torch.Tensor:
        logits = model(batch.x)
        out = self.base_loss(logits, batch.y)
        if "teacher" in extras:
            f = torch.sigmoid(logits)
            if "table" in extras:
                table = extras["table"]
                rows = scale_grad(f.double(), table.shape[0] / len(batch.pos))
                r = refreshed_phi(table, batch.pos, rows, eps=self.params.eps)
                table[batch.pos] = f.detach().double()  # the table follows the model step by step
            else:
                r = phi_correlation(f, eps=self.params.eps)
            gap = alignment_gap(r, extras["teacher"], extras["mask"], per_entry=self.params.scale == "entry")
            out = out + self.params.lam * gap
        return out

    def after_local(self, task: ClientTask, extras: dict[str, Any]) -> tuple[dict[str, Any], None]:
        probs = torch.sigmoid(predict_client(self.model, task.data))
        r = phi_correlation(probs.double(), eps=self.params.eps).cpu().numpy()
        if "teacher" in extras:
            gap = alignment_gap(torch.as_tensor(r), extras["teacher"].cpu().double(), extras["mask"].cpu(),
                                per_entry=self.params.scale == "entry")
            extras["metrics"] = {"harmony/client_gap": float(gap)}
        return {"corr": r}, None

    # -- server -----------------------------------------------------------------------------
    def server_update(
        self, state: ServerState, plan: RoundPlan, updates: Sequence[ClientUpdate]
    ) -> tuple[ServerState, RoundMetrics]:
        stats = {**state.extra["stats"], **{u.cid: u.uploads["corr"] for u in updates}}
        sizes = {**state.extra["sizes"], **{u.cid: u.num_examples for u in updates}}
        teachers = leave_one_out(stats, sizes, range(len(self.ctx.clients)), how=self.params.teacher)
        blocks = {k: self._blocks(t) for k, t in teachers.items()}
        gaps = np.array([self._gap(u.uploads["corr"], teachers.get(u.cid), blocks.get(u.cid)) for u in updates])
        n = np.array([u.num_examples for u in updates], dtype=np.float64)
        alpha = alpha_schedule(state.stage_round, self.params.t0_fraction * self.cfg.train.rounds)
        w = caa_weights(n, gaps, alpha, self.params.gamma) if self.params.caa else n / n.sum()
        params = self.aggregate(state, updates, weights=w.tolist())
        extra = {**state.extra, "stats": stats, "sizes": sizes, "teachers": teachers, "blocks": blocks}
        scalars = {"harmony/alpha": alpha if self.params.caa else 1.0, "harmony/gap_mean": float(gaps.mean()),
                   "harmony/weight_max": float(w.max()), "harmony/weight_min": float(w.min())}
        return state.replace(params=params, extra=extra), RoundMetrics(scalars=scalars)

    def _blocks(self, teacher: np.ndarray) -> list[np.ndarray] | None:
        if not self.params.blocks:
            return None
        g = self.params.num_blocks or default_num_blocks(teacher.shape[0])
        return spectral_blocks(teacher, g, seed=self.ctx.seed)

    def _mask(self, blocks: list[np.ndarray] | None) -> np.ndarray:
        return block_mask(blocks, self.ctx.num_classes)

    def _gap(self, r: np.ndarray, teacher: np.ndarray | None, blocks: list[np.ndarray] | None) -> float:
        if teacher is None:
            return 0.0
        mask = torch.as_tensor(self._mask(blocks))
        return float(alignment_gap(torch.as_tensor(r), torch.as_tensor(teacher), mask))

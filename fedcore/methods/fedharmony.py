"""FedHarmony: multi-label training aligned to leave-one-out consensus label correlations.

"FedHarmony: Harmonizing Heterogeneous Label Correlations in Federated Multi-Label
Learning." CVPR 2026, arXiv:2604.28024. No public code; this follows the spec
(docs: /work/shared/spec/fedharmony.md, with its v2 and v3 notes).

Each round, client k trains with BCE + lam * Psi over the blocks S_g of
R_k - R*_k, R_k being the phi correlation of its sigmoid outputs
(`stats.correlation.phi_correlation`), R*_k its leave-one-out consensus teacher and S_g
spectral blocks of |R*_k|. After training it uploads R_k of its whole local data. The
server forms every client's teacher from the other clients' latest R_j, re-derives the
blocks, and aggregates with CAA weights w_k = alpha(t) nbar_k + (1 - alpha(t)) qbar_k,
q_k = exp(-gamma s_k), s_k the block gap between the uploaded R_k and R*_k,
alpha(t) = max(0, 1 - t / T0).

Spec v3's readings are params, v2 the defaults:

    v2 (default)                                 v3 reading
    timing: upload (the trained model's R_k;     timing: start (the global model scores the data
      the teacher arrives a round late)            at the round start; the teacher of this round)
    teacher: mean                                teacher: pooled (phi of pooled moments) | caa
                                                   (the previous CAA weights) | median
    weighting: one, diagonal: false,             weighting: abs (Gamma = |R*|), diagonal: true,
      scale: entry                                 scale: sum
    lam_schedule: constant                       lam_schedule: caa (lam * (1 - alpha(t)))
    gamma_by: value (q_k = exp(-gamma s_k))      gamma_by: median (gamma / median(s_k))
    mask_unannotated: false                      mask_unannotated: true (no BCE on labels a client
                                                   never annotates)

With `timing: start` the round opens with a probe: the global model scores every sampled
client's data, the clients upload R_k (and, for `teacher: pooled`, their marginals and pair moments), and
the server returns this round's teachers and blocks before anyone trains.

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
- timing 'upload' (v2): R_k uploaded is computed with the client's *trained* local model f_k
  on all its data, and the teacher used in round t was formed at the end of round t-1 (one
  exchange per round, so round 0 trains without alignment); the server forms it from the same
  uploads it weighs with CAA, so s_k is measured against the consensus of round t. Timing
  'start' (v3) is the summary's order, at the cost of a second exchange per round;
- the diagonal of R is left out of the alignment and of s_k by default (for soft scores it
  measures confidence, not co-occurrence; `diagonal: true` keeps it);
- blocks are recomputed every round per client from |R*_k|, with
  SpectralClustering(affinity="precomputed", random_state=seed).

Departures: `teacher: pooled` uploads each client's label-score marginals and pair moments,
which the summary does not send (it needs them for the phi of the pooled data); `mask_unannotated`
is common practice under missing labels, not the summary's. A client's latest R_k stays in
the server's memory and keeps feeding the other clients' teachers while that client is not
sampled (partial participation); the paper samples clients in proportion to data size on
FLAIR, here the engine's sampler decides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field

from fedcore.config import tune_range
from fedcore.engine.sampler import ClientSampler
from fedcore.engine.types import ClientTask, ClientUpdate, RoundMetrics, RoundPlan, ServerState
from fedcore.errors import ConfigError
from fedcore.methods.base import StagedMethod
from fedcore.methods.registry import MethodParams, register
from fedcore.stats.correlation import (
    alignment_gap,
    alpha_schedule,
    annotated,
    block_mask,
    block_norm,
    caa_weights,
    consensus,
    default_num_blocks,
    ecl_diagnostics,
    entry_weights,
    masked_bce,
    phi_correlation,
    refreshed_phi,
    relative_gamma,
    scale_grad,
    score_moments,
    spectral_blocks,
)
from fedcore.train.local import predict_client
from fedcore.train.params import load_params_

__all__ = ["FedHarmony", "FedHarmonyInstructions", "FedHarmonyParams", "FedHarmonyUpload"]


class FedHarmonyParams(MethodParams):
    lam: float = Field(1.0, ge=0.0, description="weight of the consensus alignment loss",
                       json_schema_extra=tune_range(0.01, 2.0, log=True))
    gamma: float = Field(1.0, ge=0.0, description="CAA quality temperature: q_k = exp(-gamma s_k) "
                         "(gamma_by: median: the c of gamma = c / median(s_k))",
                         json_schema_extra=tune_range(0.1, 10.0, log=True))
    num_blocks: int | None = Field(None, ge=1, description="G label blocks; default ceil(C / 4)")
    t0_fraction: float = Field(0.5, gt=0.0, description="T0 = t0_fraction * train.rounds in alpha(t)")
    teacher: Literal["mean", "median", "pooled", "caa"] = Field(
        "mean", description="leave-one-out consensus operator: size-weighted mean of R_j, elementwise median, "
        "phi of the pooled moments (uploads each client's marginals and pair moments), or the mean weighted "
        "by the previous round's CAA weights")
    consensus: bool = Field(True, description="ECL: align local correlation with the consensus teacher")
    caa: bool = Field(True, description="correlation-aware aggregation (off: sample-count weights)")
    blocks: bool = Field(True, description="align within spectral blocks (off: the full matrix)")
    eps: float = Field(1e-6, gt=0.0, description="phi correlation denominator guard")
    estimate: Literal["whole", "batch"] = Field(
        "whole", description="R_k in the loss: whole local set refreshed per step, or the mini-batch alone (spec v1)")
    scale: Literal["entry", "sum"] = Field(
        "entry", description="alignment Psi: mean squared gap per aligned entry, or the sum (spec v1, v3)")
    # -- spec v3 readings (defaults: v2) --
    timing: Literal["upload", "start"] = Field(
        "upload", description="upload: R_k of the trained local model, teacher used next round (v2); start: the "
        "global model scores each sampled client at the round start and the teacher is used this round (v3)")
    gap_from: Literal["trained", "start"] = Field(
        "trained", description="R_k behind CAA's s_k: the trained local model's, or the round-start one "
        "(timing: start only)")
    weighting: Literal["one", "abs"] = Field("one", description="Psi's entry weights Gamma: 1 or |R*| (v3)")
    diagonal: bool = Field(False, description="keep the diagonal in Psi and s_k (v3: on)")
    lam_schedule: Literal["constant", "caa"] = Field(
        "constant", description="lam each round, or lam * (1 - alpha(t)) with CAA's alpha(t)")
    gamma_by: Literal["value", "median"] = Field(
        "value", description="CAA temperature: gamma as given, or gamma / median(s_k) of the round (v3)")
    mask_unannotated: bool = Field(
        False, description="leave labels a client never annotates out of its BCE (v3; off: trained as negatives)")
    diagnostics: bool = Field(
        True, description="log ECL's gradient ratio to BCE and its share opposing the labels each round (one "
        "extra backward over the local scores)")

@dataclass
class FedHarmonyUpload:
    """R_k of a client's scores (after training, or of the global model's at a round-start probe)."""

    corr: np.ndarray  # (C, C) phi correlation of the sigmoid scores
    moments: tuple[np.ndarray, np.ndarray] | None = None  # teacher: pooled: marginals (C,), pair moments (C, C)


@dataclass(frozen=True)
class FedHarmonyInstructions:
    """What every client of a round is told."""

    lam: float | None = None  # this round's alignment weight (None: the lam param)
    teachers: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)  # client -> R*_k (C, C)
    blocks: dict[int, Any] = dataclasses.field(default_factory=dict)  # client -> its spectral blocks of |R*_k|
    memory: dict[str, Any] | None = None  # timing: start: the server memory the probe's answers updated


@dataclass
class FedHarmonyVisit:
    """One visit's loss settings (the hooks' extras["visit"]); no alignment when teacher is None."""

    keep: torch.Tensor | None = None  # (C,) bool: the labels the client annotates (mask_unannotated)
    teacher: torch.Tensor | None = None  # (C, C) R*_k
    lam: float = 0.0  # the alignment weight
    mask: torch.Tensor | None = None  # (C, C) Psi's entry weights over the blocks
    table: torch.Tensor | None = None  # (n, C) scores of every local sample (estimate: whole), kept current


@register("fedharmony", params=FedHarmonyParams)
class FedHarmony(StagedMethod):
    def init(self, ctx):
        if ctx.task != "multi":
            raise ConfigError("method 'fedharmony' needs a multi-label dataset (e.g. digits_mosaic, voc2007)")
        if self.params.gap_from == "start" and self.params.timing != "start":
            raise ConfigError("fedharmony: gap_from: start needs timing: start")
        tr = self.cfg.train
        # The engine's own draw (same seed and warm-up), so the probe asks exactly the clients that train.
        self.sampler = ClientSampler(len(ctx.clients), tr.client_fraction, self.cfg.seed, tr.warmup_rounds)
        self._scores: dict[tuple[int, int], torch.Tensor] = {}
        return super().init(ctx)

    def init_extra(self) -> dict[str, Any]:
        # stats: cid -> latest R_k (moments: its (p, joint) for teacher 'pooled'); caa_w: cid -> its
        # last CAA weight in sample units; teachers / blocks: cid -> R*_k and its label blocks.
        return {"stats": {}, "moments": {}, "sizes": {}, "caa_w": {}, "teachers": {}, "blocks": {}}

    def _lam(self, state: ServerState) -> float:
        if self.params.lam_schedule == "caa":
            return self.params.lam * (1.0 - alpha_schedule(state.stage_round, self._t0()))
        return self.params.lam

    def _t0(self) -> float:
        return self.params.t0_fraction * self.cfg.train.rounds

    def plan_round(self, state: ServerState, rnd: int) -> RoundPlan:
        ins = FedHarmonyInstructions(lam=self._lam(state))
        if self.params.timing == "start":
            self._scores.clear()  # a probe's scores serve its own round only
            cohort = self.sampler.sample(rnd)
            return RoundPlan(stage=state.stage, cohort=cohort, probe=cohort, instructions=ins)
        return RoundPlan(stage=state.stage, instructions=dataclasses.replace(
            ins, teachers=state.extra["teachers"], blocks=state.extra["blocks"]))

    # -- round-start probe (timing: start) ----------------------------------------------------
    def client_probe(self, task: ClientTask) -> ClientUpdate:
        """The global model's scores of the client's data -> R_k (and moments for 'pooled')."""
        load_params_(self.model, task.params)
        logits = predict_client(self.model, task.data)
        # Kept for before_local of this same round: the model it loads is the same global one.
        self._scores[(task.cid, task.rnd)] = logits
        probs = torch.sigmoid(logits).double()
        ups = FedHarmonyUpload(corr=phi_correlation(probs, eps=self.params.eps).cpu().numpy())
        if self.params.teacher == "pooled":
            ups.moments = score_moments(probs.cpu().numpy())
        return ClientUpdate(cid=task.cid, num_examples=task.data.n, uploads=ups)

    def after_probe(self, state: ServerState, plan: RoundPlan, answers: Sequence[ClientUpdate]) -> RoundPlan:
        extra = self._remember(state.extra, answers)
        teachers = self._teachers(extra, [a.cid for a in answers])
        blocks = {k: self._blocks(t) for k, t in teachers.items()}
        ins = dataclasses.replace(plan.instructions, teachers=teachers, blocks=blocks, memory=extra)
        return dataclasses.replace(plan, instructions=ins)

    def _remember(self, extra, ups: Sequence[ClientUpdate]) -> dict[str, Any]:
        out = {**extra, "stats": {**extra["stats"], **{u.cid: u.uploads.corr for u in ups}},
               "sizes": {**extra["sizes"], **{u.cid: u.num_examples for u in ups}}}
        if self.params.teacher == "pooled":
            out["moments"] = {**extra["moments"], **{u.cid: u.uploads.moments for u in ups}}
        return out

    def _teachers(self, extra, clients) -> dict[int, np.ndarray]:
        return consensus(extra["stats"], extra["sizes"], clients, self.params.teacher, moments=extra["moments"],
                         weights=extra["caa_w"], eps=self.params.eps)

    # -- client -----------------------------------------------------------------------------
    def before_local(self, task: ClientTask) -> dict[str, Any]:
        p, dev = self.params, self.ctx.device
        v = FedHarmonyVisit(keep=annotated(task.data.labels) if p.mask_unannotated else None)
        extras: dict[str, Any] = {"visit": v}
        ins = task.instructions
        teacher = ins.teachers.get(task.cid)
        lam = float(p.lam if ins.lam is None else ins.lam)
        if not p.consensus or lam == 0 or teacher is None:
            return extras
        weights = self._weights(teacher, ins.blocks.get(task.cid))
        v.teacher, v.lam = torch.as_tensor(teacher, dtype=torch.float32, device=dev), lam
        v.mask = torch.as_tensor(weights, dtype=torch.float32, device=dev)
        if p.estimate == "whole" or p.diagnostics:  # every local sample's scores at the round start
            logits = self._scores.pop((task.cid, task.rnd), None)
            logits = predict_client(self.model, task.data) if logits is None else logits
            if p.estimate == "whole":
                v.table = torch.sigmoid(logits).double()
            if p.diagnostics:
                d = ecl_diagnostics(logits, task.data.labels, v.teacher, v.mask, lam,
                                    keep=v.keep, per_entry=p.scale == "entry", eps=p.eps)
                extras["metrics"] = {"harmony/grad_ratio": d["grad_ratio"], "harmony/ecl_opposing": d["opposing"]}
        return extras

    def loss(self, model, batch, task, extras) -> torch.Tensor:
        logits = model(batch.x)
        v = extras["visit"]
        if v.keep is not None:
            out = masked_bce(logits, batch.y, v.keep)
        else:
            out = self.base_loss(logits, batch.y)
        if v.teacher is not None:
            f = torch.sigmoid(logits)
            if v.table is not None:
                table = v.table
                rows = scale_grad(f.double(), table.shape[0] / len(batch.pos))
                r = refreshed_phi(table, batch.pos, rows, eps=self.params.eps)
                table[batch.pos] = f.detach().double()  # the table follows the model step by step
            else:
                r = phi_correlation(f, eps=self.params.eps)
            gap = alignment_gap(r, v.teacher, v.mask, per_entry=self.params.scale == "entry")
            out = out + v.lam * gap
        return out

    def after_local(self, task: ClientTask, extras: dict[str, Any]) -> tuple[FedHarmonyUpload, None]:
        probs = torch.sigmoid(predict_client(self.model, task.data))
        r = phi_correlation(probs.double(), eps=self.params.eps).cpu().numpy()
        ups = FedHarmonyUpload(corr=r)
        if self.params.teacher == "pooled" and self.params.timing == "upload":
            ups.moments = score_moments(probs.double().cpu().numpy())
        v = extras["visit"]
        if v.teacher is not None:
            gap = alignment_gap(torch.as_tensor(r), v.teacher.cpu().double(), v.mask.cpu(),
                                per_entry=self.params.scale == "entry")
            extras.setdefault("metrics", {})["harmony/client_gap"] = float(gap)
        return ups, None

    # -- server -----------------------------------------------------------------------------
    def server_update(
        self, state: ServerState, plan: RoundPlan, updates: Sequence[ClientUpdate]
    ) -> tuple[ServerState, RoundMetrics]:
        p = self.params
        if p.timing == "start":  # this round's teachers came from the probe; its uploads are the memory
            extra = plan.instructions.memory
            teachers, blocks = plan.instructions.teachers, plan.instructions.blocks
            start = extra["stats"]
            rs = [start[u.cid] if p.gap_from == "start" else u.uploads.corr for u in updates]
            gaps = np.array([self._gap(r, teachers.get(u.cid), blocks.get(u.cid)) for r, u in zip(rs, updates,
                                                                                                   strict=True)])
        else:
            extra = self._remember(state.extra, updates)
            teachers = self._teachers(extra, range(len(self.ctx.clients)))
            blocks = {k: self._blocks(t) for k, t in teachers.items()}
            gaps = np.array([self._gap(u.uploads.corr, teachers.get(u.cid), blocks.get(u.cid)) for u in updates])
        n = np.array([u.num_examples for u in updates], dtype=np.float64)
        alpha = alpha_schedule(state.stage_round, self._t0())
        gamma = relative_gamma(gaps, p.gamma) if p.gamma_by == "median" else p.gamma
        w = caa_weights(n, gaps, alpha, gamma) if p.caa else n / n.sum()
        params = self.aggregate(state, updates, weights=w.tolist())
        caa_w = {**extra["caa_w"], **{u.cid: float(wk * n.sum()) for u, wk in zip(updates, w, strict=True)}}
        c = self.ctx.num_classes
        norms = [block_norm(teachers[u.cid], block_mask(blocks.get(u.cid), c)) for u in updates if u.cid in teachers]
        extra = {**extra, "caa_w": caa_w, "teachers": teachers, "blocks": blocks}
        # CAA's weights each round: their spread and effective number (1 / sum w^2) as a share of K.
        scalars = {"harmony/alpha": alpha if p.caa else 1.0, "harmony/gap_mean": float(gaps.mean()),
                   "harmony/gamma": float(gamma), "harmony/weight_max": float(w.max()),
                   "harmony/weight_min": float(w.min()), "harmony/weight_eff": float(1.0 / np.sum(w * w) / len(w)),
                   "harmony/lam": float(p.lam if plan.instructions.lam is None else plan.instructions.lam)}
        if norms:
            scalars["harmony/consensus_block_norm"] = float(np.mean(norms))
        return state.replace(params=params, extra=extra), RoundMetrics(scalars=scalars)

    def _blocks(self, teacher: np.ndarray) -> list[np.ndarray] | None:
        if not self.params.blocks:
            return None
        g = self.params.num_blocks or default_num_blocks(teacher.shape[0])
        return spectral_blocks(teacher, g, seed=self.ctx.seed)

    def _weights(self, teacher: np.ndarray, blocks: list[np.ndarray] | None) -> np.ndarray:
        mask = block_mask(blocks, self.ctx.num_classes, diagonal=self.params.diagonal)
        return entry_weights(teacher, mask, self.params.weighting)

    def _gap(self, r: np.ndarray, teacher: np.ndarray | None, blocks: list[np.ndarray] | None) -> float:
        if teacher is None:
            return 0.0
        mask = torch.as_tensor(self._weights(teacher, blocks))
        return float(alignment_gap(torch.as_tensor(r), torch.as_tensor(teacher), mask))

"""FedRG: representation geometry for federated learning with noisy clients.

"FedRG: Unleashing the Representation Geometry for Federated Learning with Noisy
Clients", CVPR 2026 (no arXiv id known to us; code github Tianjoker/FedRG). Spec:
shared/spec/fedrg.md.

Stages: `pretrain`, federated SimCLR (two batched augmented views, projector MLP,
symmetric NT-Xent; labels are never read; encoder + projector aggregated), then `train`.
Each train round, every client embeds its whole local set with the received model, fits
its vMF mixture with a uniform background (`stats.vmf`), tempers the responsibilities by
two-view agreement, scores each sample against the class-geometry matrix B, and splits
1 - score with a 2-component GMM into clean and noisy. Local loss:
lambda_s * SCE(all, or the kept ones) + lambda_n * forward-corrected NLL through the client's personal
absorption matrix T on the noisy ones. T is a parameter of the model wrapper under
`absorption.`, declared personal so the engine keeps it per client and never averages it.

Departures from the paper / public code:
- detection runs once per round on the whole local set with the model received from the
  server (the public code refits the GMM on every batch);
- the vMF log-normalizer is included (the public code drops it; `normalizer: false`
  restores that form), and the responsibilities have no extra softmax temperature (the
  public code divides the logits by 2; `resp_temperature: 2` restores it);
- SCE's RCE takes log 0 = A = -4, the SCE paper's value (the public code clamps the one-hot
  at 1e-4, A = -9.21; `sce_log_zero` sets it);
- the mixture is refit by `em_iters` warm-started EM steps per round with untempered
  responsibilities (the public code EMAs per batch with tempered ones; `mix_momentum`
  < 1 gives an EMA);
- round budgets, client sampling and the SCE class count come from the config (the public
  code hard-codes 1 + 1 rounds, 2 of 10 clients and 10 classes).
Params beyond the spec, off by default (spec behaviour), reported as ablations in
lab/results/notes/fedrg.md: `t_lr_scale` (T's rate relative to the network's; at the network's
rate T collapses within a round to near-identical rows, mean diag ~0.2-0.3) and `b_fallback`
(a label none of whose samples was judged clean feeds B from all its samples, instead of
decaying to a uniform row).
The spec's v2 variants (defaults: the paper's reading):
- `score: posterior` scores <gamma~, P(y | component)>: B's smoothed soft counts normalized per
  component, not per label (`stats.vmf.posterior_score`; EMA'd like B but started at the first
  round's counts). Where a (client, label) group is mostly noise B[y] learns the noise and the
  paper score calls it clean; a class's own label still dominates its components while less
  than half of the class is flipped. (`code`: the public code's ratio, equal to `paper` here.)
- `sce_on: clean` puts only the samples the split kept in the lambda_s term (the paper's
  overview; `all` is its formula and the public code), so flagged samples learn through T alone.
- `t_init: estimate` sets T once per client, on its first visit after the stage's first train
  round (a trained head), to T[k, j] = (sum_{flagged i, y_i = j} softmax(f(x_i))[k]
  + t_prior [j == k]) / row sum (`stats.transition`); SGD trains it on from there. At the
  identity, an accurate detector makes L_n plain CE on the noise. No effect with `absorption: off`.
The upper kappa clamp is a param too (`kappa_max`, spec 100): on 128-d digits features every
component sits at it, and raising it made detection worse (lab/results/notes/fedrg.md).
Choices: z for the mixture is the un-augmented input's normalized encoder output; the two
views for tempering are SimCLR views; B is refreshed *before* scoring from the samples the
previous round judged clean (all samples on a client's first train round), so the first
score is not taken against a uniform B; `absorption: off` keeps T fixed at the identity
(the noisy term becomes plain CE), `global` averages T like any other weight; the
pretrain budget defaults to train.rounds * 150/350 (the paper's ratio). The `code` score
equals the `paper` score whenever responsibilities sum to 1 (see `stats.vmf.clean_score`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from fedcore.config import tune_range
from fedcore.engine.types import Estimates, RoundMetrics, RoundPlan, Stage
from fedcore.errors import ConfigError
from fedcore.methods.base import StagedMethod
from fedcore.methods.registry import MethodParams, register
from fedcore.models.base import seeded_init
from fedcore.stats import transition, vmf
from fedcore.train import losses
from fedcore.train.local import make_optimizer

PRETRAIN_SHARE = 150 / 350  # the paper's pretrain : train round ratio


class FedRGParams(MethodParams):
    ssl_pretrain: bool = Field(True, description="run the federated SimCLR stage first")
    absorption: Literal["on", "off", "global"] = Field(
        "on", description="the noise absorption matrix T: on = personal T per client, off = none (T = I), "
        "global = T averaged like any weight")
    loss: Literal["sce", "ce"] = Field("sce", description="the lambda_s loss: symmetric CE or plain CE")
    score: Literal["paper", "code", "posterior"] = Field(
        "paper", description="clean score: paper <gamma, B[y]> | code (public code's ratio) | posterior "
        "<gamma, P(y | component)>, robust where noise is the majority of a (client, label) group")
    sce_on: Literal["all", "clean"] = Field(
        "all", description="samples the lambda_s term sees: all (the paper's formula) | clean (its overview)")
    t_init: Literal["identity", "estimate"] = Field(
        "identity", description="T's start: identity (paper) | estimate from the flagged samples' predictions")
    t_prior: float = Field(1.0, gt=0.0, description="t_init=estimate: pseudo-samples per class on T's diagonal")
    ssl_temperature: float = Field(0.07, gt=0.0, description="NT-Xent temperature (paper 0.07)")
    proj_dim: int = Field(128, ge=1, description="projector output size")
    components: int | None = Field(None, ge=1, description="vMF components G; default: number of classes")
    normalizer: bool = Field(True, description="include log C_d(kappa) in the responsibilities")
    resp_temperature: float = Field(1.0, gt=0.0, description="divides the log joint of the scoring "
                                    "responsibilities (1 = posterior; the authors' code 2)")
    lambda_s: float = Field(0.4, ge=0.0, description="weight of the SCE term (sce_on: on which samples)",
                            json_schema_extra=tune_range(0.1, 1.0))
    lambda_n: float = Field(1.0, ge=0.0, description="weight of the NLL through T on the flagged (noisy) samples",
                            json_schema_extra=tune_range(0.25, 2.0, log=True))
    sce_alpha: float = Field(0.1, ge=0.0, description="SCE's weight alpha on cross-entropy")
    sce_beta: float = Field(1.0, ge=0.0, description="SCE's weight beta on reverse cross-entropy")
    sce_log_zero: float = Field(-4.0, lt=0.0, description="SCE's A = log 0 in RCE (SCE paper -4; the FedRG "
                                "authors' code clamps the one-hot at 1e-4: log(1e-4) = -9.21)")
    eta: float = Field(0.5, gt=0.0, description="Dirichlet smoothing of B")
    b_fallback: bool = Field(False, description="a label with no clean sample feeds B from all its samples")
    b_momentum: float = Field(0.1, gt=0.0, le=1.0, description="weight of the new B in its EMA")
    median_momentum: float = Field(0.9, ge=0.0, lt=1.0, description="EMA of the median view concentration")
    em_iters: int = Field(3, ge=1, description="EM steps per round")
    mix_momentum: float = Field(1.0, gt=0.0, le=1.0, description="1 = M-step replaces; < 1 = EMA")
    kappa0: float = Field(5.0, gt=0.0, description="starting concentration kappa of every vMF component")
    kappa_max: float = Field(100.0, gt=0.5, description="upper clamp of the Banerjee kappa (spec: 100)")
    pi0: float = Field(0.05, gt=0.0, lt=1.0, description="starting weight of the mixture's uniform background")
    prior: float = Field(5.0, ge=0.0, description="Dirichlet pseudo-counts on the mixing weights")
    t_floor: float = Field(1e-6, gt=0.0, lt=1.0, description="least entry of T, kept after every step before "
                           "its rows are renormalized (row-stochastic)")
    t_lr_scale: float = Field(1.0, gt=0.0, description="T's learning rate relative to the network's")


@dataclass
class FedRGState:
    """One client's detector state across its train visits (names as in the spec)."""

    mix: vmf.VMFMixture | None = None  # the vMF mixture over its embeddings
    median: float | None = None  # EMA of the median view concentration
    B: np.ndarray | None = None  # (C, G) label -> component templates (the spec's name)
    counts: np.ndarray | None = None  # (C, G) soft counts behind the posterior score
    clean: np.ndarray | None = None  # (n,) bool: last round's geometry split
    t_init: int | None = None  # the round T was estimated in (t_init: estimate), once


@dataclass
class Detection:
    """One train visit's detection pass (`FedRG.detect`): what the local loss and the upload read."""

    noisy: torch.Tensor  # (n,) bool on the device: the geometry split, the training mask
    small_loss: np.ndarray | None = None  # (n,) bool: the small-loss split beside it
    metrics: dict[str, float] = field(default_factory=dict)
    state: FedRGState = field(default_factory=FedRGState)  # the client's detector state after the pass


@dataclass(frozen=True)
class FedRGInstructions:
    """What every client of a round is told."""

    train_round: int = 0  # train rounds the received head has had (0 in pretraining)


@dataclass
class FedRGUpload:
    """A train visit's flags and T's diagonal, for the server's estimates."""

    noisy: np.ndarray  # (n,) bool: the geometry detector's flags (the training mask)
    small_loss: np.ndarray  # (n,) bool: the small-loss detector's, beside it
    t_diag: float  # mean diagonal of the client's T after training


class Absorption(nn.Module):
    """Noise absorption matrix T (C, C): p_noisy = softmax(logits) @ T."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.T = nn.Parameter(torch.eye(num_classes))

    @torch.no_grad()
    def project_(self, floor: float) -> None:
        """Back onto row-stochastic matrices after an unconstrained step."""
        self.T.clamp_(min=floor)
        self.T.div_(self.T.sum(1, keepdim=True))


class FedRGNet(nn.Module):
    """Backbone model + SimCLR projector + absorption T; forward/features are the backbone's."""

    def __init__(self, net: nn.Module, proj_dim: int, num_classes: int, seed: int) -> None:
        super().__init__()
        d = net.feature_dim
        self.net, self.feature_dim = net, d
        with seeded_init(seed):
            self.projector = nn.Sequential(nn.Linear(d, d), nn.ReLU(inplace=True), nn.Linear(d, proj_dim))
        self.absorption = Absorption(num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.net.features(x)

    def head(self, z: torch.Tensor) -> torch.Tensor:
        return self.net.head(z)


@register("fedrg", params=FedRGParams)
class FedRG(StagedMethod):
    client_state_type = FedRGState

    def __init__(self, cfg, params: FedRGParams) -> None:
        super().__init__(cfg, params)
        # `global` is the ablation that shows why T must stay on the client.
        self.personal_keys = ("absorption.",) if params.absorption == "on" else ()

    @property
    def stages(self) -> tuple[Stage, ...]:
        train = Stage("train", self.stage_rounds("train", self.cfg.train.rounds))
        if not self.params.ssl_pretrain:
            return (train,)
        default = max(1, round(self.cfg.train.rounds * PRETRAIN_SHARE))
        return (Stage("pretrain", self.stage_rounds("pretrain", default), evaluate=False), train)

    def init(self, ctx):
        if ctx.task == "multi":
            raise ConfigError("method 'fedrg' is single-label; use fedavg/fedprox/fedharmony for multi-label")
        return super().init(ctx)

    def build_model(self) -> nn.Module:
        return FedRGNet(super().build_model(), self.params.proj_dim, self.ctx.num_classes, self.ctx.seed + 7919)

    def plan_round(self, state, rnd):
        # Clients learn how many train rounds the received head has had (for t_init=estimate).
        ins = FedRGInstructions(train_round=state.stage_round if state.stage == "train" else 0)
        return RoundPlan(stage=state.stage, instructions=ins)

    # -- local training -----------------------------------------------------------------
    def targets(self, task) -> torch.Tensor:
        if task.stage == "pretrain":
            # A placeholder the loop can index; the SimCLR loss never reads it, and the real
            # labels are never touched in this stage.
            return torch.zeros(task.data.n, dtype=torch.long, device=task.data.indices.device)
        return task.data.labels

    def make_x(self, task):
        if task.stage == "pretrain":
            return task.data.x01  # raw [0, 1] images: the loss draws the two views itself
        return super().make_x(task)

    def before_local(self, task) -> dict[str, Any]:
        if task.stage == "pretrain":
            return {}
        det = self.detect(task)
        return {"detection": det, "metrics": det.metrics}

    # -- detection (each train round, on the whole local set, with the received model) ---------
    @torch.no_grad()
    def embed(self, task) -> tuple[np.ndarray, np.ndarray, np.ndarray, torch.Tensor]:
        """Unit embeddings of every local sample and of two SimCLR views, plus logits.

        Returns z, z1, z2 (n, d) float64 arrays and logits (n, C) on the device.
        """
        model, data, aug = self.model.eval(), task.data, self.augmenter()
        zs, logits = [], []
        for pos in data.eval_batches():
            x01 = data.x01(pos)
            v1, v2 = aug.simclr_views(x01, task.gen)
            h = model.features(self.ctx.store.normalize(torch.cat([x01, v1, v2])))
            b = len(pos)
            logits.append(model.head(h[:b]))
            zs.append(F.normalize(h, dim=1).double().cpu().numpy().reshape(3, b, -1))
        z = np.concatenate(zs, axis=1)
        return z[0], z[1], z[2], torch.cat(logits)


    def detect(self, task) -> Detection:
        """One client's detection pass: vMF geometry detector (-> training mask) and small-loss detector."""
        p, y_t = self.params, task.data.labels
        y, c = y_t.cpu().numpy(), self.ctx.num_classes
        z, z1, z2, logits = self.embed(task)
        st, g = self.client_state(task), p.components or c
        mix = st.mix if st.mix is not None else vmf.init_mixture(z, g, task.rng, p.kappa0, p.pi0)
        mix = vmf.fit(z, mix, p.em_iters, p.mix_momentum, p.normalizer, prior=p.prior, kappa_clamp=(0.5, p.kappa_max))
        kappa_aug = vmf.aug_concentration(z1, z2)
        median = vmf.ema_median(st.median, kappa_aug, p.median_momentum)
        resp = vmf.responsibilities(z, mix, vmf.temper_factor(kappa_aug, median), p.normalizer, p.resp_temperature)
        weight = st.clean if st.clean is not None else np.ones(len(y), bool)
        weight = vmf.label_fallback(y, weight) if p.b_fallback else weight
        counts_new = vmf.class_counts(resp[:, 1:], y, weight, c, p.eta)
        b_old = st.B if st.B is not None else np.full((c, g), 1.0 / g)
        b = vmf.ema_rows(b_old, counts_new / counts_new.sum(1, keepdims=True), p.b_momentum)
        # The posterior's counts start at the first observation, not at a uniform B: a uniform start
        # would make P(label | component) the label frequencies for the first rounds.
        counts = counts_new if st.counts is None else (1 - p.b_momentum) * st.counts + p.b_momentum * counts_new
        if p.score == "posterior":
            score = vmf.posterior_score(resp, counts, y)
        else:
            score = vmf.clean_score(resp, b, y, p.score)
        seeds = task.rng.integers(2**31, size=2)
        noisy = vmf.split_noisy(1.0 - score, int(seeds[0]))
        ce = F.cross_entropy(logits, y_t, reduction="none").cpu().numpy()
        small_loss = vmf.split_noisy(ce, int(seeds[1]))
        metrics = {"detect/flagged": float(noisy.mean()), "detect/small_loss/flagged": float(small_loss.mean()),
                   "vmf/pi0": mix.pi0, "vmf/kappa_mean": float(mix.kappa.mean()),
                   "vmf/bg_resp": float(resp[:, 0].mean())}
        state = FedRGState(mix=mix, median=median, B=b, counts=counts, clean=~noisy, t_init=st.t_init)
        mask = torch.as_tensor(noisy, device=y_t.device)
        if st.t_init is None and self.wants_t_estimate(task):
            self.set_t_estimate(logits[mask], y_t[mask])
            state.t_init = task.rnd
        return Detection(noisy=mask, small_loss=small_loss, metrics=metrics, state=state)


    def wants_t_estimate(self, task) -> bool:
        """t_init=estimate sets T once per client, on its first visit whose received head has been
        trained (a train round after the stage's first): before that the predictions are a random head's."""
        p = self.params
        return p.t_init == "estimate" and p.absorption != "off" and task.instructions.train_round >= 1


    @torch.no_grad()
    def set_t_estimate(self, logits: torch.Tensor, labels: torch.Tensor) -> None:
        """T <- the soft confusion of the flagged samples' predictions (n, C) against their labels (n,)."""
        probs = F.softmax(logits.double(), dim=1).cpu().numpy()
        t = transition.estimate_transition(probs, labels.cpu().numpy(), self.ctx.num_classes, self.params.t_prior)
        T = self.model.absorption.T
        T.copy_(torch.as_tensor(t, dtype=T.dtype))

    def loss(self, model, batch, task, extras) -> torch.Tensor:
        if task.stage == "pretrain":
            return self.simclr_loss(model, batch.x, task.gen)
        p = self.params
        logits = model(batch.x)
        noisy = extras["detection"].noisy[batch.pos]
        main = self.main_loss(logits, batch.y, ~noisy if p.sce_on == "clean" else None)
        if not bool(noisy.any()) or p.lambda_n == 0:
            return p.lambda_s * main
        t = model.absorption.T if p.absorption != "off" else torch.eye(logits.shape[1], device=logits.device)
        return p.lambda_s * main + p.lambda_n * losses.forward_corrected_nll(logits[noisy], batch.y[noisy], t)

    def main_loss(self, logits: torch.Tensor, y: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        """SCE (or CE) averaged over the batch, or over its `keep` samples (0 when there are none)."""
        if keep is not None:
            if not bool(keep.any()):
                return logits.sum() * 0.0
            logits, y = logits[keep], y[keep]
        p = self.params
        if p.loss == "ce":
            return losses.ce(logits, y)
        return losses.sce(logits, y, alpha=p.sce_alpha, beta=p.sce_beta, log_zero=p.sce_log_zero)

    def simclr_loss(self, model: FedRGNet, x01: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """Symmetric NT-Xent of the projections of two SimCLR views of x01 (B, C, H, W)."""
        v1, v2 = self.augmenter().simclr_views(x01, gen)
        proj = model.projector(model.features(self.ctx.store.normalize(torch.cat([v1, v2]))))
        b = x01.shape[0]
        return losses.nt_xent(proj[:b], proj[b:], temperature=self.params.ssl_temperature)

    def local_optimizer(self, task) -> torch.optim.Optimizer:
        spec = self.optim_spec(task)
        m = self.model
        if task.stage == "pretrain":
            return make_optimizer(list(m.net.parameters()) + list(m.projector.parameters()), spec)
        groups = [{"params": list(m.net.parameters())}]
        if self.params.absorption != "off":
            # No decay: it would pull T towards 0 against the row-sum constraint.
            groups.append({"params": [m.absorption.T], "weight_decay": 0.0, "lr": spec.lr * self.params.t_lr_scale})
        return make_optimizer(groups, spec)

    def after_step(self, task, extras):
        if task.stage == "pretrain" or self.params.absorption == "off":
            return None
        floor = self.params.t_floor
        return lambda model: model.absorption.project_(floor)

    def after_local(self, task, extras):
        if task.stage == "pretrain":
            return {}, None
        diag = float(torch.diagonal(self.model.absorption.T.detach()).mean())
        det = extras["detection"]
        return FedRGUpload(noisy=det.noisy.cpu().numpy(), small_loss=det.small_loss, t_diag=diag), det.state

    # -- server ----------------------------------------------------------------------------
    def summarize(self, state, plan, updates, params):
        ups = {u.cid: u.uploads for u in updates if isinstance(u.uploads, FedRGUpload)}
        if not ups:
            return dict(state.extra), RoundMetrics()
        est = Estimates(sample_noisy={
            "main": {c: u.noisy for c, u in ups.items()},
            "small_loss": {c: u.small_loss for c, u in ups.items()},
        })
        scalars = {"absorption/diag_mean": float(np.mean([u.t_diag for u in ups.values()]))}
        return dict(state.extra), RoundMetrics(scalars=scalars, estimates=est)

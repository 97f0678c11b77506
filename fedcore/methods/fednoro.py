"""FedNoRo, and the noise-aware optimization that FedSIR shares with it.

Wu, Chen, Liu, Wang, Li, Wu, Chen. "FedNoRo: Towards Noise-Robust Federated Learning by
Addressing Class Imbalance and Label Noise Heterogeneity." IJCAI 2023, arXiv:2305.05230.

Stages: `warmup` (every client trains with logit-adjusted CE, FedAvg), `identify` and
`train`. In the one `identify` round every client first reports the per-class mean loss
of the warmed-up global model on its data; the server splits clients with a 2-component
GMM on these vectors (clean = lower summed mean). From that round on, clean clients train
with LA, noisy clients with LA-KD (teacher: the global model they start from) under a
sigmoid ramp, and the server aggregates with DaAgg (`fedcore.stats.daagg`); `train`
continues that schedule. (The identify round is the paper's first stage-2 round, split off
so that a pipeline runs identification as its own task.)

`NoiseAwareMethod` holds that second part (LA / LA-KD / DaAgg) once; FedSIR inherits it.

Departures and choices (checked against FedNoRo's code, `wnn2000/FedNoRo`; the parity
record is in lab/results/baselines.md). Followed by default, older choices kept as params:
- Detection: per-class losses min-max scaled per class, a class a client lacks taking the
  lowest loss of that class, and the majority vote (most frequent noisy set) over
  `detect_votes` GMM fits with seeds seed..seed+votes-1 (the code: seeds 0..8 whatever the
  run's seed). `detect_scaling=zscore, detect_votes=1, gmm_n_init=9` is the older fit.
  A class with one loss on every client scales to 0 (the code divides 0 by 0 there).
- LA-KD softens only the teacher by T, as the code does (`kd_soften_student=True`: both).
- A class the client lacks has log prior -inf, as in the code (`absent_prior=one`: it
  counts as one sample); the KL term then gives that class log q = 0, as the code does.
- DaAgg's distance is the sum of per-tensor L2 norms, as in the code (`daagg_distance=
  flat`: one L2 norm over all parameters).
- Warm-up and identify rounds count inside `train.rounds` (the train stage gets the rest),
  as in the code's `rounds`/`s1`; the KD ramp counts rounds from the identify round on
  (code: begin = s1).
- The class prior pi_k comes from the labels the client trains on, as in the code.
- The optimizer is the experiment's `train.*` for every method in a comparison (the
  code: Adam, lr 3e-4, weight decay 5e-4).
- FedSIR, which shares the LA / LA-KD / DaAgg part, keeps the older choices by default.
- Detection needs every client once: it is a probe (no training) at the identify round.
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
from fedcore.engine.types import ClientTask, ClientUpdate, RoundMetrics, RoundPlan, ServerState, Stage
from fedcore.errors import ConfigError
from fedcore.methods.base import StagedMethod
from fedcore.methods.registry import MethodParams, register
from fedcore.stats.daagg import daagg_weights, nearest_clean_distances
from fedcore.stats.gmm import clean_posterior, minmax, zscore
from fedcore.train import losses
from fedcore.train.local import predict_client
from fedcore.train.params import flat_distance, load_params_, per_tensor_distance


class NoiseAwareParams(MethodParams):
    la: bool = Field(True, description="logit-adjusted CE (False: plain CE, i.e. tau = 0)")
    tau_la: float = Field(1.0, ge=0.0, description="logit adjustment strength")
    kd: bool = Field(True, description="noisy clients distil from the global model")
    kd_a: float = Field(0.8, ge=0.0, le=1.0, description="final KD weight a")
    kd_begin: int = Field(0, ge=0, description="train-stage round where the ramp starts")
    kd_end: int = Field(39, ge=0, description="train-stage round where the ramp reaches a")
    kd_T: float = Field(0.8, gt=0.0, description="distillation temperature")
    kd_soften_student: bool = Field(True, description="divide the student's logits by kd_T too")
    absent_prior: Literal["one", "neg_inf"] = Field("one", description="log prior of a class the client lacks")
    daagg: bool = Field(True, description="distance-aware aggregation (False: FedAvg weights)")
    daagg_distance: Literal["flat", "per_tensor"] = Field("flat", description="model distance for DaAgg")


def noise_aware_loss(
    logits: torch.Tensor, y: torch.Tensor, log_prior: torch.Tensor, tau: float,
    teacher_logits: torch.Tensor | None = None, w_kd: float = 0.0, T: float = 0.8,
    kd_mask: torch.Tensor | None = None, soften_student: bool = True,
) -> torch.Tensor:
    """Batch loss: LA-CE, or LA-KD when a teacher is given (on kd_mask samples only, if given).

    With a mask, KD samples get LA-KD and the rest LA-CE, so the batch mean weights the two
    by the fraction of KD samples. logits/teacher (B, C), y (B,), log_prior (C,), kd_mask (B,).
    """
    if teacher_logits is None or w_kd <= 0.0:
        return losses.la_ce(logits, y, log_prior, tau)
    return kd_per_sample(logits, y, log_prior, tau, teacher_logits, w_kd, T, kd_mask, soften_student).mean()


def kd_per_sample(
    logits: torch.Tensor, y: torch.Tensor, log_prior: torch.Tensor, tau: float, teacher_logits: torch.Tensor,
    w_kd: float | torch.Tensor, T: float, kd_mask: torch.Tensor | None = None, soften_student: bool = True,
) -> torch.Tensor:
    """Per-sample LA-KD (LA-CE outside kd_mask): the terms `noise_aware_loss` averages. -> (B,)"""
    kd = losses.la_kd(logits, teacher_logits, y, log_prior, w_kd, T=T, tau=tau, reduction="none",
                      soften_student=soften_student)
    if kd_mask is None:
        return kd
    return torch.where(kd_mask, kd, losses.la_ce(logits, y, log_prior, tau, reduction="none"))


@dataclass
class NoiseAwareState:
    """A client's relabeling (FedSIR's relabel events write it; FedNoRo keeps the defaults)."""

    labels: torch.Tensor | None = None  # (n,) working labels; None: the given ones
    kd_mask: torch.Tensor | None = None  # (n,) bool: samples KD acts on; None: all of them


@dataclass(frozen=True)
class NoiseAwareInstructions:
    """What every client of a round is told."""

    noisy: frozenset[int] | None = None  # the clients judged noisy; None outside the noise-aware stages
    w_kd: float = 0.0  # this round's KD weight for noisy clients


@dataclass(frozen=True)
class FedNoRoInstructions(NoiseAwareInstructions):
    verdict: dict[int, bool] | None = None  # the verdicts this round's probe made (identify)


@dataclass
class NoiseAwareVisit:
    """One visit's loss settings (the hooks' extras["visit"])."""

    log_prior: torch.Tensor  # (C,) log class prior of the labels the client trains on
    w_kd: float  # this visit's KD weight (0: a clean client, or KD off)
    kd_mask: torch.Tensor | None  # (n,) bool: the samples KD acts on; None: all of them


@dataclass
class ClassLosses:
    """A FedNoRo probe's answer: the global model's mean CE per class on the client's labels (C,)."""

    class_loss: np.ndarray


class NoiseAwareMethod(StagedMethod):
    """Clean clients: LA; noisy clients: LA-KD; server: DaAgg. The noisy set lives in
    `state.extra["noisy"]` and travels to clients as `instructions.noisy`.

    `noise_aware_stages` run this optimization one after another as one schedule: the KD
    ramp (and FedSIR's relabel events) count `phase_round`, the rounds since the first began.
    """

    noise_aware_stages: tuple[str, ...] = ("train",)
    instructions_type: type[NoiseAwareInstructions] = NoiseAwareInstructions
    client_state_type = NoiseAwareState

    def init(self, ctx):
        if ctx.task == "multi":
            raise ConfigError(f"method '{self.name}' is single-label; pick fedavg/fedprox for multi-label data")
        state = super().init(ctx)
        self.teacher = self.build_model().to(ctx.device).eval()
        return state

    def noisy_set(self, state: ServerState) -> frozenset[int]:
        return frozenset(state.extra.get("noisy", ()))

    def phase_round(self, state: ServerState) -> int:
        """Rounds done since the first noise-aware stage began (earlier ones by their budgets)."""
        done = 0
        for stage in self.stages:
            if stage.name == state.stage:
                break
            if stage.name in self.noise_aware_stages:
                done += stage.rounds
        return done + state.stage_round

    def train_instructions(self, state: ServerState) -> NoiseAwareInstructions:
        p = self.params
        w_kd = losses.kd_ramp_weight(self.phase_round(state), p.kd_begin, p.kd_end, p.kd_a)
        return self.instructions_type(noisy=self.noisy_set(state), w_kd=w_kd)

    def prior_targets(self, task: ClientTask) -> torch.Tensor:
        """The labels the LA class prior counts: those the client trains on."""
        return self.targets(task)

    def before_local(self, task: ClientTask) -> dict[str, Any]:
        labels = self.prior_targets(task)
        ins = task.instructions
        noisy = task.cid in (ins.noisy or ())
        w_kd = float(ins.w_kd) if noisy and self.params.kd else 0.0
        if w_kd > 0:
            load_params_(self.teacher, task.params)
        prior = losses.class_log_prior(labels, self.ctx.num_classes, self.params.absent_prior)
        return {"visit": NoiseAwareVisit(prior, w_kd, self.client_state(task).kd_mask if noisy else None)}

    def loss(self, model, batch, task, extras) -> torch.Tensor:
        tau = self.params.tau_la if self.params.la else 0.0
        logits = model(batch.x)
        teacher, mask = None, None
        v = extras["visit"]
        if v.w_kd > 0:
            with torch.no_grad():
                teacher = self.teacher(batch.x)
            mask = v.kd_mask[batch.pos] if v.kd_mask is not None else None
        return noise_aware_loss(logits, batch.y, v.log_prior, tau, teacher, v.w_kd,
                                self.params.kd_T, mask, self.params.kd_soften_student)

    # batched twin of `loss`: the teacher is the model the client started from (step.start)
    def batched_static(self, task, extras) -> dict[str, Any]:
        return {"kd": extras["visit"].w_kd > 0}

    def batched_consts(self, task, extras) -> dict[str, Any]:
        v = extras["visit"]
        consts = {"log_prior": v.log_prior}
        if v.w_kd > 0:
            consts["w_kd"] = torch.tensor(v.w_kd, device=v.log_prior.device)
        return consts

    def batched_samples(self, task, extras) -> dict[str, torch.Tensor]:
        v = extras["visit"]
        return {"kd_mask": v.kd_mask} if v.w_kd > 0 and v.kd_mask is not None else {}

    def batched_loss(self, step) -> torch.Tensor:
        tau = self.params.tau_la if self.params.la else 0.0
        x, y, prior = step.batch["x"], step.flat(step.batch["y"]), step.each(step.consts["log_prior"])
        logits = step.flat(step.net(step.params, x))
        if not step.static["kd"]:
            return losses.la_ce(logits, y, prior, tau, reduction="none")
        with torch.no_grad():
            teacher = step.flat(step.net(step.start, x))
        mask = step.flat(step.batch["kd_mask"]) if "kd_mask" in step.batch else None
        return kd_per_sample(logits, y, prior, tau, teacher, step.each(step.consts["w_kd"]), self.params.kd_T, mask,
                             self.params.kd_soften_student)

    def server_update(self, state, plan, updates):
        if plan.instructions.noisy is not None:  # verdicts made during this round (e.g. by a probe)
            state = state.replace(extra={**state.extra, "noisy": sorted(plan.instructions.noisy)})
        return super().server_update(state, plan, updates)

    def aggregate(self, state, updates, weights=None):
        noisy = self.noisy_set(state)
        if weights is None and self.params.daagg and noisy and state.stage in self.noise_aware_stages:
            ups = [u for u in updates if u.params is not None]
            clean = [u.cid not in noisy for u in ups]
            distance = per_tensor_distance if self.params.daagg_distance == "per_tensor" else flat_distance
            d = nearest_clean_distances([u.params for u in ups], clean, distance)
            weights = daagg_weights([u.num_examples for u in ups], d).tolist()
            return super().aggregate(state, ups, weights)
        return super().aggregate(state, updates, weights)


class FedNoRoParams(NoiseAwareParams):
    """FedNoRo's code's choices by default (FedSIR keeps NoiseAwareParams' older ones)."""

    warmup_rounds: int = Field(10, ge=0, description="stage-1 rounds (part of train.rounds)")
    detect_scaling: Literal["minmax", "zscore"] = Field("minmax", description="per-class scaling before the GMM")
    detect_votes: int = Field(9, ge=1, description="GMM fits (seeds) in the majority vote")
    gmm_n_init: int = Field(1, ge=1, description="restarts within each GMM fit")
    kd_a: float = Field(0.8, ge=0.0, le=1.0, description="final KD weight a", json_schema_extra=tune_range(0.2, 1.0))
    kd_soften_student: bool = Field(False, description="divide the student's logits by kd_T too")
    absent_prior: Literal["one", "neg_inf"] = Field("neg_inf", description="log prior of a class the client lacks")
    daagg_distance: Literal["flat", "per_tensor"] = Field("per_tensor", description="model distance for DaAgg")


def class_mean_losses(loss: np.ndarray, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """Mean loss per labelled class, NaN for absent classes. loss, labels: (n,) -> (C,)."""
    sums = np.bincount(labels, weights=loss, minlength=num_classes)
    counts = np.bincount(labels, minlength=num_classes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def detect_noisy_clients(
    class_loss: np.ndarray, seed: int, n_init: int = 1, scaling: str = "minmax", votes: int = 9
) -> np.ndarray:
    """Noisy verdict per client (K,) bool from per-class losses (K, C), gaps taking the class's
    lowest loss: the most frequent noisy set among `votes` GMM fits (seeds seed + i; the
    first such set on a tie). Noisy = the component with the higher summed mean."""
    x = np.array(class_loss, dtype=float)
    col_min = np.nanmin(np.where(np.isnan(x), np.inf, x), axis=0)
    col_min = np.where(np.isfinite(col_min), col_min, 0.0)
    x = np.where(np.isnan(x), col_min[None, :], x)
    if scaling not in ("minmax", "zscore"):
        raise ValueError(f"scaling must be 'minmax' or 'zscore', got {scaling!r}")
    x = minmax(x) if scaling == "minmax" else zscore(x)
    sets = [tuple(clean_posterior(x, seed=seed + i, n_init=n_init, order_dim=None)[0] < 0.5) for i in range(votes)]
    return np.array(max(sets, key=sets.count), dtype=bool)


@register("fednoro", params=FedNoRoParams)
class FedNoRo(NoiseAwareMethod):
    instructions_type = FedNoRoInstructions
    noise_aware_stages = ("identify", "train")

    @property
    def stages(self) -> tuple[Stage, ...]:
        warm = self.stage_rounds("warmup", self.params.warmup_rounds)
        ident = self.stage_rounds("identify", 1)
        train = self.stage_rounds("train", max(self.cfg.train.rounds - warm - ident, 1))
        return (Stage("warmup", warm), Stage("identify", ident, yields=("verdicts",)), Stage("train", train))

    def plan_round(self, state: ServerState, rnd: int) -> RoundPlan | None:
        if state.stage == "warmup":
            return RoundPlan(stage=state.stage, instructions=FedNoRoInstructions())
        plan = RoundPlan(stage=state.stage, instructions=self.train_instructions(state))
        if "noisy" not in state.extra:
            return RoundPlan(stage=state.stage, instructions=plan.instructions, probe=range(len(self.ctx.clients)))
        return plan

    def client_probe(self, task: ClientTask) -> ClientUpdate:
        """Per-class mean CE of the global model on this client's labels."""
        load_params_(self.model, task.params)
        labels = self.targets(task)
        loss = torch.nn.functional.cross_entropy(predict_client(self.model, task.data), labels, reduction="none")
        cl = class_mean_losses(loss.cpu().numpy(), labels.cpu().numpy(), self.ctx.num_classes)
        return ClientUpdate(cid=task.cid, num_examples=task.data.n, uploads=ClassLosses(cl))

    def after_probe(self, state: ServerState, plan: RoundPlan, answers: Sequence[ClientUpdate]) -> RoundPlan:
        cids = [a.cid for a in answers]
        p = self.params
        flags = detect_noisy_clients(np.stack([a.uploads.class_loss for a in answers]), self.ctx.seed,
                                     p.gmm_n_init, p.detect_scaling, p.detect_votes)
        verdict = {c: bool(f) for c, f in zip(cids, flags, strict=True)}
        noisy = frozenset(c for c, f in verdict.items() if f)
        return RoundPlan(stage=plan.stage, instructions=dataclasses.replace(plan.instructions, noisy=noisy,
                                                                            verdict=verdict))

    def summarize(self, state, plan, updates, params):
        extra, metrics = super().summarize(state, plan, updates, params)
        if plan.instructions.verdict is not None:
            verdict = plan.instructions.verdict
            metrics = RoundMetrics(scalars={"detect/clients_noisy": float(sum(verdict.values()))})
            metrics.estimates.client_noisy = dict(verdict)
        return extra, metrics

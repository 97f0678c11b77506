"""FL-DivideMix: DivideMix run locally on every client, both networks aggregated by FedAvg.

Li, Socher, Hoi. "DivideMix: Learning with Noisy Labels as Semi-supervised Learning."
ICLR 2020, arXiv:2002.07394. The federated form (each client divides and trains its own
data, the server averages both networks) is the baseline of FedCorr, FedNoRo and FedSIR's
comparisons. Spec: shared/spec/baselines-and-metrics.md ("lowest priority").

Stages: `warmup` (both networks, CE on the given labels, optionally with DivideMix's
confidence penalty for asymmetric noise), then `train`. In a train epoch a client scores its
plain data with both of its current networks, fits one GMM per network on the min-max-scaled
per-sample losses, and each network trains on the division made by the *other* one
(co-divide): samples with the peer's clean probability w > p_threshold are labelled (target
refined towards the net's own guess by 1 - w), the rest unlabelled (target co-guessed by both
nets). Both views of both sets are mixed (MixMatch, Beta(alpha, alpha)); the loss is
soft-CE on the labelled rows, lambda_u (ramped up) times MSE on the unlabelled rows, and a
uniform-prior penalty. The evaluated model is the two networks' mean logits, as DivideMix
tests the ensemble.

The local round follows DivideMix's procedure (`local_round`): the division is refitted
every local epoch on the local networks, a step draws separate labelled and unlabelled batches
(batch_size each, ceil(|labelled| / batch_size) steps an epoch), net a trains on b's division
and then b on a's, each with a fresh SGD every local epoch and no weight decay
(`train_weight_decay`: 0), as the FL implementation we matched does (DivideMix's centralized
code keeps one SGD per network, wd 5e-4, over its whole run; a client's cannot outlive a
round). The former choices stay reachable: `split_every: round`, `batching: split`,
`optimizer_lifetime: round`, and all three together run the former joint step (one optimizer
over both networks with train.weight_decay); lab/results/baselines.md, "Parity with the
reference code", has the measurements.

Departures that remain:
- One federated round plays the role of a DivideMix epoch for the lambda_u ramp-up (it starts at
  lambda_u / rampup_rounds in the first train round, as DivideMix's at its first epoch past
  warm-up) and for the warm-up; warm-up rounds count inside train.rounds.
- The warm-up trains both networks jointly with one optimizer (train.weight_decay).
- The GMM runs `gmm_max_iter` EM steps (100, as the independent FL implementation whose
  numbers we matched; DivideMix's own code runs 10).
- train.local_steps is not used by the train stage: its local round counts epochs.
- The two views follow the experiment's `train.augment` (`views: auto`): weak augmentations
  when it is `weak`, else the plain input twice, so the train stage sees the inputs the warm-up
  (and every other method of the comparison) trained on. Chosen after measuring weak views on
  the quickstart (seed 0, MLP on 8x8 digits, where a 1-pixel shift is 12.5% of the image):
  75.7% last-10 with weak views against 91.3% with plain ones, after a 90.9% warm-up.
- Loss histories for asymmetric noise (DivideMix averages the last 5 epochs) are not kept.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from fedcore.config import tune_range
from fedcore.engine.store import ClientData
from fedcore.engine.types import ClientTask, ClientUpdate, Estimates, OptimSpec, RoundMetrics, Stage
from fedcore.methods.coteaching import Coteaching, TwinNet
from fedcore.methods.registry import MethodParams, register
from fedcore.train import losses
from fedcore.train.local import make_optimizer, per_sample_losses
from fedcore.train.mixmatch import clean_probability, co_guess, mixmatch_batch, mixmatch_loss, refine_labels


class DivideMixParams(MethodParams):
    warmup_rounds: int = Field(10, ge=0, description="CE warm-up rounds (part of train.rounds)")
    p_threshold: float = Field(0.5, ge=0.0, le=1.0, description="clean probability above which a sample is labelled",
                               json_schema_extra=tune_range(0.3, 0.8))
    T: float = Field(0.5, gt=0.0, description="sharpening temperature")
    alpha: float = Field(4.0, gt=0.0, description="Beta(alpha, alpha) of the mix")
    lambda_u: float = Field(25.0, ge=0.0, description="weight of the unlabelled MSE after ramp-up",
                            json_schema_extra=tune_range(1.0, 50.0, log=True))
    rampup_rounds: int = Field(16, ge=1, description="train-stage rounds over which lambda_u ramps up")
    conf_penalty: bool = Field(False, description="warm-up negative-entropy penalty (DivideMix: asymmetric noise)")
    views: Literal["auto", "weak", "plain"] = Field(
        "auto", description="the two views: weak augmentations, the plain input twice, or auto = as train.augment"
    )
    prior_penalty: bool = Field(True, description="KL(uniform || mean prediction); assumes balanced classes")
    split_every: Literal["epoch", "round"] = Field(
        "epoch", description="refit the loss GMMs every local epoch on the local nets, or once a round")
    batching: Literal["separate", "split"] = Field(
        "separate", description="separate labelled + unlabelled batches, or split each batch of the local set")
    optimizer_lifetime: Literal["epoch", "round"] = Field(
        "epoch", description="a fresh SGD per network every local epoch, or one kept over the round")
    train_weight_decay: float | None = Field(
        0.0, ge=0.0, le=1.0, description="weight decay of the train stage (None: train.weight_decay)")
    gmm_max_iter: int = Field(100, ge=1, description="EM iterations of each loss GMM")


class MeanTwin(TwinNet):
    """Both networks; forward is their mean logits (DivideMix evaluates the ensemble)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.a(x) + self.b(x)) / 2.0


def warmup_loss(logits: torch.Tensor, y: torch.Tensor, conf_penalty: bool) -> torch.Tensor:
    """CE, minus the mean prediction entropy when `conf_penalty` (it discourages over-confidence)."""
    loss = losses.ce(logits, y)
    if conf_penalty:
        p = F.softmax(logits, dim=-1)
        loss = loss + (p * F.log_softmax(logits, dim=-1)).sum(-1).mean()
    return loss


# -- the local round in DivideMix's procedure (net a on b's division, then b on a's) -----------
def separate_batches(labelled: torch.Tensor, unlabelled: torch.Tensor, batch_size: int,
                     gen: torch.Generator) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """DivideMix's two loaders: ceil(|labelled| / B) steps of (B labelled, B unlabelled) positions.

    Both sets are shuffled; the unlabelled one is reshuffled and restarted when it runs out (the
    reference re-creates its iterator), so every step has a full unlabelled batch unless the set is
    smaller than B. An empty unlabelled set gives empty unlabelled batches."""
    n_l, n_u = len(labelled), len(unlabelled)
    lab = labelled[torch.randperm(n_l, generator=gen).to(labelled.device)]
    unl, at = unlabelled[torch.randperm(n_u, generator=gen).to(unlabelled.device)], 0
    for step in range(math.ceil(n_l / batch_size)):
        take = min(batch_size, n_u)
        if at + take > n_u:
            unl, at = unlabelled[torch.randperm(n_u, generator=gen).to(unlabelled.device)], 0
        yield lab[step * batch_size:(step + 1) * batch_size], unl[at:at + take]
        at += take


class OptimizerPool:
    """One optimizer per network: made afresh every local epoch (`lifetime="epoch"`, the reference),
    or kept over the round's epochs (`"round"`)."""

    def __init__(self, nets: dict[str, nn.Module], spec: OptimSpec, lifetime: str) -> None:
        self.nets, self.spec, self.lifetime = nets, spec, lifetime
        self._opts: dict[str, torch.optim.Optimizer] = {}

    def get(self, name: str, epoch: int) -> torch.optim.Optimizer:
        key = f"{name}/{epoch}" if self.lifetime == "epoch" else name
        if key not in self._opts:
            self._opts = {k: v for k, v in self._opts.items() if not k.startswith(f"{name}/")}
            self._opts[key] = make_optimizer([p for p in self.nets[name].parameters() if p.requires_grad],
                                             self.spec)
        return self._opts[key]


def _guess(net: nn.Module, v1: torch.Tensor, v2: torch.Tensor) -> torch.Tensor:
    return (F.softmax(net(v1), -1) + F.softmax(net(v2), -1)) / 2


def mixmatch_step(net: nn.Module, peer: nn.Module, pos: torch.Tensor, labelled: torch.Tensor, y: torch.Tensor,
                  w_peer: torch.Tensor, views: Callable[[torch.Tensor], torch.Tensor], p: Any, lambda_u: float,
                  rng, gen: torch.Generator) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The loss of one MixMatch step of `net` on positions `pos` (labelled: a bool mask over them).

    Labelled targets are refined by w_peer (the peer's clean probability) towards net's own guess;
    unlabelled ones are co-guessed by both networks, peer held in eval mode as in the reference."""
    b = len(pos)
    x = views(pos)
    v1, v2 = x[:b], x[b:]
    with torch.no_grad():
        peer.eval()
        own, other = _guess(net, v1, v2), _guess(peer, v1, v2)
    targets = torch.where(labelled[:, None], refine_labels(y, w_peer, own, p.T), co_guess(own, other, p.T))
    lam = float(rng.beta(p.alpha, p.alpha))
    perm = torch.randperm(2 * b, generator=gen).to(x.device)
    mixed, t, n_lab = mixmatch_batch((v1, v2), targets, labelled, lam, perm)
    return mixmatch_loss(net(mixed), t, n_lab, lambda_u, p.prior_penalty)


def divide(net: nn.Module, data: ClientData, labels: torch.Tensor, p: Any, seed: int) -> torch.Tensor:
    """The clean probability of every local sample under `net`'s loss GMM: (n,)."""
    loss = per_sample_losses(net, data, labels).cpu().numpy()
    w = clean_probability(loss, seed=seed, max_iter=p.gmm_max_iter)
    return torch.as_tensor(w, dtype=torch.float32, device=labels.device)


def local_round(nets: dict[str, nn.Module], data: ClientData, labels: torch.Tensor, p: Any, spec: OptimSpec,
                views: Callable[[torch.Tensor], torch.Tensor], lambda_u: float, rng, gen: torch.Generator,
                seed: int) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Train nets["a"] and nets["b"] for spec.epochs local epochs; -> (last clean probabilities per
    net, metrics). p: DivideMixParams (split_every, batching, optimizer_lifetime, train_weight_decay, ...)."""
    wd = spec.weight_decay if p.train_weight_decay is None else p.train_weight_decay
    pool = OptimizerPool(nets, dataclasses.replace(spec, weight_decay=wd), p.optimizer_lifetime)
    sums: dict[str, float] = {"x": 0.0, "u": 0.0, "prior": 0.0}
    total, steps, labelled_share, w = 0.0, 0, [], {}
    all_pos = torch.arange(data.n, device=labels.device)
    for epoch in range(spec.epochs):
        if epoch == 0 or p.split_every == "epoch":
            w = {name: divide(net, data, labels, p, seed) for name, net in nets.items()}
        for name, peer_name in (("a", "b"), ("b", "a")):
            net, peer, w_peer = nets[name], nets[peer_name], w[peer_name]
            is_lab = w_peer > p.p_threshold
            labelled_share.append(float(is_lab.float().mean()) if data.n else 0.0)
            if p.batching == "separate":
                pairs = ((torch.cat([pl, pu]), torch.cat([torch.ones_like(pl, dtype=torch.bool),
                                                          torch.zeros_like(pu, dtype=torch.bool)]))
                         for pl, pu in separate_batches(all_pos[is_lab], all_pos[~is_lab], spec.batch_size, gen))
            else:
                pairs = ((pos, is_lab[pos]) for pos in data.batches(spec.batch_size, gen))
            opt = pool.get(name, epoch)
            for pos, lab in pairs:
                if len(pos) < 2:
                    continue  # a lone sample cannot be mixed with another
                net.train()
                loss, parts = mixmatch_step(net, peer, pos, lab, labels[pos], w_peer[pos], views, p, lambda_u,
                                            rng, gen)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                total += float(loss.detach())
                for k, v in parts.items():
                    sums[k] += float(v)
                steps += 1
    for net in nets.values():
        net.train()
    metrics = {f"dividemix/loss_{k}": v / max(steps, 1) for k, v in sums.items()}
    metrics.update({"dividemix/labelled_a": labelled_share[-2] if labelled_share else 0.0,
                    "train/loss": total / max(steps, 1), "train/steps": float(steps),
                    "lr": spec.lr})
    return w, metrics


@dataclass
class DivideMixUpload:
    """A train visit's division, for the server's estimates."""

    noisy: np.ndarray  # (n,) bool: net a's clean probability <= p_threshold


@register("dividemix", params=DivideMixParams)
class DivideMix(Coteaching):
    @property
    def stages(self) -> tuple[Stage, ...]:
        warm = self.stage_rounds("warmup", min(self.params.warmup_rounds, self.cfg.train.rounds))
        train = self.stage_rounds("train", max(self.cfg.train.rounds - warm, 1))
        return (Stage("warmup", warm), Stage("train", train)) if warm else (Stage("train", train),)

    def build_model(self) -> MeanTwin:
        twin = super().build_model()
        return MeanTwin(twin.a, twin.b)

    def joint(self) -> bool:
        """The former local round: one division a round, batches split by it, both nets in one step."""
        p = self.params
        return (p.split_every, p.batching, p.optimizer_lifetime) == ("round", "split", "round")

    def client_update(self, task: ClientTask) -> ClientUpdate:
        if task.stage != "train" or self.joint():
            return super().client_update(task)
        extras = self.start_local(task)
        w, metrics = local_round(
            {"a": self.model.a, "b": self.model.b}, task.data, extras["labels"], self.params, self.optim_spec(task),
            self.make_x(task), extras["lambda_u"], task.rng, task.gen, self.ctx.seed)
        extras.update(w=w, metrics=metrics)
        return self.finish_local(task, extras, None, {})

    def before_local(self, task: ClientTask) -> dict[str, Any]:
        if task.stage != "train":
            return {}
        out = {"lambda_u": self.params.lambda_u * self._ramp(task), "sums": {}}
        if not self.joint():
            return out  # local_round divides, every epoch or at its start
        labels = self.targets(task)
        w = {}
        for name in ("a", "b"):
            loss = per_sample_losses(getattr(self.model, name), task.data, labels)
            w[name] = torch.as_tensor(clean_probability(loss.cpu().numpy(), seed=self.ctx.seed,
                                                        max_iter=self.params.gmm_max_iter),
                                      dtype=torch.float32, device=labels.device)
        return {**out, "w": w}

    def _ramp(self, task: ClientTask) -> float:
        """lambda_u's linear ramp: (k + 1) / rampup_rounds in the k-th train round (0-based), as
        DivideMix's (epoch - warm_up) / 16 reaches 1/16 at its first epoch past warm-up."""
        done = task.rnd - sum(s.rounds for s in self.stages if s.name != "train")
        return float(np.clip((done + 1) / self.params.rampup_rounds, 0.0, 1.0))

    def make_x(self, task: ClientTask):
        if task.stage != "train":
            return super().make_x(task)
        aug, data = self.augmenter(), task.data
        plain = self.params.views == "plain" or (self.params.views == "auto" and self.cfg.train.augment == "none")

        def views(pos: torch.Tensor) -> torch.Tensor:
            if plain:
                return torch.cat([data.x(pos)] * 2)
            x01 = data.x01(pos)
            return torch.cat([data.store.normalize(aug.weak(x01, task.gen)) for _ in range(2)])

        return views

    def loss(self, model, batch, task, extras):
        if task.stage != "train":
            p = self.params.conf_penalty
            return warmup_loss(model.a(batch.x), batch.y, p) + warmup_loss(model.b(batch.x), batch.y, p)
        b = len(batch.pos)
        v1, v2 = batch.x[:b], batch.x[b:]
        with torch.no_grad():
            guess = {n: (F.softmax(getattr(model, n)(v1), -1) + F.softmax(getattr(model, n)(v2), -1)) / 2
                     for n in ("a", "b")}
        unl_target = co_guess(guess["a"], guess["b"], self.params.T)
        total = 0.0
        for net, peer in (("a", "b"), ("b", "a")):
            w = extras["w"][peer][batch.pos]  # co-divide: the peer's division trains this net
            labelled = w > self.params.p_threshold
            targets = torch.where(labelled[:, None], refine_labels(batch.y, w, guess[net], self.params.T),
                                  unl_target)
            lam = float(task.rng.beta(self.params.alpha, self.params.alpha))
            perm = torch.randperm(2 * b, generator=task.gen).to(batch.x.device)
            x, t, n_lab = mixmatch_batch((v1, v2), targets, labelled, lam, perm)
            loss, parts = mixmatch_loss(getattr(model, net)(x), t, n_lab, extras["lambda_u"], self.params.prior_penalty)
            total = total + loss
            for k, v in parts.items():
                extras["sums"][k] = extras["sums"].get(k, 0.0) + v
        extras["sums"]["steps"] = extras["sums"].get("steps", 0) + 1
        return total

    def after_local(self, task, extras):
        if task.stage != "train":
            return {}, None
        if not self.joint():  # local_round reported its metrics
            return DivideMixUpload((extras["w"]["a"] <= self.params.p_threshold).cpu().numpy()), None
        sums = dict(extras["sums"])
        steps = max(sums.pop("steps", 0), 1)
        metrics = {f"dividemix/loss_{k}": float(v) / (2 * steps) for k, v in sums.items()}
        metrics["dividemix/labelled_a"] = float((extras["w"]["b"] > self.params.p_threshold).float().mean())
        extras["metrics"] = metrics
        return DivideMixUpload((extras["w"]["a"] <= self.params.p_threshold).cpu().numpy()), None

    def summarize(self, state, plan, updates, params):
        flags = {u.cid: u.uploads.noisy for u in updates if isinstance(u.uploads, DivideMixUpload)}
        if not flags:
            return dict(state.extra), RoundMetrics()
        est = Estimates(sample_noisy={"main": flags}, client_rate={c: float(f.mean()) for c, f in flags.items()})
        return dict(state.extra), RoundMetrics(estimates=est)

"""FL-DivideMix's local round in the DivideMix procedure (Li, Socher, Hoi, ICLR 2020, arXiv:2002.07394).

Per local epoch: score the client's data with both *local* networks and fit one loss GMM each
(`split_every="epoch"`), then train network a on b's division, then b on a's, each with its own
optimizer. A step draws `batch_size` labelled and `batch_size` unlabelled samples
(`batching="separate"`, ceil(|labelled| / batch_size) steps an epoch, the unlabelled set cycled),
or splits one batch of the whole local set by the division (`"split"`).

This module takes everything it needs as arguments (the method's params, the view function), so
it never imports `fedcore.methods.dividemix`, which imports it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from fedcore.engine.store import ClientData
from fedcore.engine.types import OptimSpec
from fedcore.train.local import make_optimizer, per_sample_losses
from fedcore.train.mixmatch import clean_probability, co_guess, mixmatch_batch, mixmatch_loss, refine_labels


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

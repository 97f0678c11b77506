"""FedRG's per-client detection pass (the method is `fedcore.methods.fedrg`; spec shared/spec/fedrg.md).

Each train round a client embeds its whole local set with the received model, refits its vMF
mixture, scores every sample geometrically (paper, code or posterior form), splits the scores
with a 2-component GMM, runs the small-loss detector on the same model beside it, and (with
`t_init: estimate`) sets its absorption matrix T once from the flagged samples' predictions.
`method` is the running `FedRG` (not imported here: fedrg.py imports this module).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from fedcore.stats import transition, vmf


@torch.no_grad()
def embed(method: Any, task) -> tuple[np.ndarray, np.ndarray, np.ndarray, torch.Tensor]:
    """Unit embeddings of every local sample and of two SimCLR views, plus logits.

    Returns z, z1, z2 (n, d) float64 arrays and logits (n, C) on the device.
    """
    model, data, aug = method.model.eval(), task.data, method.augmenter()
    zs, logits = [], []
    for pos in data.eval_batches():
        x01 = data.x01(pos)
        v1, v2 = aug.simclr_views(x01, task.gen)
        h = model.features(method.ctx.store.normalize(torch.cat([x01, v1, v2])))
        b = len(pos)
        logits.append(model.head(h[:b]))
        zs.append(F.normalize(h, dim=1).double().cpu().numpy().reshape(3, b, -1))
    z = np.concatenate(zs, axis=1)
    return z[0], z[1], z[2], torch.cat(logits)


def detect(method: Any, task) -> dict[str, Any]:
    """One client's detection pass: vMF geometry detector (-> training mask) and small-loss detector."""
    p, y_t = method.params, task.data.labels
    y, c = y_t.cpu().numpy(), method.ctx.num_classes
    z, z1, z2, logits = embed(method, task)
    st, g = task.state, p.components or c
    mix = vmf.VMFMixture(**st["mix"]) if "mix" in st else vmf.init_mixture(z, g, task.rng, p.kappa0, p.pi0)
    mix = vmf.fit(z, mix, p.em_iters, p.mix_momentum, p.normalizer, prior=p.prior, kappa_clamp=(0.5, p.kappa_max))
    kappa_aug = vmf.aug_concentration(z1, z2)
    median = vmf.ema_median(st.get("median"), kappa_aug, p.median_momentum)
    resp = vmf.responsibilities(z, mix, vmf.temper_factor(kappa_aug, median), p.normalizer, p.resp_temperature)
    weight = st.get("clean", np.ones(len(y), bool))
    weight = vmf.label_fallback(y, weight) if p.b_fallback else weight
    counts_new = vmf.class_counts(resp[:, 1:], y, weight, c, p.eta)
    b = vmf.ema_rows(st.get("B", np.full((c, g), 1.0 / g)), counts_new / counts_new.sum(1, keepdims=True),
                     p.b_momentum)
    # The posterior's counts start at the first observation, not at a uniform B: a uniform start
    # would make P(label | component) the label frequencies for the first rounds.
    counts = counts_new if "counts" not in st else (1 - p.b_momentum) * st["counts"] + p.b_momentum * counts_new
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
    state = {"mix": mix.as_dict(), "median": median, "B": b, "counts": counts, "clean": ~noisy}
    mask = torch.as_tensor(noisy, device=y_t.device)
    if "t_init" in st:
        state["t_init"] = st["t_init"]
    elif wants_t_estimate(method, task):
        set_t_estimate(method.model, logits[mask], y_t[mask], c, p.t_prior)
        state["t_init"] = task.rnd
    return {"noisy": mask, "small_loss": small_loss, "metrics": metrics, "state": state}


def wants_t_estimate(method: Any, task) -> bool:
    """t_init=estimate sets T once per client, on its first visit whose received head has been
    trained (a train round after the stage's first): before that the predictions are a random head's."""
    p = method.params
    return p.t_init == "estimate" and p.absorption != "off" and task.instructions.get("train_round", 0) >= 1


@torch.no_grad()
def set_t_estimate(model: Any, logits: torch.Tensor, labels: torch.Tensor, c: int, prior: float) -> None:
    """T <- the soft confusion of the flagged samples' predictions (n, C) against their labels (n,)."""
    probs = F.softmax(logits.double(), dim=1).cpu().numpy()
    t = transition.estimate_transition(probs, labels.cpu().numpy(), c, prior)
    model.absorption.T.copy_(torch.as_tensor(t, dtype=model.absorption.T.dtype))

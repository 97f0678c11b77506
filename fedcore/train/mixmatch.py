"""DivideMix's pieces: the loss-GMM co-divide, label refinement and co-guessing, and the
MixMatch objective (Li, Socher, Hoi, ICLR 2020; Berthelot et al., NeurIPS 2019).

Shapes: probabilities (n, C); clean probabilities w (n,); integer labels (n,).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.nn.functional as F

from fedcore.stats.gmm import clean_posterior
from fedcore.train import losses


def clean_probability(loss: np.ndarray, seed: int, max_iter: int = 10) -> np.ndarray:
    """DivideMix's per-sample clean probability: a 2-component GMM on min-max-scaled losses.

    The short, loosely regularized fit (10 EM steps by default, tol 1e-2, reg_covar 5e-4) follows
    DivideMix's code; stopping before convergence is part of that recipe, so scikit-learn's
    ConvergenceWarning is silenced here.
    """
    x = np.asarray(loss, dtype=float)
    span = x.max() - x.min() if len(x) else 0.0
    scaled = (x - x.min()) / span if span > 0 else np.zeros_like(x)
    from sklearn.exceptions import ConvergenceWarning  # lazy: scikit-learn adds ~2 s to start-up

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return clean_posterior(scaled, seed=seed, reg_covar=5e-4, max_iter=max_iter, tol=1e-2)[0]


def sharpen(p: torch.Tensor, T: float) -> torch.Tensor:
    """p^(1/T), renormalized per row: T < 1 makes guesses more confident."""
    q = p.pow(1.0 / T)
    return q / q.sum(dim=-1, keepdim=True)


def refine_labels(y: torch.Tensor, w: torch.Tensor, p_own: torch.Tensor, T: float) -> torch.Tensor:
    """Labelled targets: sharpen(w * onehot(y) + (1 - w) * p_own), p_own the net's own view-averaged guess."""
    hot = F.one_hot(y, p_own.shape[-1]).to(p_own.dtype)
    w = w.to(p_own.dtype)[:, None]
    return sharpen(w * hot + (1.0 - w) * p_own, T)


def co_guess(p_a: torch.Tensor, p_b: torch.Tensor, T: float) -> torch.Tensor:
    """Unlabelled targets: the sharpened mean of both networks' view-averaged predictions."""
    return sharpen((p_a + p_b) / 2.0, T)


def mixmatch_loss(
    logits: torch.Tensor, targets: torch.Tensor, n_labelled: int, lambda_u: float, prior_penalty: bool = True
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The DivideMix objective on a mixed batch whose first `n_labelled` rows came from the labelled set.

    L = soft-CE(labelled rows) + lambda_u * MSE(softmax, target)(unlabelled rows) + KL(uniform || mean prediction).
    An empty part contributes 0; `prior_penalty` False drops the last term. Returns (loss, {"x", "u", "prior"}).
    """
    zero = logits.sum() * 0.0  # keeps the graph when a part is empty
    lx = losses.soft_ce(logits[:n_labelled], targets[:n_labelled]) if n_labelled else zero
    un = logits[n_labelled:]
    lu = ((F.softmax(un, dim=-1) - targets[n_labelled:]) ** 2).mean() if len(un) else zero
    c = logits.shape[-1]
    prior = torch.full((c,), 1.0 / c, dtype=logits.dtype, device=logits.device)
    mean_pred = F.softmax(logits, dim=-1).mean(0)
    penalty = (prior * torch.log(prior / mean_pred)).sum() if prior_penalty else zero
    return lx + lambda_u * lu + penalty, {"x": lx.detach(), "u": lu.detach(), "prior": penalty.detach()}


def mixmatch_batch(
    views: tuple[torch.Tensor, torch.Tensor], targets: torch.Tensor, labelled: torch.Tensor,
    lam: float, perm: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Stack both views of the labelled, then of the unlabelled samples, with their targets, and mix.

    views: two augmentations (B, ...) of the batch; targets (B, C); labelled (B,) bool.
    lam is used as max(lam, 1 - lam) so the mix stays closer to its own row. perm spans the 2B rows.
    -> (mixed inputs (2B, ...), mixed targets (2B, C), number of labelled rows).
    """
    v1, v2 = views
    lab, unl = labelled, ~labelled
    x = torch.cat([v1[lab], v2[lab], v1[unl], v2[unl]])
    t = torch.cat([targets[lab], targets[lab], targets[unl], targets[unl]])
    lam = max(lam, 1.0 - lam)
    return losses.mix(x, lam, perm), losses.mix(t, lam, perm), 2 * int(lab.sum())

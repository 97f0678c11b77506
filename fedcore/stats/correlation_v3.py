"""FedHarmony's spec-v3 readings as pure maths (spec fedharmony.md, v3 notes).

These sit next to `stats.correlation`, which holds the v2 pieces. They cover the phi of pooled
moments (a consensus operator), the entry weights Gamma of Psi, CAA's relative temperature, BCE
masked to the labels a client annotates, and the per-round diagnostics of the alignment term (ECL):
its gradient against BCE's, and the share of it that opposes the labels. Torch where gradients
flow, numpy elsewhere; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from fedcore.stats.correlation import alignment_gap, leave_one_out, phi_correlation


def score_moments(f: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Marginals p (C,) and pair moments joint (C, C) = mean f f^T of scores f (N, C)."""
    f = np.asarray(f, dtype=np.float64)
    n = max(len(f), 1)
    return f.mean(axis=0), f.T @ f / n


def phi_of_moments(p: np.ndarray, joint: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Phi (C, C) from marginals and pair moments, the formula of `phi_correlation`."""
    sd = np.sqrt(np.clip(p * (1 - p), 1e-12, None))
    return (joint - np.outer(p, p)) / (np.outer(sd, sd) + eps)


def pooled_phi(moments: Sequence[tuple[np.ndarray, np.ndarray]], sizes: Sequence[float],
               eps: float = 1e-6) -> np.ndarray:
    """Phi of the pooled data from each client's (p, joint) and sample count.

    Moments are means, so the pooled ones are their size-weighted means, and the result is the
    phi of the concatenated data exactly. A mean of per-client phi matrices is not: it drops
    the between-client spread of the marginals.
    """
    w = np.asarray(sizes, dtype=np.float64)
    w = w / w.sum()
    p = np.tensordot(w, np.stack([m[0] for m in moments]), axes=1)
    joint = np.tensordot(w, np.stack([m[1] for m in moments]), axes=1)
    return phi_of_moments(p, joint, eps)


def consensus(stats: Mapping[int, np.ndarray], sizes: Mapping[int, float], clients: Sequence[int], how: str,
              moments: Mapping[int, tuple[np.ndarray, np.ndarray]] | None = None,
              weights: Mapping[int, float] | None = None, eps: float = 1e-6) -> dict[int, np.ndarray]:
    """Leave-one-out teacher R*_k for each k in `clients`, by operator `how`.

    'mean' / 'median': `stats.correlation.leave_one_out`. 'caa': the mean weighted by `weights`
    (e.g. the previous round's CAA weights, in sample units; a client without one weighs its size).
    'pooled': the phi of the other clients' pooled moments (needs `moments`: cid -> (p, joint)).
    """
    if how in ("mean", "median"):
        return leave_one_out(stats, sizes, clients, how=how)
    if how == "caa":
        return leave_one_out(stats, {j: float((weights or {}).get(j, sizes.get(j, 1.0))) for j in stats}, clients)
    if how != "pooled" or moments is None:
        raise ValueError(f"unknown consensus operator {how!r} (or 'pooled' without moments)")
    out = {}
    for k in clients:
        others = [j for j in sorted(moments) if j != k]
        if others:
            out[k] = pooled_phi([moments[j] for j in others], [float(sizes.get(j, 1.0)) for j in others], eps)
    return out


def entry_weights(teacher: np.ndarray, mask: np.ndarray, gamma: str = "one") -> np.ndarray:
    """Weights of the squared gaps in Psi = sum ||Gamma o (R - R*)||^2: mask * Gamma^2.

    gamma 'one': Gamma = 1 (the plain squared Frobenius norm over the mask); 'abs': Gamma = |R*|,
    which weighs the entries by their consensus strength, as the summary's curvature argument
    (gamma_in >> gamma_out) suggests.
    """
    if gamma == "one":
        return np.asarray(mask, dtype=np.float64)
    if gamma == "abs":
        return np.asarray(mask, dtype=np.float64) * np.abs(np.asarray(teacher, dtype=np.float64)) ** 2
    raise ValueError(f"unknown Gamma {gamma!r}; use 'one' or 'abs'")


def relative_gamma(gaps: np.ndarray, c: float) -> float:
    """CAA temperature gamma = c / median(s_k), so that q_k = exp(-gamma s_k) moves at any scale of s_k.

    A zero median (no gaps yet) gives c: there is nothing to weigh then.
    """
    med = float(np.median(np.asarray(gaps, dtype=np.float64))) if len(gaps) else 0.0
    return c / med if med > 0 else c


def annotated(labels: torch.Tensor) -> torch.Tensor:
    """(C,) bool: the labels a client annotates at least once. A label it never marks is unknown to it."""
    return labels.reshape(-1, labels.shape[-1]).sum(dim=0) > 0


def masked_bce(logits: torch.Tensor, y: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Mean BCE over the entries of the kept labels (keep: (C,) bool); a dropped label gets no gradient."""
    per = torch.nn.functional.binary_cross_entropy_with_logits(logits, y.to(logits.dtype), reduction="none")
    m = keep.to(per.dtype).expand_as(per)
    return (per * m).sum() / m.sum().clamp_min(1.0)


def block_norm(r: np.ndarray, mask: np.ndarray) -> float:
    """Frobenius norm of R over the entries `mask` selects (e.g. the in-block, off-diagonal ones)."""
    r = np.asarray(r, dtype=np.float64)
    return float(np.sqrt(np.sum(r * r * np.asarray(mask, dtype=np.float64))))


def ecl_diagnostics(logits: torch.Tensor, y: torch.Tensor, teacher: torch.Tensor, weights: torch.Tensor,
                    lam: float, keep: torch.Tensor | None = None, per_entry: bool = True,
                    eps: float = 1e-6) -> dict[str, float]:
    """How ECL pulls against BCE on the whole local set, in logit space.

    logits, y: (n, C), the client's scores at the round start and its annotations. The ECL term
    is lam * Psi(phi(sigmoid(logits)), teacher) with entry weights `weights`; BCE is the mean
    over the kept labels (keep None: all). Returns 'grad_ratio' = ||grad ECL|| / ||grad BCE||
    and 'opposing' = the share of ECL's gradient mass (|g| summed) on entries where descent
    moves the logit away from the label (g > 0 for a positive label, g < 0 for a negative one),
    over the kept labels.
    """
    z = logits.detach().double().requires_grad_(True)
    yy = y.double()
    k = torch.ones(z.shape[1], dtype=torch.bool, device=z.device) if keep is None else keep
    (g_bce,) = torch.autograd.grad(masked_bce(z, yy, k), z)
    gap = alignment_gap(phi_correlation(torch.sigmoid(z), eps=eps), teacher.double(), weights.double(), per_entry)
    (g_ecl,) = torch.autograd.grad(lam * gap, z)
    g_ecl = g_ecl * k.double()
    mass = g_ecl.abs().sum()
    against = (g_ecl * (2 * yy - 1) > 0).double()
    return {"grad_ratio": float(g_ecl.norm() / g_bce.norm().clamp_min(1e-30)),
            "opposing": float((g_ecl.abs() * against).sum() / mass) if mass > 0 else 0.0}

"""Label-correlation maths for federated multi-label learning (spec: fedharmony.md).

Pure functions, no I/O: the phi correlation of soft (or hard) label scores, its
whole-local-set estimate refreshed by one mini-batch (v2: no per-batch sampling
variance), the leave-one-out consensus of client correlation matrices and the premise
check built on it, spectral label blocks, the block-masked alignment gap (summed, or
per entry), and the correlation-aware aggregation (CAA) weights. Torch where gradients
must flow (`phi_correlation`, `refreshed_phi`, `alignment_gap`), numpy elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch


def phi_correlation(f: torch.Tensor | np.ndarray, eps: float = 1e-6) -> torch.Tensor:
    """Phi correlation (C, C) of label scores f (N, C) in [0, 1]; differentiable in f.

    R[c, c'] = (p_cc' - p_c p_c') / (sqrt(p_c (1 - p_c) p_c' (1 - p_c')) + eps), with
    p_c = mean f[:, c] and p_cc' = mean f[:, c] f[:, c']. Hard 0/1 labels give the
    classical phi coefficient (1 for identical columns, negative for disjoint ones).
    """
    f = torch.as_tensor(f)
    f = f.double() if not f.is_floating_point() else f
    n = max(f.shape[0], 1)
    p = f.mean(dim=0)
    joint = f.T @ f / n
    # sqrt of each variance separately, clamped: a constant column would give an infinite
    # sqrt-gradient at 0 and NaNs in the backward pass.
    sd = torch.sqrt((p * (1 - p)).clamp_min(1e-12))
    return (joint - p[:, None] * p[None, :]) / (sd[:, None] * sd[None, :] + eps)


def scale_grad(x: torch.Tensor, k: float) -> torch.Tensor:
    """x in the forward pass, k times its gradient in the backward pass."""
    return x.detach() + k * (x - x.detach())


def refreshed_phi(table: torch.Tensor, pos: torch.Tensor, rows: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Phi correlation (C, C) of the whole local set, with the batch's rows refreshed.

    table: (n, C) scores of every local sample (held fixed, no gradient); pos: (B,) positions
    of the batch, rows: (B, C) their current, differentiable scores. The estimate is the
    statistic of all n samples, so unlike a phi of the B rows alone it carries no mini-batch
    sampling variance; gradients reach the model through the refreshed rows only, each
    with weight 1/n. Scale them by n / B (`scale_grad`) for an unbiased estimate of the
    whole-set gradient at every step.
    """
    full = table.detach().to(rows.dtype, copy=True).index_put((pos,), rows)
    return phi_correlation(full, eps=eps)


def offdiag_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Frobenius distance between (C, C) matrices over the off-diagonal entries."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    np.fill_diagonal(d, 0.0)
    return float(np.sqrt(np.sum(d * d)))


def premise_distances(corrs: Sequence[np.ndarray], sizes: Sequence[float], truth: np.ndarray) -> dict[str, object]:
    """The premise check of consensus learning: is the leave-one-out consensus R*_k (sample-count
    weighted mean of the other clients' R_j) closer to the true global correlation than R_k?

    corrs: K client correlations (C, C); sizes: K sample counts; truth: (C, C). Returns the
    mean off-diagonal distances 'consensus' and 'own' over the clients, and per client.
    """
    stats = dict(enumerate(corrs))
    teachers = leave_one_out(stats, dict(enumerate(sizes)), range(len(corrs)))
    own = [offdiag_distance(stats[k], truth) for k in range(len(corrs))]
    cons = [offdiag_distance(teachers[k], truth) for k in range(len(corrs)) if k in teachers]
    return {"consensus": float(np.mean(cons)) if cons else float("nan"), "own": float(np.mean(own)),
            "consensus_per_client": cons, "own_per_client": own}


def leave_one_out(
    stats: Mapping[int, np.ndarray], sizes: Mapping[int, float], clients: Sequence[int], how: str = "mean"
) -> dict[int, np.ndarray]:
    """Teacher R*_k (C, C) for each k in `clients`, from every *other* client's R_j.

    stats: cid -> R_j (C, C). sizes: cid -> sample count (weights of the mean).
    how: 'mean' (sample-count weighted) or 'median' (elementwise, unweighted).
    A client with no other client to learn from gets no teacher.
    """
    out: dict[int, np.ndarray] = {}
    for k in clients:
        others = [j for j in sorted(stats) if j != k]
        if not others:
            continue
        mats = np.stack([np.asarray(stats[j], dtype=np.float64) for j in others])
        if how == "median":
            out[k] = np.median(mats, axis=0)
        else:
            w = np.array([float(sizes.get(j, 1.0)) for j in others])
            out[k] = np.tensordot(w / w.sum(), mats, axes=1)
    return out


def default_num_blocks(num_labels: int) -> int:
    """G = ceil(C / 4), the spec's choice."""
    return max(1, math.ceil(num_labels / 4))


def spectral_blocks(r: np.ndarray, num_blocks: int, seed: int) -> list[np.ndarray]:
    """Partition the C labels into blocks by spectral clustering of the affinity |R| (C, C).

    Returns sorted int64 label arrays, one per non-empty block, that cover 0..C-1 once.
    """
    c = r.shape[0]
    g = min(max(int(num_blocks), 1), c)
    if g == 1:
        return [np.arange(c)]
    if g == c:
        return [np.array([i]) for i in range(c)]
    from sklearn.cluster import SpectralClustering  # lazy: scikit-learn adds ~2 s to start-up

    a = np.abs(np.nan_to_num(np.asarray(r, dtype=np.float64)))
    a = 0.5 * (a + a.T)
    np.fill_diagonal(a, 1.0)
    # A tiny floor keeps the graph connected, so the Laplacian's null space is one-dimensional
    # and labels with no correlation to anything still land in some block.
    a = a + 1e-6
    labels = SpectralClustering(n_clusters=g, affinity="precomputed", random_state=seed).fit_predict(a)
    return [np.flatnonzero(labels == b) for b in np.unique(labels)]


def block_mask(blocks: Sequence[np.ndarray] | None, num_labels: int, diagonal: bool = False) -> np.ndarray:
    """(C, C) float mask of the within-block entries; all entries when blocks is None.

    The diagonal is left out unless `diagonal` (v2: for soft scores it measures confidence, not
    co-occurrence; spec v3 keeps it as the summary's Psi does, switchable).
    """
    if blocks is None:
        m = np.ones((num_labels, num_labels))
    else:
        ids = np.empty(num_labels, dtype=np.int64)
        for b, labels in enumerate(blocks):
            ids[np.asarray(labels, dtype=np.int64)] = b
        m = (ids[:, None] == ids[None, :]).astype(np.float64)
    if not diagonal:
        np.fill_diagonal(m, 0.0)
    return m


def alignment_gap(r: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor, per_entry: bool = False) -> torch.Tensor:
    """sum_g ||R[S_g, S_g] - R*[S_g, S_g]||_F^2 over the entries `mask` selects (scalar).

    per_entry: divide by the number of selected entries (the mean squared gap), so a loss
    weight means the same at any label count and block size.
    """
    d = r - teacher.to(r.dtype)
    m = mask.to(r.dtype)
    total = (d * d * m).sum()
    return total / m.sum().clamp_min(1.0) if per_entry else total


def alpha_schedule(t: int, t0: float) -> float:
    """alpha(t) = max(0, 1 - t / T0): 1 at t = 0 (pure sample-count weights), 0 from T0 on."""
    if t0 <= 0:
        return 0.0
    return max(0.0, 1.0 - t / t0)


def caa_weights(sizes: np.ndarray, gaps: np.ndarray, alpha: float, gamma: float) -> np.ndarray:
    """w_k = alpha nbar_k + (1 - alpha) qbar_k with q_k = exp(-gamma s_k); sums to 1.

    sizes (K,): sample counts. gaps (K,): structure gaps s_k >= 0.
    """
    n = np.asarray(sizes, dtype=np.float64)
    s = np.asarray(gaps, dtype=np.float64)
    # Shifting by the smallest gap leaves qbar unchanged and keeps exp() from underflowing to 0/0.
    q = np.exp(-gamma * (s - s.min())) if len(s) else s
    return alpha * n / n.sum() + (1.0 - alpha) * q / q.sum()

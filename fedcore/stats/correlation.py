"""Label-correlation maths for federated multi-label learning (spec: fedharmony.md).

Pure functions, no I/O: the phi correlation (`phi` of marginals and pair moments: the one
formula, with the one guard for a label that never varies; `phi_correlation` of label scores),
its whole-local-set estimate refreshed by one mini-batch (no per-batch sampling variance), the
leave-one-out consensus of client correlation matrices (mean, median, CAA-weighted, or the phi
of pooled moments) and the premise check built on it, spectral label blocks, the block-masked
alignment gap (summed, or per entry) and its entry weights, the correlation-aware aggregation
(CAA) weights and temperature, BCE masked to the labels a client annotates, and the per-round
diagnostics of the alignment term (ECL). The spec's readings (v1, v2, v3) are argument values
of these functions, chosen by FedHarmony's params. Torch where gradients must flow, numpy
elsewhere.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch

# Floor of a label's variance p (1 - p) (see `phi`).
_VAR_FLOOR = 1e-12


def phi(p: torch.Tensor | np.ndarray, joint: torch.Tensor | np.ndarray, eps: float = 0.0) -> torch.Tensor | np.ndarray:
    """Phi correlation (C, C) from marginals p (C,) and pair moments joint (C, C) = E[f f^T].

    R[c, c'] = (joint[c, c'] - p_c p_c') / (sd_c sd_c' + eps), sd_c = sqrt(p_c (1 - p_c)).
    eps = 0 is the exact coefficient (the datasets' true correlations); a method's eps > 0
    shrinks it. numpy in, numpy out; a tensor keeps its gradient.
    """
    as_numpy = isinstance(p, np.ndarray)
    p, joint = torch.as_tensor(p), torch.as_tensor(joint)
    # The one guard, for a label that never varies (p = 0 or 1, e.g. a label a client never
    # shows): its variance is floored, so its row is 0 / 1e-6 = 0 (its covariances are 0 too)
    # where 0 / 0 would give NaN. The floor also keeps sqrt's gradient, infinite at 0, finite.
    sd = torch.sqrt((p * (1 - p)).clamp_min(_VAR_FLOOR))
    r = (joint - p[:, None] * p[None, :]) / (sd[:, None] * sd[None, :] + eps)
    return r.numpy() if as_numpy else r


def phi_correlation(f: torch.Tensor | np.ndarray, eps: float = 1e-6) -> torch.Tensor:
    """Phi correlation (C, C) of label scores f (N, C) in [0, 1]; differentiable in f.

    `phi` of p_c = mean f[:, c] and p_cc' = mean f[:, c] f[:, c']. Hard 0/1 labels give the
    classical phi coefficient (1 for identical columns, negative for disjoint ones, 0 for a
    constant one).
    """
    f = torch.as_tensor(f)
    f = f.double() if not f.is_floating_point() else f
    n = max(f.shape[0], 1)
    return phi(f.mean(dim=0), f.T @ f / n, eps)


def score_moments(f: torch.Tensor | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Marginals p (C,) and pair moments joint (C, C) = mean f f^T of scores f (N, C)."""
    f = np.asarray(f, dtype=np.float64)
    n = max(len(f), 1)
    return f.mean(axis=0), f.T @ f / n


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

    The diagonal is left out unless `diagonal` (for soft scores it measures confidence, not
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
    return phi(p, joint, eps)


def consensus(stats: Mapping[int, np.ndarray], sizes: Mapping[int, float], clients: Sequence[int], how: str,
              moments: Mapping[int, tuple[np.ndarray, np.ndarray]] | None = None,
              weights: Mapping[int, float] | None = None, eps: float = 1e-6) -> dict[int, np.ndarray]:
    """Leave-one-out teacher R*_k for each k in `clients`, by operator `how`.

    'mean' / 'median': `leave_one_out`. 'caa': the mean weighted by `weights`
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

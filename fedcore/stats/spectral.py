"""Spectral pieces of FedSIR: per-class singular structure of backbone features.

Client side: `class_spectra` (top right singular vector, residual directions and gap per
labelled class), `similarity_matrix` and `descriptors` (mu, e). Server side:
`identify_clients` (z-scored 2-component GMM, clean = lower mu) and `consensus` (principal
and residual references of the clean clients, with the eigengap fallback). Client side
again: `principal_scores`, `residual_scores` and the `gate` that turns them into labels.
Features are uncentred on purpose: the paper's class direction is the top singular vector
of the raw feature matrix, which tracks the class's mean direction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fedcore.stats.gmm import clean_posterior

EPS = 1e-12


@dataclass(frozen=True)
class ClassSpectrum:
    """One class on one client: n samples, unit top direction v (d,), residual (m, d), gap."""

    n: int
    v: np.ndarray
    residual: np.ndarray
    gap: float  # (s1 - s2) / s1: how dominant the top direction is
    s1_share: float = 1.0  # s1 / sum(s): the public code's extra consensus weight (`n_gap_s1`)


@dataclass(frozen=True)
class ClassReference:
    """Consensus of the clean clients for one class: v (d,), residual (L', d) orthonormal rows."""

    v: np.ndarray
    residual: np.ndarray
    eigengap: float
    fallback: bool


def energy_rank(s: np.ndarray, ratio: float = 10 / 11) -> int:
    """Smallest k >= 1 whose leading singular values hold `ratio` of the total mass. s: (r,) descending."""
    s = np.asarray(s, dtype=float)
    if s.size == 0 or s.sum() <= 0:
        return 0
    k = int(np.searchsorted(np.cumsum(s), ratio * s.sum() - EPS, side="left")) + 1
    return min(max(k, 1), s.size)


def class_spectrum(z: np.ndarray, ratio: float = 10 / 11) -> ClassSpectrum | None:
    """SVD of the uncentred (n, d) features of one class; None when they are all zero."""
    z = np.asarray(z, dtype=np.float64)
    if len(z) == 0:
        return None
    _, s, vt = np.linalg.svd(z, full_matrices=False)
    k = energy_rank(s, ratio)
    if k == 0:
        return None
    gap = float((s[0] - s[1]) / s[0]) if s.size > 1 else 1.0
    # The sign of a singular vector is arbitrary; every use below is sign-free (|.| or projectors).
    return ClassSpectrum(n=len(z), v=vt[0], residual=vt[k:], gap=gap, s1_share=float(s[0] / s.sum()))


def class_spectra(
    z: np.ndarray, labels: np.ndarray, num_classes: int, min_n: int = 1, ratio: float = 10 / 11
) -> dict[int, ClassSpectrum]:
    """Spectra of every class labelled at least `min_n` times. z: (n, d), labels: (n,)."""
    labels = np.asarray(labels)
    out = {}
    for c in range(num_classes):
        mask = labels == c
        if mask.sum() >= max(min_n, 1):
            spec = class_spectrum(z[mask], ratio)
            if spec is not None:
                out[c] = spec
    return out


def similarity_matrix(vs: np.ndarray) -> np.ndarray:
    """S[c, c'] = |v_c . v_c'| for unit rows vs (m, d) -> (m, m)."""
    vs = np.asarray(vs, dtype=np.float64)
    return np.abs(vs @ vs.T)


def descriptors(sim: np.ndarray) -> tuple[float, float]:
    """(mu, e): mean and mean square of the off-diagonal of S (m, m); NaN when m < 2."""
    m = sim.shape[0]
    if m < 2:
        return float("nan"), float("nan")
    off = sim[~np.eye(m, dtype=bool)]
    return float(off.mean()), float(np.mean(off**2))


def client_descriptors(z: np.ndarray, labels: np.ndarray, num_classes: int, min_n: int = 20) -> tuple[float, float]:
    """(mu, e) of one client from its features (n, d) and labels (n,).

    Classes with fewer than min_n samples are left out; when fewer than two classes remain,
    every labelled class is used so that small clients still get a descriptor.
    """
    spectra = class_spectra(z, labels, num_classes, min_n)
    if len(spectra) < 2:
        spectra = class_spectra(z, labels, num_classes, 1)
    if not spectra:
        return float("nan"), float("nan")
    return descriptors(similarity_matrix(np.stack([spectra[c].v for c in sorted(spectra)])))


def identify_clients(desc: np.ndarray, seed: int, n_init: int = 30) -> np.ndarray:
    """Clean posterior per client from descriptors (K, 2) = (mu, e); clean = the lower-mu component.

    Missing descriptors (NaN) take the column mean, so they sit between the two groups.
    """
    x = np.array(desc, dtype=float)
    col = np.nanmean(np.where(np.isfinite(x), x, np.nan), axis=0)
    bad = ~np.isfinite(x)
    x[bad] = np.take(np.nan_to_num(col), np.nonzero(bad)[1])
    q, _ = clean_posterior(x, seed=seed, n_init=n_init, order_dim=0, standardize=True)
    return q


def _top_eig(m: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (descending) and the top `count` eigenvectors as rows of a symmetric matrix."""
    vals, vecs = np.linalg.eigh(m)
    order = np.argsort(vals)[::-1]
    return vals[order], vecs[:, order[:count]].T


def _single(spec: ClassSpectrum, residual_dim: int) -> ClassReference:
    # The fallback keeps the residual directions with the largest singular values.
    return ClassReference(v=spec.v, residual=spec.residual[:residual_dim], eigengap=0.0, fallback=True)


CONSENSUS_WEIGHTS = ("n_gap", "n_gap_s1")


def consensus_weight(spec: ClassSpectrum, mode: str = "n_gap") -> float:
    """A clean client's weight for one class: n * gap (the paper), times s1_share in the public code."""
    if mode not in CONSENSUS_WEIGHTS:
        raise ValueError(f"weight must be one of {CONSENSUS_WEIGHTS}, got {mode!r}")
    return spec.n * spec.gap * (spec.s1_share if mode == "n_gap_s1" else 1.0)


def class_consensus(
    specs: Sequence[ClassSpectrum], residual_dim: int = 12, min_n: int = 20, eigengap_min: float = 0.03,
    weight: str = "n_gap", client_residual_dim: int | None = None,
) -> ClassReference | None:
    """Projector consensus of one class over the clean clients' spectra.

    M = sum w v v^T / sum w and N = sum w R^T R / sum w with w = `consensus_weight` (clients
    with n >= min_n); v = top eigenvector of M, residual = top eigenvectors of N (at most
    residual_dim, only those with positive eigenvalue). R is each client's whole residual,
    or its first client_residual_dim rows (the public code keeps L). When no client
    qualifies or the eigengap of M is below eigengap_min, the largest client is used alone.
    """
    if not specs:
        return None
    best = max(specs, key=lambda s: s.n)
    used = [s for s in specs if s.n >= min_n and consensus_weight(s, weight) > 0]
    if not used:
        return _single(best, residual_dim)
    w = np.array([consensus_weight(s, weight) for s in used])
    w = w / w.sum()
    d = used[0].v.shape[0]
    m = sum(wi * np.outer(s.v, s.v) for wi, s in zip(w, used, strict=True))
    res = [s.residual if client_residual_dim is None else s.residual[:client_residual_dim] for s in used]
    n = sum((wi * r.T @ r for wi, r in zip(w, res, strict=True)), np.zeros((d, d)))
    vals, top = _top_eig(m, 1)
    gap = float(vals[0] - vals[1]) if d > 1 else float(vals[0])
    if gap < eigengap_min:
        return _single(best, residual_dim)
    nvals, nvecs = _top_eig(n, residual_dim)
    keep = nvals[: len(nvecs)] > EPS * max(nvals[0], EPS)
    return ClassReference(v=top[0], residual=nvecs[keep], eigengap=gap, fallback=False)


def consensus(
    client_spectra: Sequence[Mapping[int, ClassSpectrum]], num_classes: int, residual_dim: int = 12,
    min_n: int = 20, eigengap_min: float = 0.03, weight: str = "n_gap", client_residual_dim: int | None = None,
) -> dict[int, ClassReference]:
    """Per-class references from the clean clients' spectra; classes no clean client holds are absent."""
    out = {}
    for c in range(num_classes):
        ref = class_consensus([s[c] for s in client_spectra if c in s], residual_dim, min_n, eigengap_min,
                              weight, client_residual_dim)
        if ref is not None:
            out[c] = ref
    return out


def principal_scores(z: np.ndarray, refs: Mapping[int, ClassReference], num_classes: int) -> np.ndarray:
    """S_r(i, c) = |z_i/||z_i|| . v_c|, (n, C); -inf for classes without a reference."""
    z = np.asarray(z, dtype=np.float64)
    zhat = z / (np.linalg.norm(z, axis=1, keepdims=True) + EPS)
    out = np.full((len(z), num_classes), -np.inf)
    for c, ref in refs.items():
        out[:, c] = np.abs(zhat @ ref.v)
    return out


def residual_scores(z: np.ndarray, refs: Mapping[int, ClassReference], num_classes: int) -> np.ndarray:
    """S_n(i, c) = ||z_i^T V_c|| / sqrt(L_c) on unnormalised z, (n, C); +inf without a residual."""
    z = np.asarray(z, dtype=np.float64)
    out = np.full((len(z), num_classes), np.inf)
    for c, ref in refs.items():
        if len(ref.residual):
            out[:, c] = np.linalg.norm(z @ ref.residual.T, axis=1) / np.sqrt(len(ref.residual))
    return out


GATES = ("agree", "principal_only", "residual_only")


def gate(sr: np.ndarray, sn: np.ndarray, mode: str = "agree") -> tuple[np.ndarray, np.ndarray]:
    """Proposed labels (n,) (-1 = keep the current label) and the agreement mask (n,).

    agree: accept argmax S_r only where it equals argmin S_n; principal_only / residual_only
    accept one criterion everywhere. The agreement mask is returned in every mode.
    """
    if mode not in GATES:
        raise ValueError(f"gate must be one of {GATES}, got {mode!r}")
    y_r, y_n = sr.argmax(axis=1), sn.argmin(axis=1)
    # A row whose best score is not finite had no reference to compare with: no proposal.
    ok_r, ok_n = np.isfinite(sr.max(axis=1)), np.isfinite(sn.min(axis=1))
    y_r, y_n = np.where(ok_r, y_r, -1), np.where(ok_n, y_n, -1)
    agree = (y_r == y_n) & ok_r & ok_n
    if mode == "principal_only":
        return y_r, agree
    if mode == "residual_only":
        return y_n, agree
    return np.where(agree, y_r, -1), agree

"""Two-component Gaussian-mixture splits (scikit-learn), the workhorse of noise detection.

Every method that separates clean from noisy by a mixture (FedGR's sieving, FedNoRo's
client detection, FedRG's per-client split, FedSIR's descriptor GMM, small-loss
detectors) goes through `clean_posterior`, so the orientation rule lives in one place:
the clean component is the one with the *lower* mean along `order_dim`.
"""

from __future__ import annotations

import numpy as np


def zscore(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Column-wise z-scores of (n, d) data; constant columns become 0."""
    x = np.asarray(x, dtype=float)
    std = x.std(axis=0)
    return (x - x.mean(axis=0)) / np.where(std > eps, std, 1.0)


def minmax(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    """Column-wise min-max scaling of (n, d) data to [0, 1]; constant columns become 0."""
    x = np.asarray(x, dtype=float)
    lo, span = x.min(axis=0), np.ptp(x, axis=0)
    return (x - lo) / np.where(span > eps, span, 1.0)


def clean_posterior(
    values: np.ndarray,
    seed: int,
    n_init: int = 1,
    order_dim: int | None = 0,
    standardize: bool = False,
    covariance_type: str = "full",
    reg_covar: float = 1e-6,
    max_iter: int = 100,
    tol: float = 1e-3,
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior of the lower-mean component for each row, and the two component means.

    values: (n,) or (n, d). Returns (q (n,), means (2, d)) with means[0] the clean one.
    order_dim=None orders the components by the sum of their mean over all dims (e.g. a
    per-class loss vector, where no single class decides).
    Degenerate inputs (n < 2 or no spread) cannot be split: everything is called clean
    (q = 1) and both means equal the data mean.
    """
    x = np.asarray(values, dtype=float)
    x = x[:, None] if x.ndim == 1 else x
    if standardize:
        x = zscore(x)
    if len(x) < 2 or np.allclose(x.std(axis=0), 0.0):
        mean = x.mean(axis=0) if len(x) else np.zeros(x.shape[1])
        return np.ones(len(x)), np.stack([mean, mean])
    from sklearn.mixture import GaussianMixture  # lazy: sklearn adds ~2 s to every task that only validates

    gmm = GaussianMixture(
        n_components=2, covariance_type=covariance_type, n_init=n_init, reg_covar=reg_covar,
        max_iter=max_iter, tol=tol, random_state=seed,
    ).fit(x)
    key = gmm.means_.sum(axis=1) if order_dim is None else gmm.means_[:, order_dim]
    clean = int(np.argmin(key))
    q = gmm.predict_proba(x)[:, clean]
    return q, gmm.means_[[clean, 1 - clean]]


def bic_pair(values: np.ndarray, seed: int, reg_covar: float = 1e-6, max_iter: int = 100,
             tol: float = 1e-3) -> tuple[float, float]:
    """BIC of a one- and of a two-component GMM on 1-D `values` (lower is better).

    A two-component split that does not lower the BIC below one Gaussian's finds no second
    mode: there is nothing a mixture can call noisy. Fewer than 3 values or no spread give
    (0, 0) (no evidence for a second mode either way).
    """
    x = np.asarray(values, dtype=float).reshape(-1, 1)
    if len(x) < 3 or np.allclose(x.std(), 0.0):
        return 0.0, 0.0
    from sklearn.mixture import GaussianMixture  # lazy: scikit-learn adds ~2 s to start-up

    kw = {"reg_covar": reg_covar, "max_iter": max_iter, "tol": tol, "random_state": seed}
    return (float(GaussianMixture(n_components=1, **kw).fit(x).bic(x)),
            float(GaussianMixture(n_components=2, **kw).fit(x).bic(x)))


def noisy_fraction(q: np.ndarray, estimator: str = "mean") -> float:
    """Noise-rate estimate from clean posteriors: mean(1 - q) ('mean') or share of q < 0.5 ('threshold')."""
    q = np.asarray(q, dtype=float)
    if not len(q):
        return 0.0
    if estimator == "threshold":
        return float(np.mean(q < 0.5))
    if estimator == "mean":
        return float(np.mean(1.0 - q))
    raise ValueError(f"unknown estimator {estimator!r}")

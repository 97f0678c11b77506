"""Local intrinsic dimensionality (LID), FedCorr's signal for telling noisy clients apart.

Maximum-likelihood estimate of Amsaleg et al. ("Estimating Local Intrinsic Dimensionality",
KDD 2015), as FedCorr uses it: for each point, with d_1 <= ... <= d_k the distances to its
k nearest *other* points,

    LID = -k / sum_i log(d_i / d_k).

A model that fits noisy labels spreads its predictions over more directions, so the mean
LID of a client's softmax outputs grows with its noise level (FedCorr, Sec. 3.1).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist


def lid_mle(points: np.ndarray, k: int = 20, eps: float = 1e-12) -> np.ndarray:
    """LID of every row of `points` (n, d) among the other rows -> (n,).

    k is capped at n - 1. Fewer than 3 points carry no neighbourhood: LID 0. `eps` keeps
    duplicate points (distance 0) finite: they read as very low-dimensional, and k
    equidistant neighbours (sum of logs 0) as very high-dimensional.
    """
    x = np.asarray(points, dtype=np.float64)
    n = len(x)
    if n < 3:
        return np.zeros(n)
    k = max(1, min(int(k), n - 1))
    dist = cdist(x, x)
    np.fill_diagonal(dist, np.inf)  # a point is not its own neighbour
    near = np.sort(np.partition(dist, k - 1, axis=1)[:, :k], axis=1)
    log_ratio = np.log((near + eps) / (near[:, -1:] + eps)).sum(axis=1)
    return -k / np.minimum(log_ratio, -eps)

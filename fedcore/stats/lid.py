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


def lid_mle(points: np.ndarray, k: int = 20, eps: float = 1e-12, block_entries: int = 2**25) -> np.ndarray:
    """LID of every row of `points` (n, d) among the other rows -> (n,).

    k is capped at n - 1. Fewer than 3 points carry no neighbourhood: LID 0. `eps` keeps
    duplicate points (distance 0) finite: they read as very low-dimensional, and k
    equidistant neighbours (sum of logs 0) as very high-dimensional. Distances are taken in
    row blocks of about `block_entries` entries (256 MB by default), so a large client never
    holds the whole n x n matrix.
    """
    from scipy.spatial.distance import cdist  # lazy: scipy.spatial adds start-up; LID alone needs it

    x = np.asarray(points, dtype=np.float64)
    n = len(x)
    if n < 3:
        return np.zeros(n)
    k = max(1, min(int(k), n - 1))
    rows = max(1, block_entries // n)
    out = np.empty(n)
    for start in range(0, n, rows):
        stop = min(start + rows, n)
        dist = cdist(x[start:stop], x)
        dist[np.arange(stop - start), np.arange(start, stop)] = np.inf  # a point is not its own neighbour
        near = np.sort(np.partition(dist, k - 1, axis=1)[:, :k], axis=1)
        log_ratio = np.log((near + eps) / (near[:, -1:] + eps)).sum(axis=1)
        out[start:stop] = -k / np.minimum(log_ratio, -eps)
    return out

"""Distance-aware aggregation (DaAgg), shared by FedNoRo and FedSIR.

Wu et al., "FedNoRo: Towards Noise-Robust Federated Learning by Addressing Class
Imbalance and Label Noise Heterogeneity", IJCAI 2023, arXiv:2305.05230. A noisy client's
weight shrinks with its distance to the *nearest* clean client (not to the clean mean:
under heterogeneity a useful noisy update may resemble only some clean clients).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

P = TypeVar("P")


def nearest_clean_distances(
    models: Sequence[P], clean: Sequence[bool], distance: Callable[[P, P], float]
) -> np.ndarray:
    """d_k = min over clean j of distance(models[k], models[j]); 0 for clean clients -> (K,).

    With no clean client among `models` nothing can be measured and every d is 0.
    """
    clean = np.asarray(clean, dtype=bool)
    d = np.zeros(len(models))
    refs = np.flatnonzero(clean)
    if not len(refs):
        return d
    for k in np.flatnonzero(~clean):
        d[k] = min(distance(models[k], models[j]) for j in refs)
    return d


def daagg_weights(num_examples: Sequence[float], distances: Sequence[float]) -> np.ndarray:
    """alpha_k = n_k exp(-d_k / max d) / sum_j n_j exp(-d_j / max d) -> (K,), summing to 1.

    Distances are divided by the largest in the round, so the weights do not depend on the
    scale of the parameters; all-zero distances give sample-count weights (FedAvg).
    """
    n = np.asarray(num_examples, dtype=float)
    d = np.asarray(distances, dtype=float)
    top = d.max() if len(d) else 0.0
    scaled = d / top if top > 0 else np.zeros_like(d)
    w = n * np.exp(-scaled)
    return w / w.sum()

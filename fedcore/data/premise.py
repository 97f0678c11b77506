"""The premise check of consensus methods (spec fedharmony.md, v2 notes), stored in the scene report.

Multi-label datasets that know their true label correlation (extras['true_corr']) get the mean
distance from the leave-one-out consensus of the clients' label correlations to the truth,
against the mean distance from a client's own, on the clean labels and on the annotated ones.
It is data-level (the scene report reads the clean labels at prepare time); no method reaches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fedcore.stats.correlation import phi_correlation, premise_distances


def premise_check(labels: dict[str, np.ndarray], client_indices: Sequence[np.ndarray],
                  true_corr: np.ndarray) -> dict[str, Any]:
    """{name: `stats.correlation.premise_distances` of the clients' correlations} for each label set."""
    sizes = [len(idx) for idx in client_indices]
    truth = np.asarray(true_corr, dtype=np.float64)
    out = {}
    for name, y in labels.items():
        corrs = [phi_correlation(np.asarray(y[idx], dtype=np.float64), eps=0.0).numpy() for idx in client_indices]
        res = premise_distances(corrs, sizes, truth)
        out[name] = {k: (_round(v) if isinstance(v, float) else [_round(x) for x in v]) for k, v in res.items()}
    return out


def _round(x: float) -> float | None:
    x = float(x)
    return None if np.isnan(x) else round(x, 4)

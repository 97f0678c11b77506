"""Federated sieving (FedGR): per-sample loss windows, a clean/noisy mixture, per-client rates.

Each client keeps, for every local sample, the last `t_obs` losses of the global model on
it and uploads only their mean `lbar` (one float per sample). The server either pools all
uploaded `lbar` into one two-component GMM (`pooled_sieve`, FedGR's "federated sieving")
or, for the "w/o FS" ablation, fits one GMM per client (`local_sieve`). Both go through
`stats.gmm.clean_posterior`, so the clean component is always the lower-mean one, and
both turn posteriors into rates with `stats.gmm.noisy_fraction`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedcore.stats.gmm import clean_posterior, noisy_fraction


def push_window(window: np.ndarray | None, losses: np.ndarray, t_obs: int) -> np.ndarray:
    """Append one loss per sample and keep the newest `t_obs` columns.

    window: (n, k) past observations, oldest first, or None; losses: (n,). -> (n, min(k + 1, t_obs)).
    """
    if t_obs < 1:
        raise ValueError(f"t_obs must be >= 1, got {t_obs}")
    col = np.asarray(losses, dtype=np.float64)[:, None]
    if window is None or window.shape[1] == 0:
        return col
    if window.shape[0] != col.shape[0]:
        raise ValueError(f"window holds {window.shape[0]} samples, losses {col.shape[0]}")
    return np.concatenate([window, col], axis=1)[:, -t_obs:]


def window_mean(window: np.ndarray) -> np.ndarray:
    """The loss surrogate lbar: (n, k) -> (n,)."""
    return np.asarray(window, dtype=np.float64).mean(axis=1)


@dataclass(frozen=True)
class SieveResult:
    """Clean posteriors q (local order) and estimated noise rate r_k, per client id."""

    q: dict[int, np.ndarray]
    rate: dict[int, float]


def _split(q_all: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    return np.split(q_all, np.cumsum(sizes)[:-1]) if sizes else []


def pooled_sieve(lbar: Mapping[int, np.ndarray], seed: int, estimator: str = "mean") -> SieveResult:
    """One GMM over the pooled surrogates of every client in `lbar` (client id -> (n_k,))."""
    cids = sorted(lbar)
    values = [np.asarray(lbar[c], dtype=np.float64) for c in cids]
    pooled = np.concatenate(values) if values else np.zeros(0)
    q_all, _ = clean_posterior(pooled, seed=seed)
    qs = dict(zip(cids, _split(q_all, [len(v) for v in values]), strict=True))
    return SieveResult(q=qs, rate={c: noisy_fraction(qs[c], estimator) for c in cids})


def local_sieve(lbar: Mapping[int, np.ndarray], seed: int, estimator: str = "mean") -> SieveResult:
    """One GMM per client on its own surrogates (the "w/o FS" ablation)."""
    qs = {c: clean_posterior(np.asarray(lbar[c], dtype=np.float64), seed=seed)[0] for c in sorted(lbar)}
    return SieveResult(q=qs, rate={c: noisy_fraction(q, estimator) for c, q in qs.items()})

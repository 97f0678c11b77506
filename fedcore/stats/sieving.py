"""Federated sieving (FedGR): per-sample loss surrogates, a clean/noisy mixture, per-client rates.

Each client keeps, for every local sample, a surrogate of the global model's loss on it and
uploads only that (one float per sample): a running mean over every visit (`running_mean`,
spec v2 and the authors' `loss_mean`) or the mean of the last `t_obs` visits (`push_window`
and `window_mean`, spec v1). The server either pools the surrogates into one two-component
GMM (`pooled_sieve`, FedGR's "federated sieving") or, for the "w/o FS" ablation, fits one GMM
per client (`local_sieve`); `classwise_sieve` (ours, a diagnostic, not FedGR's) fits one GMM
per given class over the pooled surrogates. All go through `stats.gmm.clean_posterior`, so the clean
component is always the lower-mean one, and both turn posteriors into rates with
`stats.gmm.noisy_fraction`. GMM settings default to the authors' (reg_covar 5e-4, 50
iterations, tol 1e-2). `gate=True` (fedcore's robust profile, not FedGR's) keeps every sample of
a fit clean when two components do not lower the BIC below one (`stats.gmm.bic_pair`): a
unimodal surrogate has no noisy mode to flag.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from fedcore.stats.gmm import bic_pair, clean_posterior, noisy_fraction

GMM_KW = {"reg_covar": 5e-4, "max_iter": 50, "tol": 1e-2}


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


def running_mean(mean: np.ndarray | None, count: int, losses: np.ndarray) -> tuple[np.ndarray, int]:
    """Fold one observation per sample into a running mean: (mean (n,) or None, count) -> (mean, count + 1).

    mean_{c+1} = mean_c + (x - mean_c) / (c + 1), the mean of every observation so far.
    """
    x = np.asarray(losses, dtype=np.float64)
    if mean is None or count == 0:
        return x.copy(), 1
    if mean.shape != x.shape:
        raise ValueError(f"running mean holds {mean.shape[0]} samples, losses {x.shape[0]}")
    return mean + (x - mean) / (count + 1), count + 1


@dataclass(frozen=True)
class SieveResult:
    """Clean posteriors q (local order) and estimated noise rate r_k, per client id; the GMM
    component means (clean, noisy): one pair for the pooled fit (key -1), per client for local
    fits, per given class for class-wise fits."""

    q: dict[int, np.ndarray]
    rate: dict[int, float]
    means: dict[int, tuple[float, float]] = field(default_factory=dict)
    gated: dict[int, bool] = field(default_factory=dict)  # per fit (same keys as means): kept clean by the gate


def _posterior(x: np.ndarray, seed: int, gate: bool, gmm: dict) -> tuple[np.ndarray, np.ndarray, bool]:
    """clean_posterior, or (all clean, its means, True) when `gate` and the BIC prefers one component."""
    q, mu = clean_posterior(x, seed=seed, **{**GMM_KW, **gmm})
    if gate:
        one, two = bic_pair(x, seed=seed, **{**GMM_KW, **gmm})
        if two >= one:
            return np.ones(len(x)), mu, True
    return q, mu, False


def _split(q_all: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    return np.split(q_all, np.cumsum(sizes)[:-1]) if sizes else []


def pooled_sieve(lbar: Mapping[int, np.ndarray], seed: int, estimator: str = "threshold", gate: bool = False,
                 **gmm) -> SieveResult:
    """One GMM over the pooled surrogates of every client in `lbar` (client id -> (n_k,))."""
    cids = sorted(lbar)
    values = [np.asarray(lbar[c], dtype=np.float64) for c in cids]
    pooled = np.concatenate(values) if values else np.zeros(0)
    q_all, mu, gated = _posterior(pooled, seed, gate, gmm)
    qs = dict(zip(cids, _split(q_all, [len(v) for v in values]), strict=True))
    pair = (float(mu[0, 0]), float(mu[1, 0])) if len(mu) else (float("nan"),) * 2
    return SieveResult(q=qs, rate={c: noisy_fraction(qs[c], estimator) for c in cids}, means={-1: pair},
                       gated={-1: gated})


def local_sieve(lbar: Mapping[int, np.ndarray], seed: int, estimator: str = "threshold", gate: bool = False,
                **gmm) -> SieveResult:
    """One GMM per client on its own surrogates (the "w/o FS" ablation)."""
    fits = {c: _posterior(np.asarray(lbar[c], dtype=np.float64), seed, gate, gmm) for c in sorted(lbar)}
    return SieveResult(q={c: q for c, (q, _, _) in fits.items()},
                       rate={c: noisy_fraction(q, estimator) for c, (q, _, _) in fits.items()},
                       means={c: (float(mu[0, 0]), float(mu[1, 0])) for c, (_, mu, _) in fits.items()},
                       gated={c: g for c, (_, _, g) in fits.items()})


def classwise_sieve(lbar: Mapping[int, np.ndarray], labels: Mapping[int, np.ndarray], seed: int,
                    estimator: str = "threshold", gate: bool = False, **gmm) -> SieveResult:
    """One GMM per given class over the pooled surrogates of that class (ours, not the paper's).

    Under label skew a model that knows some classes better than others gives a sample a loss
    that depends on its given class more than on whether the label is wrong, so one pooled GMM
    can flag whole classes; within one class only the ranking of its own samples counts. It needs
    each sample's given label at the server, which FedGR's protocol does not send. A class with
    fewer than two samples cannot be split and stays clean (q = 1).
    """
    cids = sorted(lbar)
    values = [np.asarray(lbar[c], dtype=np.float64) for c in cids]
    pooled = np.concatenate(values) if values else np.zeros(0)
    given = np.concatenate([np.asarray(labels[c]) for c in cids]) if cids else np.zeros(0, dtype=int)
    if given.shape != pooled.shape:
        raise ValueError(f"{given.shape[0]} labels for {pooled.shape[0]} surrogates")
    q_all, means, gated = np.ones(len(pooled)), {}, {}
    for k in np.unique(given):
        rows = given == k
        q_all[rows], mu, gated[int(k)] = _posterior(pooled[rows], seed, gate, gmm)
        means[int(k)] = (float(mu[0, 0]), float(mu[1, 0]))
    qs = dict(zip(cids, _split(q_all, [len(v) for v in values]), strict=True))
    return SieveResult(q=qs, rate={c: noisy_fraction(qs[c], estimator) for c in cids}, means=means, gated=gated)

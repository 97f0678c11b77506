"""Client partitions over the training split.

Every partitioner is deterministic in (seed, labels, config) and draws only from its
own `np.random.default_rng`, never from global state. A partition is a list of sorted
int64 index arrays, one per client, that together cover every training index once.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fedcore.config import PartitionConfig
from fedcore.errors import ConfigError

_SALT = 0x9A27  # separates the partition stream from the noise stream for the same seed
_MAX_TRIES = 2000

Partitioner = Callable[[np.ndarray, PartitionConfig, int, np.random.Generator, "np.ndarray | None"], list[np.ndarray]]
_PARTITIONERS: dict[str, Partitioner] = {}


def register_partition(kind: str) -> Callable[[Partitioner], Partitioner]:
    def deco(fn: Partitioner) -> Partitioner:
        _PARTITIONERS[kind] = fn
        return fn

    return deco


def primary_labels(labels: np.ndarray) -> np.ndarray:
    """Class index per sample; for multi-label (N, C) targets, the lowest present label (or C if none)."""
    if labels.ndim == 1:
        return labels.astype(np.int64)
    present = labels.astype(bool)
    first = present.argmax(axis=1)
    return np.where(present.any(axis=1), first, labels.shape[1]).astype(np.int64)


def partition(
    labels: np.ndarray, cfg: PartitionConfig, num_classes: int, seed: int, groups: np.ndarray | None = None
) -> list[np.ndarray]:
    """Split training indices among `cfg.num_clients` clients.

    labels: (N,) class indices or (N, C) multi-label 0/1. groups: natural user id per sample.
    """
    if cfg.kind not in _PARTITIONERS:
        raise ConfigError(f"unknown partition.kind '{cfg.kind}'; choose one of {sorted(_PARTITIONERS)}")
    n = len(labels)
    if n < cfg.num_clients:
        raise ConfigError(f"{n} training samples cannot be split among {cfg.num_clients} clients")
    rng = np.random.default_rng([seed, _SALT])
    parts = [np.sort(np.asarray(p, dtype=np.int64)) for p in _PARTITIONERS[cfg.kind](labels, cfg, num_classes, rng,
                                                                                      groups)]
    # Kinds without a min_size rule (shards, natural) must still leave no client empty.
    empty = [k for k, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise ConfigError(f"partition '{cfg.kind}' left {len(empty)} of {len(parts)} clients without samples "
                          f"(e.g. client {empty[0]}); use fewer clients or a larger partition.alpha/beta")
    return parts


def class_histogram(labels: np.ndarray, parts: list[np.ndarray], num_classes: int) -> np.ndarray:
    """(K, C) sample counts per client and class (multi-label: label occurrences)."""
    if labels.ndim == 2:
        return np.stack([labels[p].sum(axis=0) for p in parts]).astype(np.int64)
    return np.stack([np.bincount(labels[p], minlength=num_classes) for p in parts]).astype(np.int64)


def _split_by_proportions(idx: np.ndarray, props: np.ndarray) -> list[np.ndarray]:
    cuts = (np.cumsum(props) * len(idx)).astype(np.int64)[:-1]
    return np.split(idx, cuts)


def _retry_min_size(draw: Callable[[], list[np.ndarray]], min_size: int, kind: str) -> list[np.ndarray]:
    for _ in range(_MAX_TRIES):
        parts = draw()
        if min(len(p) for p in parts) >= min_size:
            return parts
    raise ConfigError(
        f"partition '{kind}' could not give every client >= {min_size} samples in {_MAX_TRIES} draws; "
        "lower partition.min_size, raise partition.alpha/beta, or use fewer clients"
    )


@register_partition("iid")
def _iid(labels, cfg, num_classes, rng, groups):
    return np.array_split(rng.permutation(len(labels)), cfg.num_clients)


@register_partition("dirichlet")
def _dirichlet(labels, cfg, num_classes, rng, groups):
    y = primary_labels(labels)
    k, n = cfg.num_clients, len(y)

    def draw() -> list[np.ndarray]:
        buckets: list[list[np.ndarray]] = [[] for _ in range(k)]
        sizes = np.zeros(k, dtype=np.int64)
        for c in np.unique(y):
            idx = rng.permutation(np.flatnonzero(y == c))
            props = rng.dirichlet(np.full(k, cfg.alpha))
            # NIID-Bench balancing: a client already holding its fair share gets no more of this class.
            props = props * (sizes < n / k)
            props = props / props.sum() if props.sum() > 0 else np.full(k, 1.0 / k)
            for j, chunk in enumerate(_split_by_proportions(idx, props)):
                buckets[j].append(chunk)
                sizes[j] += len(chunk)
        return [np.concatenate(b) if b else np.empty(0, np.int64) for b in buckets]

    return _retry_min_size(draw, cfg.min_size, "dirichlet")


def _holders(num_clients: int, num_classes: int, p: float, rng: np.random.Generator) -> np.ndarray:
    """(K, C) bool: client k holds class c ~ Bernoulli(p), every class held by someone."""
    for _ in range(_MAX_TRIES):
        hold = rng.random((num_clients, num_classes)) < p
        if hold.any(axis=0).all() and hold.any(axis=1).all():
            return hold
    raise ConfigError("bernoulli_dirichlet: partition.p is too small for every class and client to hold data")


@register_partition("bernoulli_dirichlet")
def _bernoulli_dirichlet(labels, cfg, num_classes, rng, groups):
    y = primary_labels(labels)
    k = cfg.num_clients

    def draw() -> list[np.ndarray]:
        hold = _holders(k, num_classes, cfg.p, rng)
        buckets: list[list[np.ndarray]] = [[] for _ in range(k)]
        for c in np.unique(y):
            owners = np.flatnonzero(hold[:, c % num_classes])
            idx = rng.permutation(np.flatnonzero(y == c))
            props = rng.dirichlet(np.full(len(owners), cfg.alpha))
            for owner, chunk in zip(owners, _split_by_proportions(idx, props), strict=True):
                buckets[owner].append(chunk)
        return [np.concatenate(b) if b else np.empty(0, np.int64) for b in buckets]

    return _retry_min_size(draw, cfg.min_size, "bernoulli_dirichlet")


@register_partition("shards")
def _shards(labels, cfg, num_classes, rng, groups):
    y = primary_labels(labels)
    k, s = cfg.num_clients, cfg.shards_per_client
    if len(y) < k * s:
        raise ConfigError(f"shards: {len(y)} samples cannot form {k * s} shards; lower partition.shards_per_client")
    # Stable sort on a shuffled order: class-sorted, but ties broken randomly.
    order = rng.permutation(len(y))
    order = order[np.argsort(y[order], kind="stable")]
    shards = np.array_split(order, k * s)
    assign = rng.permutation(k * s).reshape(k, s)
    return [np.concatenate([shards[j] for j in row]) for row in assign]


@register_partition("quantity")
def _quantity(labels, cfg, num_classes, rng, groups):
    n, k = len(labels), cfg.num_clients

    def draw() -> list[np.ndarray]:
        props = rng.dirichlet(np.full(k, cfg.beta))
        return _split_by_proportions(rng.permutation(n), props)

    return _retry_min_size(draw, cfg.min_size, "quantity")


@register_partition("natural")
def _natural(labels, cfg, num_classes, rng, groups):
    if groups is None:
        raise ConfigError("partition.kind 'natural' needs a dataset with users (e.g. flair); pick another kind")
    users, counts = np.unique(groups, return_counts=True)
    if len(users) < cfg.num_clients:
        raise ConfigError(f"dataset has {len(users)} users; set partition.num_clients <= {len(users)}")
    # The largest users become clients; everything else is left out of training on purpose,
    # matching how FLAIR-style benchmarks sample a fixed cohort of real users.
    chosen = users[np.argsort(-counts, kind="stable")[: cfg.num_clients]]
    return [np.flatnonzero(groups == u) for u in chosen]


@register_partition("label_sets")
def _label_sets(labels, cfg, num_classes, rng, groups):
    """Dirichlet over label-set groups: samples sharing one exact label set (multi-label
    (N, C) targets; a class for single-label ones) form a group, and each group is split
    among the clients by Dir(alpha), with the same balancing and min_size rule as 'dirichlet'."""
    if labels.ndim == 1:
        set_ids = labels.astype(np.int64)
    else:
        _, set_ids = np.unique(labels.astype(bool), axis=0, return_inverse=True)
    return _dirichlet(set_ids.reshape(-1), cfg, num_classes, rng, groups)

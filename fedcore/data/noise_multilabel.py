"""Label-noise scenes for multi-label datasets (spec: noise-and-partitions.md).

Clients are chosen and rated exactly as for single-label noise (`choose_noisy_clients`,
`draw_rates`: phi, exact counts, clean cover, fixed/uniform/linspace/fedcorr rates). On a
noisy client with rate r, for every label c held by n_c of its samples:

- missing: drop c from exactly round(r * n_c) of those samples;
- extra:   add c to exactly round(r * n_c) samples lacking it (fewer if too few lack it);
- flip:    both, chosen independently.

So r is the number of corrupted entries per true positive, per label and per operation.
The realized rate is that same ratio measured over the client, averaged over the
operations applied (flip: drops and additions). A label a client never holds receives no
extra copies, so globalized and localized scopes coincide here. is_noisy_sample marks
samples whose label vector changed.

A dataset may ship its own annotations beside the clean labels (`y_given`, e.g.
scenes_mosaic's never-annotated labels): noise is then injected on top of them, the truth
stays the clean labels, and a client whose annotations already differ is marked noisy with
type 'unannotated' (realized rate as for 'missing') unless noise is injected there as well.
"""

from __future__ import annotations

import numpy as np

from fedcore.config import MULTI_LABEL_NOISE, NoiseConfig
from fedcore.data.noise import NoiseScene, choose_noisy_clients, draw_rates, round_half_up
from fedcore.errors import ConfigError

_SALT = 0x3A1E  # its own stream: the same seed gives unrelated single- and multi-label scenes


def corrupt_client(y: np.ndarray, kind: str, rate: float, rng: np.random.Generator) -> np.ndarray:
    """Noisy copy of one client's 0/1 labels y (n, C) under `kind` at `rate` (see module doc)."""
    out = y.copy()
    for c in range(y.shape[1]):
        pos, neg = np.flatnonzero(y[:, c]), np.flatnonzero(y[:, c] == 0)
        k = round_half_up(rate * len(pos))
        if k == 0:
            continue
        if kind in ("missing", "flip"):
            out[rng.choice(pos, size=k, replace=False), c] = 0
        if kind in ("extra", "flip"):
            out[rng.choice(neg, size=min(k, len(neg)), replace=False), c] = 1
    return out


def realized_rate(y: np.ndarray, y_noisy: np.ndarray, kind: str) -> float:
    """Corrupted entries per true positive, averaged over the operations of `kind`."""
    pos = float(y.sum())
    if pos == 0:
        return 0.0
    dropped = float(((y == 1) & (y_noisy == 0)).sum())
    added = float(((y == 0) & (y_noisy == 1)).sum())
    ops = 2.0 if kind == "flip" else 1.0
    return (dropped + added) / (ops * pos)


def inject_multilabel_noise(y: np.ndarray, parts: list[np.ndarray], cfg: NoiseConfig, seed: int,
                            y_given: np.ndarray | None = None) -> NoiseScene:
    """Noise scene for clean 0/1 targets y (N, C) split into client index arrays; y_given (N, C):
    the dataset's own annotations, corrupted instead of y when present (see module doc)."""
    if cfg.type not in (*MULTI_LABEL_NOISE, "none"):
        raise ConfigError(f"noise.type '{cfg.type}' is for single-label data; use one of {list(MULTI_LABEL_NOISE)}")
    k = len(parts)
    rng = np.random.default_rng([seed, _SALT])
    hist = np.stack([y[p].sum(axis=0) for p in parts]).astype(np.int64)
    noisy = np.zeros(k, dtype=bool) if cfg.type == "none" else choose_noisy_clients(hist, cfg, rng)
    rates = draw_rates(noisy, cfg, rng)
    base = y if y_given is None else np.asarray(y_given, dtype=y.dtype)
    y_noisy = base.copy()
    for cid in np.flatnonzero(noisy):
        crng = np.random.default_rng([seed, _SALT, int(cid)])
        y_noisy[parts[cid]] = corrupt_client(base[parts[cid]], cfg.type, float(rates[cid]), crng)
    given = np.array([bool((base[p] != y[p]).any()) for p in parts], dtype=bool)
    types = [cfg.type if noisy[c] else ("unannotated" if given[c] else "none") for c in range(k)]
    rates = np.where(given & ~noisy, np.nan, rates)  # no target: the dataset fixed those annotations
    noisy = noisy | given
    realized = np.array([realized_rate(y[p], y_noisy[p], types[c] if types[c] != "unannotated" else "missing")
                         for c, p in enumerate(parts)])
    flags = (y_noisy != y).any(axis=1)
    notes = ["multi-label noise: scope has no effect (extra labels are only ever added to labels a client holds)"] \
        if cfg.type != "none" and cfg.scope == "localized" else []
    return NoiseScene(y, y_noisy, flags, noisy, types, rates, realized, notes=notes)

"""Label-noise scenes for single-label datasets (spec: noise-and-partitions.md).

A scene picks the noisy clients (fraction phi, exact count, clean cover, or FedCorr's
Bernoulli draw), a rate and a type per noisy client, then flips exactly
round(rate * n_c) samples of every class c on that client. The outcome keeps ground
truth (y_true, flags, target and realized rates) beside the working labels; only
metrics read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedcore.config import NoiseConfig
from fedcore.errors import ConfigError

_SALT = 0x5EED


@dataclass
class NoiseScene:
    """Outcome of noise injection. Arrays over training samples (N,) or clients (K,)."""

    y_true: np.ndarray
    y_noisy: np.ndarray
    is_noisy_sample: np.ndarray
    is_noisy_client: np.ndarray
    noise_type: list[str]
    target_rate: np.ndarray
    realized_rate: np.ndarray
    y_true_known: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)


def round_half_up(x: float) -> int:
    # Python's round() is banker's rounding; "round(rate * n_c)" in the spec means the usual rounding.
    return int(np.floor(x + 0.5))


def choose_noisy_clients(
    hist: np.ndarray, cfg: NoiseConfig, rng: np.random.Generator
) -> np.ndarray:
    """(K,) bool mask of noisy clients. hist: (K, C) class counts per client."""
    k = hist.shape[0]
    if cfg.rate.kind == "fedcorr":
        return rng.random(k) < cfg.rate.rho
    n_noisy = cfg.num_noisy_clients if cfg.num_noisy_clients is not None else round_half_up(
        cfg.noisy_client_fraction * k
    )
    mask = np.zeros(k, dtype=bool)
    if cfg.clean_cover and n_noisy < k:
        clean = _clean_cover(hist, k - n_noisy, cfg.min_per_class, rng)
        mask[np.setdiff1d(np.arange(k), clean)] = True
    else:
        mask[rng.choice(k, size=n_noisy, replace=False)] = True
    return mask


def _clean_cover(hist: np.ndarray, n_clean: int, min_per_class: int, rng: np.random.Generator) -> np.ndarray:
    """Pick n_clean clients that together hold >= min_per_class samples of every class."""
    k, c = hist.shape
    need = np.minimum(hist.sum(axis=0), min_per_class)  # a class absent everywhere cannot be covered
    for _ in range(500):
        pick = rng.choice(k, size=n_clean, replace=False)
        if (hist[pick].sum(axis=0) >= need).all():
            return pick
    # Random draws failed: greedy set cover, then fill up randomly.
    chosen: list[int] = []
    have = np.zeros(c, dtype=np.int64)
    while len(chosen) < n_clean and (have < need).any():
        gain = np.minimum(hist, np.maximum(need - have, 0)).sum(axis=1).astype(float)
        gain[chosen] = -1
        best = int(np.argmax(gain + rng.random(k) * 1e-3))
        chosen.append(best)
        have += hist[best]
    if (have < need).any():
        raise ConfigError(
            f"noise.clean_cover: {n_clean} clean clients cannot hold {min_per_class} samples of every class; "
            "lower noise.min_per_class or noise.num_noisy_clients"
        )
    rest = rng.permutation(np.setdiff1d(np.arange(k), chosen))[: n_clean - len(chosen)]
    return np.concatenate([np.array(chosen, dtype=np.int64), rest])


def draw_rates(noisy: np.ndarray, cfg: NoiseConfig, rng: np.random.Generator) -> np.ndarray:
    """(K,) target rate per client; 0 for clean clients."""
    rates = np.zeros(len(noisy))
    ids = np.flatnonzero(noisy)
    r = cfg.rate
    if r.kind == "fixed":
        rates[ids] = r.value
    elif r.kind == "uniform":
        rates[ids] = rng.uniform(r.min, r.max, size=len(ids))
    elif r.kind == "linspace":
        rates[ids] = np.linspace(r.min, r.max, num=len(ids)) if len(ids) > 1 else r.min
    else:  # fedcorr: level ~ U(tau, 1)
        rates[ids] = rng.uniform(r.tau, 1.0, size=len(ids))
    return rates


def flip_targets(
    y: np.ndarray, kind: str, classes: np.ndarray, num_classes: int, asym_map: dict[int, int] | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """New labels for the samples `y` (all of one true class) under a noise kind.

    classes: the admissible target classes, sorted (all classes when globalized,
    the client's present classes when localized).
    """
    c = int(y[0])
    if kind == "symmetric":
        others = classes[classes != c]
        return rng.choice(others, size=len(y))
    if kind == "pairflip":
        if len(classes) == num_classes:
            return np.full(len(y), (c + 1) % num_classes)
        pos = int(np.searchsorted(classes, c))  # next present class, cyclically
        return np.full(len(y), classes[(pos + 1) % len(classes)])
    if kind == "asymmetric":
        return np.full(len(y), (asym_map or {}).get(c, c))
    raise ValueError(f"flip kind {kind!r}")


def _flippable(kind: str, c: int, classes: np.ndarray, asym_map: dict[int, int] | None) -> bool:
    if kind == "asymmetric":
        tgt = (asym_map or {}).get(c)
        return tgt is not None and tgt != c and tgt in classes
    return len(classes[classes != c]) > 0


def inject_client(
    y_true: np.ndarray, kind: str, rate: float, scope: str, num_classes: int,
    asym_map: dict[int, int] | None, rng: np.random.Generator,
) -> np.ndarray:
    """Noisy labels for one client's true labels: exactly round(rate * n_c) flips per class c."""
    y_new = y_true.copy()
    present = np.unique(y_true)
    classes = present if scope == "localized" else np.arange(num_classes)
    for c in present:
        idx = np.flatnonzero(y_true == c)
        n_flip = round_half_up(rate * len(idx))
        if n_flip == 0 or not _flippable(kind, int(c), classes, asym_map):
            continue
        chosen = rng.choice(idx, size=n_flip, replace=False)
        y_new[chosen] = flip_targets(y_true[chosen], kind, classes, num_classes, asym_map, rng)
    return y_new


def check_class_map(cfg: NoiseConfig, asym_map: dict[int, int] | None) -> None:
    """Refuse asymmetric noise on a dataset without a class map, naming what the user set.

    Checked before any client is drawn: `mixed` used to fail only when its draw happened to give a
    client asymmetric noise, with a message about a type the user never wrote."""
    if asym_map:
        return
    if cfg.type == "asymmetric":
        raise ConfigError("noise.type 'asymmetric' needs a dataset class map; this dataset has none: "
                          "use noise.type=pairflip or symmetric")
    if cfg.type == "mixed" and "asymmetric" in cfg.mixed_types:
        kept = [t for t in cfg.mixed_types if t != "asymmetric"]
        fix = f"set noise.mixed_types=[{','.join(kept)}]" if kept else "use noise.type=pairflip or symmetric"
        raise ConfigError(f"noise.type 'mixed' draws from noise.mixed_types [{', '.join(cfg.mixed_types)}], and "
                          f"'asymmetric' needs a dataset class map this dataset has none of: {fix}")


def inject_noise(
    y: np.ndarray, parts: list[np.ndarray], cfg: NoiseConfig, num_classes: int, seed: int,
    asym_map: dict[int, int] | None = None, y_real_noisy: np.ndarray | None = None,
    y_true_known: np.ndarray | None = None,
) -> NoiseScene:
    """Build the noise scene for single-label targets y (N,) split into client index arrays."""
    if cfg.type in ("missing", "extra", "flip"):
        raise ConfigError(f"noise.type '{cfg.type}' is for multi-label datasets; use symmetric/pairflip/...")
    check_class_map(cfg, asym_map)
    k = len(parts)
    rng = np.random.default_rng([seed, _SALT])
    hist = np.stack([np.bincount(y[p], minlength=num_classes) for p in parts])
    if cfg.type == "real":
        return _real_scene(y, parts, y_real_noisy, y_true_known)
    if cfg.type == "none":
        noisy = np.zeros(k, dtype=bool)
    else:
        noisy = choose_noisy_clients(hist, cfg, rng)
    rates = draw_rates(noisy, cfg, rng)
    types = ["none"] * k
    y_noisy = y.copy()
    notes: list[str] = []
    for cid in np.flatnonzero(noisy):
        kind = cfg.type if cfg.type != "mixed" else str(rng.choice(cfg.mixed_types))
        types[cid] = kind
        if cfg.scope == "localized" and (hist[cid] > 0).sum() < 2:
            notes.append(f"client {cid} holds a single class: kept clean under localized scope")
            noisy[cid], rates[cid], types[cid] = False, 0.0, "none"
            continue
        crng = np.random.default_rng([seed, _SALT, int(cid)])
        y_noisy[parts[cid]] = inject_client(y[parts[cid]], kind, rates[cid], cfg.scope, num_classes, asym_map, crng)
    flags = y_noisy != y
    realized = np.array([flags[p].mean() if len(p) else 0.0 for p in parts])
    return NoiseScene(y, y_noisy, flags, noisy, types, rates, realized, notes=notes)


def _real_scene(
    y: np.ndarray, parts: list[np.ndarray], y_real: np.ndarray | None, known: np.ndarray | None
) -> NoiseScene:
    if y_real is None:
        raise ConfigError("noise.type 'real' needs a dataset with a noisy-label file (e.g. clothing1m)")
    known = np.ones(len(y), dtype=bool) if known is None else known.astype(bool)
    flags = (y_real != y) & known
    realized = np.array([flags[p][known[p]].mean() if known[p].any() else np.nan for p in parts])
    k = len(parts)
    # A client is noisy when its trusted samples show noise (an annotator who agrees with every audit is
    # clean); one without trusted samples has a NaN rate, and the client scores leave it out.
    noisy = np.nan_to_num(realized, nan=0.0) > 0
    return NoiseScene(
        y, y_real.copy(), flags, noisy, ["real"] * k, realized.copy(), realized,
        y_true_known=known,
        notes=["real noise: y_true is known only where a clean label exists"],
    )

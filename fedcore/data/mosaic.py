"""digits_mosaic: a multi-label CPU dataset with label-correlation drift by construction.

Each sample is a 16x16 image made of 2x2 tiles of scikit-learn's 8x8 digits; every tile
holds a digit or is blank, and the 10 labels mark which digits appear (1-4 per image).

Every mosaic belongs to a *pattern group* g (recorded in `RawDataset.groups`, so
`partition.kind: natural` makes each group one client). Group g has its own favoured
digit pairs; a mosaic of group g is, with probability `strength`, one of those pairs
(uniform) plus 0..max_extra uniform extra digits, and otherwise 1-4 uniform digits.
So each client sees its own co-occurrence pattern, while the global pattern is the
equal mixture of all groups. The test split follows the global pattern (groups in equal
shares) and uses digit images held out from the training mosaics.

The generative process is small enough to enumerate, so the true global correlation is
exact, not estimated: extras['true_corr'] (C, C), and per group extras['true_group_corr']
(G, C, C). data.params: n_train (4000), n_test (1000), groups (10), pairs_per_group (2),
strength (0.8), max_extra (2), seed (0: the dataset is fixed across experiment seeds).

Degraded tiles (off by default; both splits alike, labels unchanged): `occlude` (0.0) is the
probability that a digit tile loses a random half (top, bottom, left or right) to blank,
and `pixel_noise` (0.0) the std of Gaussian noise, in 0-255 grey levels, added to every
pixel. They make digits weakly visible, so that a model has to lean on co-occurrence, as in
real multi-label photos; they are drawn from their own random stream, so with both at 0 the
images are exactly those of the undegraded dataset.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from fedcore.config import DataConfig
from fedcore.data.datasets import RawDataset, register_dataset, stratified_split
from fedcore.data.vision import channel_stats
from fedcore.errors import ConfigError
from fedcore.stats.correlation import phi

NUM_DIGITS, TILES, TILE = 10, 4, 8
_SALT_SPEC, _SALT_DRAW, _SALT_DEGRADE = 0x3051, 0x3052, 0x3053
DEFAULTS = {"n_train": 4000, "n_test": 1000, "groups": 10, "pairs_per_group": 2, "strength": 0.8,
            "max_extra": 2, "seed": 0, "occlude": 0.0, "pixel_noise": 0.0}


@dataclass(frozen=True)
class MosaicSpec:
    pairs: np.ndarray  # (G, P, 2) favoured digit pairs of each pattern group
    strength: float  # probability that a mosaic is built around one of its group's pairs
    max_extra: int  # extra uniform digits beside a favoured pair: 0..max_extra, uniform

    @property
    def groups(self) -> int:
        return int(self.pairs.shape[0])


def make_spec(groups: int, pairs_per_group: int, strength: float, max_extra: int, seed: int) -> MosaicSpec:
    """Draw each group's favoured pairs: `pairs_per_group` disjoint pairs of distinct digits."""
    if groups < 1 or pairs_per_group < 1 or 2 * pairs_per_group > NUM_DIGITS:
        raise ConfigError("digits_mosaic: need groups >= 1 and 1 <= pairs_per_group <= 5 (data.params)")
    if not 0 <= max_extra <= TILES - 2 or not 0.0 <= strength <= 1.0:
        raise ConfigError("digits_mosaic: data.params.max_extra must be in 0..2 and strength in [0, 1]")
    rng = np.random.default_rng([seed, _SALT_SPEC])
    pairs = np.stack([np.sort(rng.permutation(NUM_DIGITS)[: 2 * pairs_per_group].reshape(-1, 2), axis=1)
                      for _ in range(groups)])
    return MosaicSpec(pairs=pairs, strength=float(strength), max_extra=int(max_extra))


def draw_tiles(spec: MosaicSpec, group: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Digits of each mosaic in tile order (n, 4); -1 marks a blank tile. group: (n,) pattern ids."""
    n = len(group)
    patterned = rng.random(n) < spec.strength
    which = rng.integers(0, spec.pairs.shape[1], n)
    count = np.where(patterned, 2 + rng.integers(0, spec.max_extra + 1, n), rng.integers(1, TILES + 1, n))
    digits = rng.integers(0, NUM_DIGITS, (n, TILES))
    digits[patterned, :2] = spec.pairs[group[patterned], which[patterned]]
    tiles = np.where(np.arange(TILES)[None, :] < count[:, None], digits, -1)
    # Random placement: the label set must not be readable from tile positions.
    order = rng.permuted(np.tile(np.arange(TILES), (n, 1)), axis=1)
    return np.take_along_axis(tiles, order, axis=1)


def tiles_to_labels(tiles: np.ndarray) -> np.ndarray:
    """(n, 4) digits (-1 blank) -> uint8 (n, 10) presence."""
    y = np.zeros((len(tiles), NUM_DIGITS), dtype=np.uint8)
    rows, cols = np.nonzero(tiles >= 0)
    y[rows, tiles[rows, cols]] = 1
    return y


def render(tiles: np.ndarray, pool_x: np.ndarray, pool_y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """uint8 (n, 1, 16, 16) images: each tile a random pool image of its digit, blank = 0.

    pool_x: uint8 (M, 8, 8) digit images with labels pool_y (M,).
    """
    src = np.full(tiles.shape, -1, dtype=np.int64)
    for d in range(NUM_DIGITS):
        where = tiles == d
        candidates = np.flatnonzero(pool_y == d)
        src[where] = candidates[rng.integers(0, len(candidates), int(where.sum()))]
    imgs = np.where((src >= 0)[..., None, None], pool_x[np.maximum(src, 0)], 0).astype(np.uint8)
    n = len(tiles)
    # tile t sits at row t // 2, column t % 2 of the 2x2 grid
    return imgs.reshape(n, 2, 2, TILE, TILE).transpose(0, 1, 3, 2, 4).reshape(n, 1, 2 * TILE, 2 * TILE)


def degrade(imgs: np.ndarray, tiles: np.ndarray, occlude: float, pixel_noise: float,
            rng: np.random.Generator) -> np.ndarray:
    """Blank a random half of each digit tile with probability `occlude`, then add Gaussian
    pixel noise of std `pixel_noise` (grey levels) everywhere. imgs: uint8 (n, 1, 16, 16)."""
    if occlude <= 0 and pixel_noise <= 0:
        return imgs
    out = imgs.astype(np.float64)
    n = len(tiles)
    hit = (tiles >= 0) & (rng.random(tiles.shape) < occlude)
    side = rng.integers(0, 4, tiles.shape)  # 0 top, 1 bottom, 2 left, 3 right half
    h = TILE // 2
    half = np.zeros((4, TILE, TILE), dtype=bool)
    half[0, :h] = half[1, h:] = True
    half[2, :, :h] = half[3, :, h:] = True
    for t in range(TILES):
        r, c = (t // 2) * TILE, (t % 2) * TILE
        rows = np.flatnonzero(hit[:, t])
        patch = out[rows, 0, r:r + TILE, c:c + TILE]
        patch[half[side[rows, t]]] = 0.0
        out[rows, 0, r:r + TILE, c:c + TILE] = patch
    if pixel_noise > 0:
        out += rng.normal(0.0, pixel_noise, out.shape)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8).reshape(n, 1, 2 * TILE, 2 * TILE)


def _presence_moments(prefix: tuple[int, ...], extra: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact E[y] (C,) and E[y y^T] (C, C) when the digits are `prefix` plus `extra` uniform digits."""
    combos = np.array(list(itertools.product(range(NUM_DIGITS), repeat=extra)), dtype=np.int64)
    combos = combos.reshape(NUM_DIGITS**extra, extra)  # extra = 0: one empty combination
    tiles = np.concatenate([np.tile(np.array(prefix, dtype=np.int64), (len(combos), 1)), combos], axis=1)
    y = tiles_to_labels(tiles).astype(np.float64)
    return y.mean(axis=0), y.T @ y / len(y)


def group_moments(spec: MosaicSpec) -> tuple[np.ndarray, np.ndarray]:
    """Exact label moments of each group: p (G, C) and joint (G, C, C), by enumeration."""
    rand = [_presence_moments((), k) for k in range(1, TILES + 1)]
    rand_p = np.mean([m[0] for m in rand], axis=0)
    rand_pp = np.mean([m[1] for m in rand], axis=0)
    ps, pps = [], []
    for g in range(spec.groups):
        pat = [_presence_moments(tuple(int(d) for d in pair), k)
               for pair in spec.pairs[g] for k in range(spec.max_extra + 1)]
        ps.append(spec.strength * np.mean([m[0] for m in pat], axis=0) + (1 - spec.strength) * rand_p)
        pps.append(spec.strength * np.mean([m[1] for m in pat], axis=0) + (1 - spec.strength) * rand_pp)
    return np.stack(ps), np.stack(pps)


@register_dataset("digits_mosaic", params=DEFAULTS, reads_root=False)
def load_digits_mosaic(cfg: DataConfig) -> RawDataset:
    """Multi-label 16x16 digit mosaics, one co-occurrence pattern per group (see module doc)."""
    from sklearn.datasets import load_digits  # lazy: scikit-learn adds ~2 s to start-up

    unknown = set(cfg.params) - set(DEFAULTS)
    if unknown:
        raise ConfigError(f"digits_mosaic: unknown data.params {sorted(unknown)}; valid: {sorted(DEFAULTS)}")
    p = {**DEFAULTS, **cfg.params}
    spec = make_spec(int(p["groups"]), int(p["pairs_per_group"]), float(p["strength"]), int(p["max_extra"]),
                     int(p["seed"]))
    bunch = load_digits()
    x = np.clip(np.rint(bunch.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
    y = bunch.target.astype(np.int64)
    # Test mosaics are drawn from digit images that no training mosaic uses.
    tr, te = stratified_split(y, cfg.test_fraction, seed=int(p["seed"]))
    rng = np.random.default_rng([int(p["seed"]), _SALT_DRAW])
    # Balanced group ids: each group gets the same share, so the union is the exact global mixture.
    g_train = np.arange(int(p["n_train"])) % spec.groups
    g_test = np.arange(int(p["n_test"])) % spec.groups
    t_train, t_test = draw_tiles(spec, g_train, rng), draw_tiles(spec, g_test, rng)
    x_train, x_test = render(t_train, x[tr], y[tr], rng), render(t_test, x[te], y[te], rng)
    occlude, pixel_noise = float(p["occlude"]), float(p["pixel_noise"])
    if not 0.0 <= occlude <= 1.0 or pixel_noise < 0:
        raise ConfigError("digits_mosaic: data.params.occlude must be in [0, 1] and pixel_noise >= 0")
    noise_rng = np.random.default_rng([int(p["seed"]), _SALT_DEGRADE])
    x_train = degrade(x_train, t_train, occlude, pixel_noise, noise_rng)
    x_test = degrade(x_test, t_test, occlude, pixel_noise, noise_rng)
    p_g, pp_g = group_moments(spec)
    mean, std = channel_stats(x_train)
    return RawDataset(
        name="digits_mosaic", x_train=x_train, y_train=tiles_to_labels(t_train), x_test=x_test,
        y_test=tiles_to_labels(t_test), num_classes=NUM_DIGITS, task="multi", mean=mean, std=std,
        groups=g_train, flip_ok=False,
        extras={
            "true_corr": phi(p_g.mean(axis=0), pp_g.mean(axis=0)),
            "true_group_corr": np.stack([phi(a, b) for a, b in zip(p_g, pp_g, strict=True)]),
            "group_pairs": spec.pairs, "strength": spec.strength, "max_extra": spec.max_extra,
            "occlude": occlude, "pixel_noise": pixel_noise,
        },
    )

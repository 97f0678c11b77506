"""scenes_mosaic: multi-label mosaics with shared co-occurrence scenes (spec fedharmony.md, v2 notes).

The first `digits_mosaic` had no consensus to find (random favoured pairs, no shared
structure). Here the label co-occurrence *is* shared: the 10 classes of the tile source
(`tiles`: scikit-learn `digits`, 8x8, or `fashion_mnist`, 28x28 block-averaged to
`tile_px`) are split by a seeded permutation into scene blocks of `block_sizes` labels
(default 3, 3 and 4). Each of the `groups` clients (one per group: `partition.kind:
natural`) differs in three ways:

- its scene mixture pi_k ~ Dir(alpha) over the blocks;
- a private label p_k (distinct across clients while groups <= 10), added to any of its
  images with probability `private_p` when a tile is free;
- optionally `unannotated` labels U_k (never its private label) that it never annotates.

An image of client k: scene s ~ pi_k; one anchor label of block s drawn uniformly, each
other label of the block present with probability `scene_p`; then the private label. Every
present label fills one tile (a random pool image of that class) at a random position of
the `grid` x `grid` mosaic; the other tiles are blank. A client's *annotated* labels (the
ones methods train on) are the present labels minus U_k; the clean ones are the truth, read
only by metrics and the data report. Clients hold `n_train / groups` mosaics each.

The test split is the equal mixture of the clients (an equal share of mosaics from each
client's process, every label annotated) rendered from tile images no training mosaic
uses. The process is enumerable, so the truth is exact: extras['true_corr'] (C, C) of the
mixture, 'true_group_corr' (G, C, C) per client, plus the hidden generative draws
('true_blocks', 'true_mixtures', 'true_private', 'true_unannotated'; names starting with
true_ never reach a method). data.params.seed fixes the draws (the experiment seed does not).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fedcore.config import DataConfig
from fedcore.data.datasets import RawDataset, load_dataset, register_dataset, stratified_split
from fedcore.data.vision import channel_stats
from fedcore.errors import ConfigError

NUM_LABELS = 10
_SALT_SPEC, _SALT_DRAW = 0x5C01, 0x5C02
DEFAULTS = {"tiles": "digits", "tile_px": None, "grid": 2, "n_train": 4000, "n_test": 2000, "groups": 10,
            "block_sizes": [3, 3, 4], "alpha": 0.3, "scene_p": 0.7, "private_p": 0.5, "unannotated": 0, "seed": 0}
_DEFAULT_PX = {"digits": 8, "fashion_mnist": 14}


@dataclass(frozen=True)
class ScenesSpec:
    blocks: list[np.ndarray]  # label ids of each scene block
    mixtures: np.ndarray  # (G, S) scene mixture of each client
    private: np.ndarray  # (G,) private label of each client
    unannotated: np.ndarray  # (G, C) bool: labels client g never annotates
    scene_p: float
    private_p: float
    tiles: int  # tiles per mosaic (grid * grid)


def make_spec(p: dict, num_labels: int = NUM_LABELS) -> ScenesSpec:
    """Draw the blocks, client mixtures, private and never-annotated labels from data.params `p`."""
    sizes = [int(b) for b in p["block_sizes"]]
    groups, tiles, unann = int(p["groups"]), int(p["grid"]) ** 2, int(p["unannotated"])
    if sum(sizes) > num_labels or min(sizes, default=0) < 1:
        raise ConfigError(f"scenes_mosaic: data.params.block_sizes must be positive and sum to <= {num_labels}")
    if max(sizes) > tiles:
        raise ConfigError(f"scenes_mosaic: a block of {max(sizes)} labels does not fit a {p['grid']}x{p['grid']} "
                          "grid; raise data.params.grid or shrink block_sizes")
    if groups < 1 or not 0 <= unann <= num_labels - 1 or float(p["alpha"]) <= 0:
        raise ConfigError("scenes_mosaic: need groups >= 1, 0 <= unannotated <= 9 and alpha > 0 (data.params)")
    for name in ("scene_p", "private_p"):
        if not 0.0 <= float(p[name]) <= 1.0:
            raise ConfigError(f"scenes_mosaic: data.params.{name} must be in [0, 1]")
    rng = np.random.default_rng([int(p["seed"]), _SALT_SPEC])
    perm = rng.permutation(num_labels)
    blocks = [np.sort(perm[a:a + s]) for a, s in zip(np.cumsum([0, *sizes[:-1]]), sizes, strict=True)]
    mixtures = rng.dirichlet(np.full(len(sizes), float(p["alpha"])), size=groups)
    private = rng.permutation(num_labels)[np.arange(groups) % num_labels]
    unannotated = np.zeros((groups, num_labels), dtype=bool)
    for g in range(groups):
        others = np.setdiff1d(np.arange(num_labels), [private[g]])
        unannotated[g, rng.choice(others, size=unann, replace=False)] = True
    return ScenesSpec(blocks, mixtures, private, unannotated, float(p["scene_p"]), float(p["private_p"]), tiles)


def draw_labels(spec: ScenesSpec, group: np.ndarray, rng: np.random.Generator,
                num_labels: int = NUM_LABELS) -> np.ndarray:
    """Clean presence (n, C) uint8 of mosaics drawn from each one's client process. group: (n,)."""
    n = len(group)
    u = rng.random((n, 3))  # scene, anchor, private draws
    cum = np.cumsum(spec.mixtures[group], axis=1)
    scene = np.minimum((u[:, :1] > cum).sum(axis=1), len(spec.blocks) - 1)
    other = rng.random((n, num_labels)) < spec.scene_p
    y = np.zeros((n, num_labels), dtype=np.uint8)
    for s, block in enumerate(spec.blocks):
        rows = np.flatnonzero(scene == s)
        anchor = block[np.minimum((u[rows, 1] * len(block)).astype(np.int64), len(block) - 1)]
        y[rows[:, None], block[None, :]] = other[rows[:, None], block[None, :]]
        y[rows, anchor] = 1
    # The private label takes a tile only when one is free (a full block already fills the grid).
    add = np.flatnonzero((y.sum(axis=1) < spec.tiles) & (u[:, 2] < spec.private_p))
    y[add, spec.private[group[add]]] = 1
    return y


def client_moments(spec: ScenesSpec, g: int, num_labels: int = NUM_LABELS) -> tuple[np.ndarray, np.ndarray]:
    """Exact clean label moments of client g: p (C,) and joint (C, C), by enumerating its process."""
    p, joint = np.zeros(num_labels), np.zeros((num_labels, num_labels))
    q, r, priv = spec.scene_p, spec.private_p, int(spec.private[g])
    for s, block in enumerate(spec.blocks):
        b = len(block)
        for k in range(1, b + 1):
            for subset in itertools.combinations(block.tolist(), k):
                # one anchor among the k present labels (k/b ways), the other k-1 kept, b-k dropped
                w = spec.mixtures[g, s] * (k / b) * q ** (k - 1) * (1 - q) ** (b - k)
                y = np.zeros(num_labels)
                y[list(subset)] = 1
                add = r if (k < spec.tiles and priv not in subset) else 0.0
                for prob, vec in ((1 - add, y), (add, np.maximum(y, np.eye(num_labels)[priv]))):
                    p += w * prob * vec
                    joint += w * prob * np.outer(vec, vec)
    return p, joint


def place(y: np.ndarray, tiles: int, rng: np.random.Generator) -> np.ndarray:
    """Label of each tile (n, tiles), -1 blank: the present labels of each row at random positions."""
    n = len(y)
    order = np.argsort(-y.astype(np.int8), axis=1, kind="stable")  # present labels first, in label order
    count = y.sum(axis=1)
    first = np.where(np.arange(tiles)[None, :] < count[:, None], order[:, :tiles], -1)
    return np.take_along_axis(first, rng.permuted(np.tile(np.arange(tiles), (n, 1)), axis=1), axis=1)


def render(tile_labels: np.ndarray, pool_x: np.ndarray, pool_y: np.ndarray, grid: int,
           rng: np.random.Generator) -> np.ndarray:
    """uint8 (n, 1, grid*t, grid*t) mosaics; tile i sits at row i // grid, column i % grid.

    tile_labels: (n, grid*grid), -1 blank. pool_x: uint8 (M, t, t) with classes pool_y (M,).
    """
    n, t = len(tile_labels), pool_x.shape[-1]
    src = np.full(tile_labels.shape, -1, dtype=np.int64)
    for c in np.unique(tile_labels[tile_labels >= 0]):
        where = tile_labels == c
        cand = np.flatnonzero(pool_y == c)
        src[where] = cand[rng.integers(0, len(cand), int(where.sum()))]
    imgs = np.where((src >= 0)[..., None, None], pool_x[np.maximum(src, 0)], 0).astype(np.uint8)
    return imgs.reshape(n, grid, grid, t, t).transpose(0, 1, 3, 2, 4).reshape(n, 1, grid * t, grid * t)


def shrink(x: np.ndarray, px: int) -> np.ndarray:
    """Block-average uint8 images (M, s, s) down to (M, px, px); px must divide s."""
    s = x.shape[-1]
    if s % px:
        raise ConfigError(f"scenes_mosaic: data.params.tile_px {px} must divide the tile source's {s} pixels")
    f = s // px
    return np.rint(x.reshape(len(x), px, f, px, f).mean(axis=(2, 4))).astype(np.uint8)


def tile_pools(cfg: DataConfig, p: dict) -> tuple[list[tuple[np.ndarray, np.ndarray]], list[str]]:
    """[train pool, test pool] of uint8 tile images (M, t, t) with their classes (never shared), and class names."""
    if p["tiles"] == "digits":
        from sklearn.datasets import load_digits  # lazy: scikit-learn adds ~2 s to start-up

        bunch = load_digits()
        x = np.clip(np.rint(bunch.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)
        y = bunch.target.astype(np.int64)
        tr, te = stratified_split(y, cfg.test_fraction, seed=int(p["seed"]))
        pools, names = [(x[tr], y[tr]), (x[te], y[te])], [str(d) for d in range(NUM_LABELS)]
    elif p["tiles"] == "fashion_mnist":
        # The one Fashion-MNIST loader, reading data.root (its official files).
        src = load_dataset(DataConfig(name="fashion_mnist", root=cfg.root, cache_dir=cfg.cache_dir))
        pools, names = [(src.x_train[:, 0], src.y_train), (src.x_test[:, 0], src.y_test)], src.class_names
    else:
        raise ConfigError(f"scenes_mosaic: data.params.tiles '{p['tiles']}' is unknown; use digits or fashion_mnist")
    # Fashion tiles are halved by default: 2x2 mosaics of 14x14 tiles cost what one MNIST image does.
    px = int(p["tile_px"] or _DEFAULT_PX[p["tiles"]])
    return [(shrink(x, px) if px != x.shape[-1] else x, y) for x, y in pools], names


def _phi(p: np.ndarray, joint: np.ndarray) -> np.ndarray:
    # A label a client never shows (p = 0) correlates with nothing: 0, not 0/0.
    sd = np.sqrt(np.clip(p * (1 - p), 0.0, None))
    den = np.outer(sd, sd)
    return np.divide(joint - np.outer(p, p), den, out=np.zeros_like(joint), where=den > 1e-12)


def file_tiles(defaults: dict) -> Callable[[DataConfig], bool]:
    """Whether a mosaic dataset with these param defaults reads data.root: Fashion-MNIST tiles
    come from its files, digit tiles from scikit-learn (see `tile_pools`)."""
    return lambda cfg: {**defaults, **cfg.params}["tiles"] != "digits"


@register_dataset("scenes_mosaic", reads_root=file_tiles(DEFAULTS))
def load_scenes_mosaic(cfg: DataConfig) -> RawDataset:
    """Multi-label mosaics of shared scene blocks, mixed per client by Dir(alpha) (see module doc)."""
    unknown = set(cfg.params) - set(DEFAULTS)
    if unknown:
        raise ConfigError(f"scenes_mosaic: unknown data.params {sorted(unknown)}; valid: {sorted(DEFAULTS)}")
    p = {**DEFAULTS, **cfg.params}
    spec = make_spec(p)
    [(x_tr, y_tr), (x_te, y_te)], names = tile_pools(cfg, p)
    groups, grid = int(p["groups"]), int(p["grid"])
    rng = np.random.default_rng([int(p["seed"]), _SALT_DRAW])
    # Balanced group ids: every client holds the same number of mosaics (one more for the first few).
    g_train, g_test = np.arange(int(p["n_train"])) % groups, np.arange(int(p["n_test"])) % groups
    y_train, y_test = draw_labels(spec, g_train, rng), draw_labels(spec, g_test, rng)
    x_train = render(place(y_train, spec.tiles, rng), x_tr, y_tr, grid, rng)
    x_test = render(place(y_test, spec.tiles, rng), x_te, y_te, grid, rng)
    moments = [client_moments(spec, g) for g in range(groups)]
    p_mix = np.mean([m[0] for m in moments], axis=0)
    j_mix = np.mean([m[1] for m in moments], axis=0)
    mean, std = channel_stats(x_train)
    return RawDataset(
        name="scenes_mosaic", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test,
        num_classes=NUM_LABELS, task="multi", class_names=list(names), mean=mean, std=std, groups=g_train,
        flip_ok=False,
        # What a client annotates: its present labels minus the ones it never annotates.
        y_train_noisy=(y_train * ~spec.unannotated[g_train]).astype(np.uint8),
        extras={
            "true_corr": _phi(p_mix, j_mix),
            "true_group_corr": np.stack([_phi(a, b) for a, b in moments]),
            "true_blocks": [b.tolist() for b in spec.blocks], "true_mixtures": spec.mixtures,
            "true_private": spec.private, "true_unannotated": spec.unannotated.astype(np.uint8),
            "tiles": p["tiles"], "grid": grid,
        },
    )

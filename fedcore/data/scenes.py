"""scenes_mosaic: multi-label mosaics with shared co-occurrence scenes (spec fedharmony.md).

`data.params.version` picks the generative process, one per reading of the spec's notes:
version 2 (the default) shows one scene per image and drifts mostly in the label marginals;
version 3 keeps every client's marginals equal and drifts in co-occurrence only. Both draw
tiles from the same source, place and render them the same way, and give the exact truth
(`stats.correlation.phi` of the enumerated process); they differ in their data.params
(`DEFAULTS[version]`).

Version 2. The 10 classes of the tile source (`tiles`: scikit-learn `digits`, 8x8, or
`fashion_mnist`, 28x28 block-averaged to `tile_px`) are split by a seeded permutation into
scene blocks of `block_sizes` labels (default 3, 3 and 4). Each of the `groups` clients (one per group: `partition.kind:
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

Version 3. Clients differ in label co-occurrence only:

- **Several scenes, or none.** The 10 classes of the tile source are split by a seeded
  permutation into scene blocks (`block_sizes`). Each scene is present in an image with
  probability `scene_q`, and each label of a present scene with probability `label_q`, so an
  image holds any number of scenes and labels, including none.
- **Matched marginals, drifting co-occurrence.** Every client has the same label marginal
  p_c = scene_q * label_q. What differs is co-occurrence: in every block, client k couples one
  pair of labels (a pair drawn per client) with a correlation of +-`rho` given the scene, and it
  couples one pair of scenes with +-`scene_rho`. The sign is the client's draw. A coupled pair of
  binary variables with equal marginals q keeps them: P(11) = q^2 + rho q (1 - q), clipped to the
  feasible range.
- **Context-only labels.** Each present label's tile is occluded (left blank) with probability
  `occlude_p`. Labels that overflow the `grid` x `grid` tiles are occluded too. An occluded label
  stays annotated, so only its co-occurring labels reveal it.
- **Lognormal client sizes.** Client g holds `min_size` + a share exp(size_sigma * z_g) of the
  rest of `n_train`. There are `groups` clients (`partition.kind: natural`; sample them with
  train.client_fraction).
- Optionally, each client never annotates `unannotated` labels.

The label distribution of each client is enumerated exactly over the 2^C label vectors, and
images are drawn from it. So the truth is exact: extras['true_corr'] is the phi of the pooled
(size-weighted) process, and the test split is drawn from that same pooled process, with every
label annotated and tiles no training mosaic uses. 'true_group_corr' gives each client's own
truth. Names starting with true_ never reach a method; the clean y_train is read only by metrics
and the data report.

The old dataset name `scenes_v3` still loads version 3, so configs and run dirs that name it
keep working (the dataset keeps that name).
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
from fedcore.stats.correlation import phi

NUM_LABELS = 10
VERSIONS = (2, 3)
# data.params of each version's process (`version` itself is not among them).
DEFAULTS = {
    2: {"tiles": "digits", "tile_px": None, "grid": 2, "n_train": 4000, "n_test": 2000, "groups": 10,
        "block_sizes": [3, 3, 4], "alpha": 0.3, "scene_p": 0.7, "private_p": 0.5, "unannotated": 0, "seed": 0},
    3: {"tiles": "fashion_mnist", "tile_px": None, "grid": 3, "n_train": 4000, "n_test": 2000, "groups": 100,
        "size_sigma": 1.0, "min_size": 8, "block_sizes": [3, 3, 4], "scene_q": 0.4, "label_q": 0.6,
        "rho": 0.9, "scene_rho": 0.9, "occlude_p": 0.25, "unannotated": 1, "seed": 0},
}
# (spec, draw) salts of each version's random streams: a version's data never changes with another's.
_SALTS = {2: (0x5C01, 0x5C02), 3: (0x5C31, 0x5C32)}
_DEFAULT_PX = {"digits": 8, "fashion_mnist": 14}


# -- version 2: one scene per image, Dir(alpha) mixtures, a private label per client ----------
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
    rng = np.random.default_rng([int(p["seed"]), _SALTS[2][0]])
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


# -- shared by both versions: tiles, placement, rendering --------------------------------------
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



# -- version 3: several scenes or none, matched marginals, coupled pairs, occlusion -----------
def coupled_pair(q: float, rho: float) -> np.ndarray:
    """(2, 2) joint of two Bernoulli(q) variables with correlation rho, clipped to the feasible range."""
    lo = max(-q / (1 - q), -(1 - q) / q)
    r = float(np.clip(rho, lo, 1.0))
    both = q * q + r * q * (1 - q)
    return np.array([[1 - 2 * q + both, q - both], [q - both, both]])


def pattern_probs(b: int, q: float, pair: tuple[int, int], rho: float) -> np.ndarray:
    """(2^b,) law of b Bernoulli(q) bits (bit i of the index = variable i), independent except `pair`, coupled."""
    bits = (np.arange(2 ** b)[:, None] >> np.arange(b)[None, :]) & 1
    prob = np.ones(2 ** b)
    for i in range(b):
        if i not in pair:
            prob *= np.where(bits[:, i] == 1, q, 1 - q)
    prob *= coupled_pair(q, rho)[bits[:, pair[0]], bits[:, pair[1]]]
    return prob


def client_law(blocks: list[np.ndarray], scene_q: float, label_q: float, scene_pair: tuple[int, int],
               scene_r: float, pairs: list[tuple[int, int]], rhos: list[float],
               num_labels: int = NUM_LABELS) -> tuple[np.ndarray, np.ndarray]:
    """Exact law of one client: (states (M, C) uint8, probabilities (M,)) over every label vector it can show."""
    s = len(blocks)
    scene_law = pattern_probs(s, scene_q, scene_pair, scene_r)  # over the 2^S scene-presence patterns
    per_block = []
    for block, pair, r in zip(blocks, pairs, rhos, strict=True):
        b = len(block)
        bits = ((np.arange(2 ** b)[:, None] >> np.arange(b)[None, :]) & 1).astype(np.uint8)
        per_block.append((bits, pattern_probs(b, label_q, pair, r)))
    out = np.zeros(2 ** num_labels)
    weights = 1 << np.arange(num_labels)
    for z in range(2 ** s):
        states, probs = np.zeros((1, num_labels), dtype=np.uint8), np.array([scene_law[z]])
        for i, (block, (bits, law)) in enumerate(zip(blocks, per_block, strict=True)):
            if not (z >> i) & 1:
                continue  # an absent scene shows none of its labels
            grown = np.repeat(states, len(law), axis=0)
            grown[:, block] = np.tile(bits, (len(states), 1))
            states, probs = grown, np.outer(probs, law).reshape(-1)
        np.add.at(out, states.astype(np.int64) @ weights, probs)
    codes = np.flatnonzero(out > 0)
    full = ((codes[:, None] >> np.arange(num_labels)[None, :]) & 1).astype(np.uint8)
    return full, out[codes]


def moments(states: np.ndarray, probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """p (C,) and joint (C, C) of a law over label vectors."""
    y = states.astype(np.float64)
    return probs @ y, (y * probs[:, None]).T @ y


def client_sizes(n: int, groups: int, sigma: float, min_size: int, rng: np.random.Generator) -> np.ndarray:
    """Lognormal shares of n over `groups` clients, each at least min_size; they sum to n."""
    if n < groups * min_size:
        raise ConfigError(f"scenes_mosaic (version 3): n_train {n} cannot give {groups} clients min_size "
                          f"{min_size} each")
    w = np.exp(sigma * rng.standard_normal(groups))
    rest = n - groups * min_size
    share = np.floor(rest * w / w.sum()).astype(np.int64)
    share[np.argsort(-w)[: rest - share.sum()]] += 1  # hand out the rounding remainder to the largest
    return min_size + share


def make_laws(p: dict, rng: np.random.Generator, num_labels: int = NUM_LABELS):
    """Blocks and each client's exact law [(states, probs)] from data.params `p`."""
    sizes = [int(b) for b in p["block_sizes"]]
    if sum(sizes) > num_labels or min(sizes, default=0) < 2 or len(sizes) < 2:
        raise ConfigError(f"scenes_mosaic (version 3): data.params.block_sizes needs >= 2 blocks of >= 2 labels "
                          f"summing to <= {num_labels}")
    for name in ("scene_q", "label_q"):
        if not 0.0 < float(p[name]) < 1.0:
            raise ConfigError(f"scenes_mosaic (version 3): data.params.{name} must be in (0, 1)")
    if not 0.0 <= float(p["occlude_p"]) <= 1.0 or not 0 <= int(p["unannotated"]) < num_labels:
        raise ConfigError("scenes_mosaic (version 3): need 0 <= occlude_p <= 1 and 0 <= unannotated < 10 (data.params)")
    perm = rng.permutation(num_labels)
    blocks = [np.sort(perm[a:a + s]) for a, s in zip(np.cumsum([0, *sizes[:-1]]), sizes, strict=True)]
    laws = []
    for _ in range(int(p["groups"])):
        pairs = [tuple(int(i) for i in rng.choice(len(b), 2, replace=False)) for b in blocks]
        rhos = [float(p["rho"]) * rng.choice([-1.0, 1.0]) for _ in blocks]
        scene_pair = tuple(int(i) for i in rng.choice(len(blocks), 2, replace=False))
        laws.append(client_law(blocks, float(p["scene_q"]), float(p["label_q"]), scene_pair,
                               float(p["scene_rho"]) * rng.choice([-1.0, 1.0]), pairs, rhos, num_labels))
    return blocks, laws


def visible(y: np.ndarray, occlude_p: float, tiles: int, rng: np.random.Generator) -> np.ndarray:
    """Labels that get a tile: present, not occluded, and at most `tiles` per image (the rest occluded at random)."""
    vis = (y == 1) & (rng.random(y.shape) >= occlude_p)
    over = np.flatnonzero(vis.sum(axis=1) > tiles)
    for i in over:
        on = np.flatnonzero(vis[i])
        vis[i, rng.choice(on, len(on) - tiles, replace=False)] = False
    return vis.astype(np.uint8)


# -- the loader --------------------------------------------------------------------------------
def _version_params(cfg: DataConfig, version: int | None = None) -> tuple[int, dict]:
    """(version, data.params over that version's defaults); `version` forces one (the old name)."""
    params = dict(cfg.params)
    if version is None:
        version = params.pop("version", 2)
    elif "version" in params:
        raise ConfigError(f"{cfg.name}: data.params.version is fixed by the name; use data.name: scenes_mosaic "
                          "to choose it")
    if version not in VERSIONS:
        raise ConfigError(f"scenes_mosaic: data.params.version {version!r} is unknown; use one of {list(VERSIONS)}")
    unknown = set(params) - set(DEFAULTS[version])
    if unknown:
        raise ConfigError(f"{cfg.name}: unknown data.params {sorted(unknown)} for version {version}; valid: "
                          f"{sorted(DEFAULTS[version])} and version")
    return version, {**DEFAULTS[version], **params}


def file_tiles(version: int | None = None) -> Callable[[DataConfig], bool]:
    """Whether a scenes config reads data.root: Fashion-MNIST tiles come from its files, digit
    tiles from scikit-learn (see `tile_pools`). A bad version reads nothing; loading says why."""
    def rule(cfg: DataConfig) -> bool:
        v = version if version is not None else cfg.params.get("version", 2)
        return {**DEFAULTS[v if v in VERSIONS else 2], **cfg.params}["tiles"] != "digits"

    return rule


@register_dataset("scenes_mosaic", reads_root=file_tiles())
def load_scenes_mosaic(cfg: DataConfig) -> RawDataset:
    """Multi-label mosaics of shared scene blocks, by data.params.version (see module doc)."""
    version, p = _version_params(cfg)
    return _load_v2(cfg, p) if version == 2 else _load_v3(cfg, p)


@register_dataset("scenes_v3", reads_root=file_tiles(3))
def load_scenes_v3(cfg: DataConfig) -> RawDataset:
    """The old name of scenes_mosaic version 3 (see module doc)."""
    return _load_v3(cfg, _version_params(cfg, version=3)[1])


def _load_v2(cfg: DataConfig, p: dict) -> RawDataset:

    spec = make_spec(p)
    [(x_tr, y_tr), (x_te, y_te)], names = tile_pools(cfg, p)
    groups, grid = int(p["groups"]), int(p["grid"])
    rng = np.random.default_rng([int(p["seed"]), _SALTS[2][1]])
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
        name=cfg.name, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test,
        num_classes=NUM_LABELS, task="multi", class_names=list(names), mean=mean, std=std, groups=g_train,
        flip_ok=False,
        # What a client annotates: its present labels minus the ones it never annotates.
        y_train_noisy=(y_train * ~spec.unannotated[g_train]).astype(np.uint8),
        extras={
            "true_corr": phi(p_mix, j_mix),
            "true_group_corr": np.stack([phi(a, b) for a, b in moments]),
            "true_blocks": [b.tolist() for b in spec.blocks], "true_mixtures": spec.mixtures,
            "true_private": spec.private, "true_unannotated": spec.unannotated.astype(np.uint8),
            "tiles": p["tiles"], "grid": grid,
        },
    )


def _load_v3(cfg: DataConfig, p: dict) -> RawDataset:

    groups, grid, tiles = int(p["groups"]), int(p["grid"]), int(p["grid"]) ** 2
    spec_rng, rng = (np.random.default_rng([int(p["seed"]), salt]) for salt in _SALTS[3])
    blocks, laws = make_laws(p, spec_rng)
    sizes = client_sizes(int(p["n_train"]), groups, float(p["size_sigma"]), int(p["min_size"]), spec_rng)
    unann = np.zeros((groups, NUM_LABELS), dtype=bool)
    for g in range(groups):
        unann[g, spec_rng.choice(NUM_LABELS, int(p["unannotated"]), replace=False)] = True
    g_train = np.repeat(np.arange(groups), sizes)
    g_test = np.sort(rng.choice(groups, int(p["n_test"]), p=sizes / sizes.sum()))  # the pooled process

    def draw(group: np.ndarray) -> np.ndarray:
        y = np.zeros((len(group), NUM_LABELS), dtype=np.uint8)
        for g in np.unique(group):
            rows = np.flatnonzero(group == g)
            states, probs = laws[g]
            y[rows] = states[rng.choice(len(probs), len(rows), p=probs / probs.sum())]
        return y

    [(x_tr, y_tr), (x_te, y_te)], names = tile_pools(cfg, p)
    y_train, y_test = draw(g_train), draw(g_test)
    occ = float(p["occlude_p"])
    x_train = render(place(visible(y_train, occ, tiles, rng), tiles, rng), x_tr, y_tr, grid, rng)
    x_test = render(place(visible(y_test, occ, tiles, rng), tiles, rng), x_te, y_te, grid, rng)
    mom = [moments(*law) for law in laws]
    w = sizes / sizes.sum()
    p_mix, j_mix = np.tensordot(w, [m[0] for m in mom], axes=1), np.tensordot(w, [m[1] for m in mom], axes=1)
    mean, std = channel_stats(x_train)
    return RawDataset(
        name=cfg.name, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, num_classes=NUM_LABELS,
        task="multi", class_names=list(names), mean=mean, std=std, groups=g_train, flip_ok=False,
        y_train_noisy=(y_train * ~unann[g_train]).astype(np.uint8),  # what each client annotates
        extras={
            "true_corr": phi(p_mix, j_mix), "true_group_corr": np.stack([phi(a, b) for a, b in mom]),
            "true_blocks": [b.tolist() for b in blocks], "true_unannotated": unann.astype(np.uint8),
            "tiles": p["tiles"], "grid": grid,
        },
    )

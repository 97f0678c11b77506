"""scenes_v3: multi-label mosaics whose clients differ in label co-occurrence only (spec fedharmony.md, v3 notes).

`scenes_mosaic` (v2) drifts mostly in the label marginals and shows one scene per image. Here:

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
"""

from __future__ import annotations

import numpy as np

from fedcore.config import DataConfig
from fedcore.data.datasets import RawDataset, register_dataset
from fedcore.data.scenes import _phi, file_tiles, place, render, tile_pools
from fedcore.data.vision import channel_stats
from fedcore.errors import ConfigError

NUM_LABELS = 10
_SALT_SPEC, _SALT_DRAW = 0x5C31, 0x5C32
DEFAULTS = {"tiles": "fashion_mnist", "tile_px": None, "grid": 3, "n_train": 4000, "n_test": 2000, "groups": 100,
            "size_sigma": 1.0, "min_size": 8, "block_sizes": [3, 3, 4], "scene_q": 0.4, "label_q": 0.6,
            "rho": 0.9, "scene_rho": 0.9, "occlude_p": 0.25, "unannotated": 1, "seed": 0}


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
        raise ConfigError(f"scenes_v3: n_train {n} cannot give {groups} clients min_size {min_size} each")
    w = np.exp(sigma * rng.standard_normal(groups))
    rest = n - groups * min_size
    share = np.floor(rest * w / w.sum()).astype(np.int64)
    share[np.argsort(-w)[: rest - share.sum()]] += 1  # hand out the rounding remainder to the largest
    return min_size + share


def make_laws(p: dict, rng: np.random.Generator, num_labels: int = NUM_LABELS):
    """Blocks and each client's exact law [(states, probs)] from data.params `p`."""
    sizes = [int(b) for b in p["block_sizes"]]
    if sum(sizes) > num_labels or min(sizes, default=0) < 2 or len(sizes) < 2:
        raise ConfigError(f"scenes_v3: data.params.block_sizes needs >= 2 blocks of >= 2 labels summing to <= "
                          f"{num_labels}")
    for name in ("scene_q", "label_q"):
        if not 0.0 < float(p[name]) < 1.0:
            raise ConfigError(f"scenes_v3: data.params.{name} must be in (0, 1)")
    if not 0.0 <= float(p["occlude_p"]) <= 1.0 or not 0 <= int(p["unannotated"]) < num_labels:
        raise ConfigError("scenes_v3: need 0 <= occlude_p <= 1 and 0 <= unannotated < 10 (data.params)")
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


@register_dataset("scenes_v3", reads_root=file_tiles(DEFAULTS))
def load_scenes_v3(cfg: DataConfig) -> RawDataset:
    """Mosaics whose clients share label marginals and differ in co-occurrence (see module doc)."""
    unknown = set(cfg.params) - set(DEFAULTS)
    if unknown:
        raise ConfigError(f"scenes_v3: unknown data.params {sorted(unknown)}; valid: {sorted(DEFAULTS)}")
    p = {**DEFAULTS, **cfg.params}
    groups, grid, tiles = int(p["groups"]), int(p["grid"]), int(p["grid"]) ** 2
    spec_rng, rng = np.random.default_rng([int(p["seed"]), _SALT_SPEC]), np.random.default_rng([int(p["seed"]),
                                                                                                _SALT_DRAW])
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
        name="scenes_v3", x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test, num_classes=NUM_LABELS,
        task="multi", class_names=list(names), mean=mean, std=std, groups=g_train, flip_ok=False,
        y_train_noisy=(y_train * ~unann[g_train]).astype(np.uint8),  # what each client annotates
        extras={
            "true_corr": _phi(p_mix, j_mix), "true_group_corr": np.stack([_phi(a, b) for a, b in mom]),
            "true_blocks": [b.tolist() for b in blocks], "true_unannotated": unann.astype(np.uint8),
            "tiles": p["tiles"], "grid": grid,
        },
    )

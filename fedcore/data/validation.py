"""Federated validation: hold out part of each client's samples, and optionally a clean server set.

A real federation validates on data it has: each client's held-out samples, with the same noisy
labels as the rest of its data. `split_validation` picks them (seeded, per client), and
`apply_split` removes them from the training arrays, so no method can train on them or read
their labels: the held-out samples leave `x_train`/`y_train` altogether and live in a
`ValidationSet` that only the evaluator reads. A clean server-side set (`server_clean`) is an
extra assumption (the server holds correctly labelled data); reports name it as such.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedcore.data.noise import NoiseScene
from fedcore.errors import ConfigError

STREAM = 0x56414C  # "VAL": a random stream of its own, so partition and noise draws do not move


@dataclass
class ValidationSet:
    """Held-out samples. x: uint8 (M, C, H, W); y: the clients' (noisy) labels; owner: client id
    of each sample (M,). Server part: x_server, y_server (true labels), possibly empty."""

    x: np.ndarray
    y: np.ndarray
    owner: np.ndarray
    x_server: np.ndarray
    y_server: np.ndarray

    @property
    def num_clients_val(self) -> int:
        return int(len(self.y))

    @property
    def num_server(self) -> int:
        return int(len(self.y_server))


@dataclass
class Split:
    """Indices into the full training arrays: each client's training and validation samples,
    and the server's clean samples."""

    train: list[np.ndarray]
    val: list[np.ndarray]
    server: np.ndarray


def held_out_count(n: int, fraction: float) -> int:
    """Samples a client of size n holds out: round(fraction * n), at least 1 when fraction > 0 and
    n >= 2, and never all of them (a client keeps one sample to train on)."""
    if fraction <= 0 or n < 2:
        return 0
    return int(min(n - 1, max(1, np.floor(fraction * n + 0.5))))


def split_validation(parts: list[np.ndarray], fraction: float, server_clean: int, seed: int) -> Split:
    """Per client, a uniformly drawn `held_out_count` of its samples; then `server_clean` samples drawn
    uniformly from what the clients keep (each client keeps at least one)."""
    rng = np.random.default_rng([seed, STREAM])
    train, val = [], []
    for p in parts:
        p = np.asarray(p, dtype=np.int64)
        perm = rng.permutation(len(p))
        m = held_out_count(len(p), fraction)
        val.append(np.sort(p[perm[:m]]))
        train.append(np.sort(p[perm[m:]]))
    server = np.empty(0, dtype=np.int64)
    if server_clean:
        # A client's last sample is never taken: candidates are all but one of each client's samples.
        spare = np.concatenate([t[1:] for t in train]) if train else np.empty(0, np.int64)
        if server_clean > len(spare):
            raise ConfigError(f"data.validation.server_clean ({server_clean}) exceeds the {len(spare)} training "
                              "samples the clients can spare; lower it")
        server = np.sort(rng.choice(spare, size=server_clean, replace=False))
        train = [np.setdiff1d(t, server, assume_unique=True) for t in train]
    return Split(train=train, val=val, server=server)


def apply_split(x: np.ndarray, scene: NoiseScene, split: Split) -> tuple[np.ndarray, NoiseScene, list[np.ndarray],
                                                                        ValidationSet]:
    """Remove the held-out samples from the training arrays. Returns the compacted inputs, the scene
    over the remaining samples (single-label clients' realized rates recomputed over what they train
    on), the client index arrays into the compacted arrays, and the validation set."""
    n = len(scene.y_noisy)
    out = np.zeros(n, dtype=bool)
    val_all = np.concatenate(split.val) if split.val else np.empty(0, np.int64)
    out[val_all] = True
    out[split.server] = True
    keep = ~out
    new_pos = np.cumsum(keep) - 1  # old index -> position among the kept samples
    parts = [new_pos[t] for t in split.train]
    owner = np.concatenate([np.full(len(v), c, dtype=np.int64) for c, v in enumerate(split.val)]) \
        if split.val else np.empty(0, np.int64)
    vset = ValidationSet(x=x[val_all], y=scene.y_noisy[val_all], owner=owner,
                         x_server=x[split.server], y_server=scene.y_true[split.server])
    noisy = scene.is_noisy_sample[keep]
    realized = scene.realized_rate
    if noisy.ndim == 1:
        realized = np.array([float(noisy[p].mean()) if len(p) else np.nan for p in parts])
    kept = NoiseScene(
        y_true=scene.y_true[keep], y_noisy=scene.y_noisy[keep], is_noisy_sample=noisy,
        is_noisy_client=scene.is_noisy_client, noise_type=scene.noise_type, target_rate=scene.target_rate,
        realized_rate=realized, y_true_known=None if scene.y_true_known is None else scene.y_true_known[keep],
        notes=list(scene.notes),
    )
    return x[keep], kept, parts, vset

"""Client sampling: a fraction per round, after warm-up rounds that visit every client once."""

from __future__ import annotations

import numpy as np

_SALT = 0x5A3F


class ClientSampler:
    """Deterministic in (seed, round); never touches global RNG state.

    During the first `warmup_rounds` rounds, one permutation of all clients is split into
    `warmup_rounds` consecutive chunks, so every client is visited exactly once.
    """

    def __init__(self, num_clients: int, fraction: float, seed: int, warmup_rounds: int = 0) -> None:
        self.num_clients = num_clients
        self.per_round = max(1, int(round(fraction * num_clients)))
        self.seed = seed
        self.warmup_rounds = min(warmup_rounds, num_clients)

    def sample(self, rnd: int) -> list[int]:
        if rnd < self.warmup_rounds:
            perm = np.random.default_rng([self.seed, _SALT]).permutation(self.num_clients)
            return sorted(int(c) for c in np.array_split(perm, self.warmup_rounds)[rnd])
        if self.per_round >= self.num_clients:
            return list(range(self.num_clients))
        rng = np.random.default_rng([self.seed, _SALT, rnd])
        return sorted(int(c) for c in rng.choice(self.num_clients, size=self.per_round, replace=False))


def client_rngs(seed: int, rnd: int, cid: int) -> tuple[np.random.Generator, torch.Generator]:  # noqa: F821
    """The numpy and torch generators of client `cid` in round `rnd`."""
    import torch

    rng = np.random.default_rng([seed, rnd, cid])
    gen = torch.Generator().manual_seed(int(rng.integers(0, 2**62)))
    return rng, gen

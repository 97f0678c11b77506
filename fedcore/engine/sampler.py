"""Client sampling: a fraction per round, after warm-up rounds that sweep the clients in passes."""

from __future__ import annotations

import numpy as np
import torch

_SALT = 0x5A3F


class ClientSampler:
    """Deterministic in (seed, round); never touches global RNG state.

    Every round draws `per_round = round(fraction * num_clients)` clients (at least one).
    During the first `warmup_rounds` rounds they are drawn without replacement *across*
    rounds: the clients are swept in passes, each a fresh permutation, so every client is
    visited once per pass. A round that straddles two passes takes the rest of the old pass
    and tops up from the next one (never the same client twice in a round), so the cohort
    keeps its size; a client deferred that way comes first in the following round. After the
    warm-up each round draws `per_round` clients uniformly without replacement.
    """

    def __init__(self, num_clients: int, fraction: float, seed: int, warmup_rounds: int = 0) -> None:
        self.num_clients = num_clients
        self.per_round = max(1, int(round(fraction * num_clients)))
        self.seed = seed
        self.warmup_rounds = warmup_rounds
        self._sweep: list[list[int]] = []  # warm-up cohorts computed so far, round by round
        self._queue: list[int] = []
        self._passes = 0

    @property
    def rounds_per_pass(self) -> int:
        """Rounds one pass over every client takes: ceil(num_clients / per_round)."""
        return -(-self.num_clients // self.per_round)

    def sample(self, rnd: int) -> list[int]:
        if rnd < self.warmup_rounds:
            while len(self._sweep) <= rnd:
                self._sweep.append(self._next_sweep_cohort())
            return list(self._sweep[rnd])
        if self.per_round >= self.num_clients:
            return list(range(self.num_clients))
        rng = np.random.default_rng([self.seed, _SALT, rnd])
        return sorted(int(c) for c in rng.choice(self.num_clients, size=self.per_round, replace=False))

    def _next_sweep_cohort(self) -> list[int]:
        m = min(self.per_round, self.num_clients)
        while len(set(self._queue)) < m:
            perm = np.random.default_rng([self.seed, _SALT, 0x9A55, self._passes]).permutation(self.num_clients)
            self._queue.extend(int(c) for c in perm)
            self._passes += 1
        chosen: list[int] = []
        rest: list[int] = []
        for c in self._queue:
            (chosen if len(chosen) < m and c not in chosen else rest).append(c)
        self._queue = rest
        return sorted(chosen)


def client_rngs(seed: int, rnd: int, cid: int) -> tuple[np.random.Generator, torch.Generator]:
    """The numpy and torch generators of client `cid` in round `rnd`."""
    rng = np.random.default_rng([seed, rnd, cid])
    gen = torch.Generator().manual_seed(int(rng.integers(0, 2**62)))
    return rng, gen

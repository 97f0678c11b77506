"""A chunk's batches drawn before its first step, for programs whose batches need no host hook.

When a program has no `inputs` hook, nothing but the shuffle draws from a client's
generator during local training, so every batch of the round can be drawn up front: each
client's shuffles in `train_local`'s order, laid out once as a (steps, K, B) table of
positions into the stack's fields, with the padding mask beside it. The per-step work is
then a slice, where drawing, padding and gathering step by step cost more than the stacked
matmuls of a small model (docs/performance.md, the profile). Inputs are gathered and
normalized a block of steps at a time, so memory stays O(block), not O(round).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import islice

import torch

from fedcore.engine.store import TensorStore

Tensor = torch.Tensor
BLOCK_BYTES = 16 << 20  # inputs gathered at once: a few steps of a large model, the round of a small one


def schedule(its: Sequence[Iterator[Tensor]], steps: Sequence[int], offsets: Sequence[int], batch_size: int,
             device: torch.device) -> tuple[Tensor, Tensor, list[int]]:
    """Every client's batches -> positions (S, K, B) into the stacked fields, mask (S, K, B), and
    each step's width: its longest batch, to which the step's rows are padded (as step by step).

    its: each client's batch positions (local, in draw order); steps: how many each yields
    (entries of a client past its last step are never read); offsets: where each client's
    rows start in the stacked fields. A short batch is padded with the client's own first
    row, masked out, as the step-by-step path pads. A handful of tensor ops for the whole
    chunk: one scatter of all positions, whatever the number of batches.
    """
    k, s_max, b = len(its), max(steps, default=0), batch_size
    drawn: list[Tensor] = []
    slot, base = [], []  # per batch: its (step, row) cell, its client's offset
    for r, (it, n) in enumerate(zip(its, steps, strict=True)):
        got = list(islice(it, n))
        if len(got) < n:
            raise RuntimeError(f"a client ran out of batches after {len(got)} of its predicted {n} steps")
        if next(it, None) is not None:
            raise RuntimeError(f"a client has more batches than its predicted {n}")
        drawn += got
        slot += [j * k + r for j in range(n)]
        base += [offsets[r]] * n
    pos = torch.tensor(offsets, device=device).repeat(s_max, 1)[..., None].repeat(1, 1, b)
    lens = torch.zeros(s_max * k, dtype=torch.long, device=device)
    if drawn:
        sizes = [len(t) for t in drawn]
        n_b, total = torch.tensor(sizes, device=device), sum(sizes)  # sizes from the host: no device sync
        cells = torch.tensor(slot, device=device)
        lens[cells] = n_b
        first = torch.cumsum(n_b, 0) - n_b  # where each batch starts in the concatenation

        def each(t: Tensor) -> Tensor:  # a per-batch value for each of the batch's samples
            return torch.repeat_interleave(t, n_b, output_size=total)

        col = torch.arange(total, device=device) - each(first)
        pos.view(-1)[each(cells) * b + col] = torch.cat(drawn) + each(torch.tensor(base, device=device))
    mask = torch.arange(b, device=device) < lens.view(s_max, k, 1)
    widths = [0] * s_max  # from the host's sizes: no device sync
    for cell, size in zip(slot, (len(t) for t in drawn), strict=True):
        widths[cell // k] = max(widths[cell // k], size)
    return pos, mask, widths


class Drawn:
    """Per-step batches of a chunk from its `schedule`: fields (k, b, ...) and weights (k, b), b the
    step's width (a chunk of clients smaller than the batch size computes on no padding)."""

    def __init__(self, fields: dict[str, Tensor], store: TensorStore, its: Sequence[Iterator[Tensor]],
                 steps: Sequence[int], offsets: Sequence[int], batch_size: int, dtype: torch.dtype,
                 device: torch.device) -> None:
        self.pos, mask, self.widths = schedule(its, steps, offsets, batch_size, device)
        self.w = mask.to(dtype)
        self.fields, self.store = fields, store
        self.rows = [sum(1 for n in steps if n > s) for s in range(len(self.pos))]  # rows training at step s
        self.sample_bytes = store.x[0].numel() * torch.finfo(dtype).bits // 8
        self.lo = self.hi = 0
        self.starts: list[int] = []
        self.cache: dict[str, Tensor] = {}

    def batch(self, s: int, k: int) -> tuple[dict[str, Tensor], Tensor]:
        """Step s's fields for its k training rows (those of `steps`)."""
        if k != self.rows[s]:
            raise ValueError(f"step {s} trains {self.rows[s]} rows, not {k}")
        if not self.lo <= s < self.hi:
            self._gather(s)
        a, b = self.starts[s - self.lo], self.widths[s]
        return {name: v[a:a + k * b].view(k, b, *v.shape[1:]) for name, v in self.cache.items()}, self.w[s, :k, :b]

    def _gather(self, s: int) -> None:
        """Steps [s, hi) within BLOCK_BYTES of inputs: one index op per field and one normalization,
        over the rows each step trains only."""
        hi, size = s, 0
        def nbytes(t: int) -> int:
            return self.rows[t] * self.widths[t] * self.sample_bytes

        while hi < len(self.pos) and (hi == s or size + nbytes(hi) <= BLOCK_BYTES):
            size += nbytes(hi)
            hi += 1
        parts = [self.pos[t, : self.rows[t], : self.widths[t]].reshape(-1) for t in range(s, hi)]
        self.lo, self.hi = s, hi
        self.starts = [0]
        for t in parts[:-1]:
            self.starts.append(self.starts[-1] + len(t))
        g = torch.cat(parts)
        self.cache = {name: v[g] for name, v in self.fields.items() if name != "__idx"}
        if "__idx" in self.fields:
            self.cache["x"] = self.store.get(self.fields["__idx"][g]).view(len(g), *self.store.in_shape)

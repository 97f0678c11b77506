"""One tensor store on the device; clients are index views into it.

No per-client DataLoader and no per-client copy of the data: a client's batch is an
index_select on the shared uint8 tensor, converted to float and normalized on the
device. Per-client persistent state lives in `ClientStateStore`.

A method's client state is a dataclass of its own (typed: a misspelled field fails at once).
The store keeps it as the plain dict of its fields (`plain_state`), so a checkpoint holds only
tensors, arrays, numbers and plain containers (what `torch.load(weights_only=True)` rebuilds),
and the method rebuilds its dataclass from that dict at every visit (`typed_state`), after a
resume or not, so resuming takes the same path as any other round.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from fedcore.errors import ArtifactError

S = TypeVar("S")


class TensorStore:
    """uint8 images (N, C, H, W) on the device plus per-channel normalization."""

    def __init__(self, x: torch.Tensor, mean: Sequence[float], std: Sequence[float], device: torch.device) -> None:
        self.x = x.to(device)
        self.device = device
        c = x.shape[1]
        self.mean = torch.tensor(list(mean) * (c // len(mean)), device=device).view(1, c, 1, 1)
        self.std = torch.tensor(list(std) * (c // len(std)), device=device).view(1, c, 1, 1)

    def raw(self, idx: torch.Tensor) -> torch.Tensor:
        """Float images in [0, 1] for global indices idx (B,) -> (B, C, H, W)."""
        return self.x.index_select(0, idx).float().div_(255.0)

    def normalize(self, x01: torch.Tensor) -> torch.Tensor:
        return (x01 - self.mean) / self.std

    def get(self, idx: torch.Tensor) -> torch.Tensor:
        # in place on raw's fresh tensor: normalize's two temporaries cost more than the
        # arithmetic on a block of steps (same ops, same values)
        return self.raw(idx).sub_(self.mean).div_(self.std)

    @property
    def in_shape(self) -> tuple[int, int, int]:
        return tuple(self.x.shape[1:])  # type: ignore[return-value]


class ClientData:
    """A client's view: positions 0..n-1 map to global indices into the store.

    labels: the client's working labels (device tensor), in local order.
    """

    def __init__(self, cid: int, store: TensorStore, indices: np.ndarray, labels: torch.Tensor) -> None:
        self.cid = cid
        self.store = store
        self.indices = torch.as_tensor(np.asarray(indices, dtype=np.int64), device=store.device)
        self.labels = labels.to(store.device)
        self.n = int(len(indices))

    def __len__(self) -> int:
        return self.n

    def x(self, pos: torch.Tensor | None = None) -> torch.Tensor:
        """Normalized inputs for local positions (all when pos is None)."""
        return self.store.get(self.indices if pos is None else self.indices[pos])

    def x01(self, pos: torch.Tensor | None = None) -> torch.Tensor:
        """Inputs in [0, 1] (for augmentation before normalizing)."""
        return self.store.raw(self.indices if pos is None else self.indices[pos])

    def batches(
        self, batch_size: int, gen: torch.Generator, epochs: int = 1, steps: int | None = None
    ) -> Iterator[torch.Tensor]:
        """Shuffled local positions, `epochs` passes or exactly `steps` batches."""
        if self.n == 0:  # partitions refuse empty clients; should one appear, `steps` would loop forever
            return
        done = 0
        while True:
            perm = torch.randperm(self.n, generator=gen).to(self.store.device)
            for start in range(0, self.n, batch_size):
                yield perm[start:start + batch_size]
                done += 1
                if steps is not None and done >= steps:
                    return
            if steps is None:
                epochs -= 1
                if epochs <= 0:
                    return

    def eval_batches(self, batch_size: int = 1024) -> Iterator[torch.Tensor]:
        """Positions in order, for scoring every local sample."""
        for start in range(0, self.n, batch_size):
            yield torch.arange(start, min(start + batch_size, self.n), device=self.store.device)


class ClientStateStore:
    """Per-client persistent state, kept across rounds and saved in checkpoints."""

    def __init__(self, num_clients: int) -> None:
        self._states: list[dict[str, Any]] = [{} for _ in range(num_clients)]

    def get(self, cid: int) -> dict[str, Any]:
        return self._states[cid]

    def put(self, cid: int, state: dict[str, Any]) -> None:
        self._states[cid] = state

    def state_dict(self) -> list[dict[str, Any]]:
        return self._states

    def load_state_dict(self, states: list[dict[str, Any]]) -> None:
        self._states = list(states)


def plain_state(state: Any) -> Any:
    """A dataclass (and any dataclass nested in its fields, dicts, lists or tuples) as plain dicts
    of its fields; anything else as is. No value is copied: tensors and arrays are shared."""
    if dataclasses.is_dataclass(state) and not isinstance(state, type):
        return {f.name: plain_state(getattr(state, f.name)) for f in dataclasses.fields(state)}
    if isinstance(state, dict):
        return {k: plain_state(v) for k, v in state.items()}
    if type(state) in (list, tuple):  # exactly: a namedtuple is not rebuilt from one iterable
        return type(state)(plain_state(v) for v in state)
    return state


def typed_state(cls: type[S], data: Any) -> S:
    """`cls` (a dataclass) from the plain dict `plain_state` made of one (an empty dict: a first
    visit, every field at its default). A field whose type is a dataclass (or one or None) is
    rebuilt from its dict too. A key `cls` does not have is refused: the state was written by
    another version of the method, and dropping the key would lose it silently."""
    if isinstance(data, cls):
        return data
    nested = _nested_fields(cls)
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ArtifactError(f"saved state has fields {unknown} that {cls.__name__} does not know; it was "
                            "written by another fedcore version: resume with that version or start afresh")
    return cls(**{k: typed_state(nested[k], v) if k in nested and isinstance(v, dict) else v
                  for k, v in data.items()})


@functools.cache
def _nested_fields(cls: type) -> dict[str, type]:
    """Field name -> dataclass type, for the fields of `cls` annotated with a dataclass (or X | None)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        found = [a for a in args if dataclasses.is_dataclass(a)]
        if found:
            out[f.name] = found[0]
    return out

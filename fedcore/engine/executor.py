"""Executors run the clients of a round: sequential here, batched in `engine.batched`;
`engine.distributed` shards a round over ranks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    name: str

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """fn over every task; results in task order."""

    def run_clients(self, method: Any, tasks: Sequence[Any]) -> list[Any]:
        """A round's local training: one update per task, in task order."""

    def agree(self, params: dict[str, torch.Tensor], rnd: int) -> None:
        """Called after each server step; a multi-process executor checks its ranks agree."""


class SequentialExecutor:
    """Runs client updates one after another on the run's device.

    Sequential on purpose: clients share one worker model whose parameters are loaded
    in place, so there is no per-client model copy.
    """

    name = "sequential"

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        return [fn(t) for t in tasks]

    def run_clients(self, method: Any, tasks: Sequence[Any]) -> list[Any]:
        """Local training of a round's cohort: one `method.client_update(task)` per client."""
        return self.map(method.client_update, tasks)

    def agree(self, params: dict[str, torch.Tensor], rnd: int) -> None:
        return None

"""Executors run the clients of a round: sequential here; `engine.distributed` shards over ranks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

import torch

T = TypeVar("T")
R = TypeVar("R")


class Executor(Protocol):
    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        """fn over every task; results in task order."""

    def agree(self, params: dict[str, torch.Tensor], rnd: int) -> None:
        """Called after each server step; a multi-process executor checks its ranks agree."""


class SequentialExecutor:
    """Runs client updates one after another on the run's device.

    Sequential on purpose: clients share one worker model whose parameters are loaded
    in place, so there is no per-client model copy.
    """

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        return [fn(t) for t in tasks]

    def agree(self, params: dict[str, torch.Tensor], rnd: int) -> None:
        return None

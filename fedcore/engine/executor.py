"""Executors run the clients of a round. Sequential today; a batched executor can replace it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class SequentialExecutor:
    """Runs client updates one after another on the run's device.

    Sequential on purpose: clients share one worker model whose parameters are loaded
    in place, so there is no per-client model copy.
    """

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        return [fn(t) for t in tasks]

"""Executors run the clients of a round: sequential here, batched in `engine.batched`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


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

"""The time a grid has left, from what its finished jobs took.

A grid mixes rows whose runs take 30 seconds (FedAvg on an MLP) with rows whose runs take six
minutes (FL-DivideMix's twin networks): spreading the elapsed time evenly over the work done
says "18 minutes left" when the slow rows are still to come. So each row keeps its own pace
(seconds per progress unit, a run being one unit and a tune its trials), measured on its
finished jobs; a row with none finished yet borrows the pace of the whole grid so far.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping


class TimeLeft:
    """costs: job -> progress units still to do (a finished job counts 0); workers: jobs at once."""

    def __init__(self, costs: Mapping[Hashable, float], row: Mapping[Hashable, str], workers: int = 1) -> None:
        self.pending = {j: c for j, c in costs.items() if c > 0}
        self.row = row
        self.workers = max(workers, 1)
        self.seconds: dict[str, float] = {}
        self.units: dict[str, float] = {}

    def finish(self, job: Hashable, seconds: float) -> None:
        """A job ended after `seconds` of its own (not the grid's) wall time."""
        units = self.pending.pop(job, 0.0)
        if units > 0 and seconds > 0:
            r = self.row[job]
            self.seconds[r] = self.seconds.get(r, 0.0) + seconds
            self.units[r] = self.units.get(r, 0.0) + units

    def left(self) -> float | None:
        """Seconds the pending jobs still need, spread over the workers; None before any pace is known."""
        if not self.units:
            return None
        overall = sum(self.seconds.values()) / sum(self.units.values())
        pace = {r: self.seconds[r] / self.units[r] for r in self.units}
        need = sum(c * pace.get(self.row[j], overall) for j, c in self.pending.items())
        return need / self.workers

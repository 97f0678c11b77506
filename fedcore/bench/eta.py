"""The time a grid has left, from what its finished jobs took.

A grid mixes rows whose runs take 30 seconds (FedAvg on an MLP) with rows whose runs take six
minutes (FL-DivideMix's twin networks): spreading the elapsed time evenly over the work done
says "18 minutes left" when the slow rows are still to come. So each row keeps its own pace
(seconds per progress unit, a run being one unit and a tune its trials), measured on its
finished jobs; a row with none finished yet borrows the pace of the whole grid so far.

A resumed grid keeps the pace of the jobs an earlier invocation finished: each finished job leaves
its seconds in a small file beside its dir (`save_time`), read back when the grid starts again.
Without them a resumed grid paced everything on its first job, "12 hours left" for 90 minutes' work.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any


class TimeLeft:
    """costs: job -> progress units still to do (a finished job counts 0); workers: jobs at once."""

    def __init__(self, costs: Mapping[Hashable, float], row: Mapping[Hashable, str], workers: int = 1) -> None:
        self.pending = {j: c for j, c in costs.items() if c > 0}
        self.row = row
        self.workers = max(workers, 1)
        self.seconds: dict[str, float] = {}
        self.units: dict[str, float] = {}

    def add_past(self, row: str, seconds: float, units: float) -> None:
        """A job of `row` that an earlier invocation finished: `units` of work in `seconds`."""
        if units > 0 and seconds > 0:
            self.seconds[row] = self.seconds.get(row, 0.0) + seconds
            self.units[row] = self.units.get(row, 0.0) + units

    def finish(self, job: Hashable, seconds: float) -> None:
        """A job ended after `seconds` of its own (not the grid's) wall time."""
        self.add_past(self.row[job], seconds, self.pending.pop(job, 0.0))

    def left(self) -> float | None:
        """Seconds the pending jobs still need, spread over the workers; None before any pace is known."""
        if not self.units:
            return None
        overall = sum(self.seconds.values()) / sum(self.units.values())
        pace = {r: self.seconds[r] / self.units[r] for r in self.units}
        need = sum(c * pace.get(self.row[j], overall) for j, c in self.pending.items())
        return need / self.workers


def time_file(out: Path) -> Path:
    """Where a finished job's seconds are kept: beside its dir, as its log is."""
    return out.parent / f"{out.name}.time.json"


def save_time(out: Path, seconds: float, units: float) -> None:
    from fedcore.io import atomic_write_bytes

    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(time_file(out), json.dumps({"seconds": round(seconds, 1), "units": units}).encode())


def load_time(out: Path) -> tuple[float, float] | None:
    """(seconds, units) an earlier invocation saved for this job; None when absent or unreadable (a
    missing pace only makes the estimate coarser)."""
    try:
        data = json.loads(time_file(out).read_text())
        return float(data["seconds"]), float(data["units"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def grid_eta(jobs: Sequence[Any], workers: int = 1) -> tuple[dict[Any, float], TimeLeft]:
    """(progress units each job still needs, a TimeLeft already paced on the finished jobs' saved times)
    for a grid's jobs (`fedcore.bench.plan.Job`)."""
    from fedcore.bench.plan import is_done

    costs = {j: 0 if is_done(j) else j.cost for j in jobs}
    eta = TimeLeft(costs, {j: j.row for j in jobs}, workers)
    for j in jobs:
        if costs[j] == 0 and (past := load_time(j.out)) is not None:
            eta.add_past(j.row, *past)
    return costs, eta

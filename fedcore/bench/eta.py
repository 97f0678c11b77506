"""The time a grid has left, from what its finished jobs took.

A grid mixes rows whose runs take 30 seconds (FedAvg on an MLP) with rows whose runs take six
minutes (FL-DivideMix's twin networks): spreading the elapsed time evenly over the work done
says "18 minutes left" when the slow rows are still to come. So each row keeps its own pace
(seconds per progress unit, a run being one unit and a tune its trials), measured on its
finished jobs; a row with none finished yet borrows the pace of the whole grid so far.

A resumed grid keeps the pace of the jobs an earlier invocation finished: each finished job leaves
its seconds in a small file beside its dir (`save_time`), read back when the grid starts again.
Without them a resumed grid paced everything on its first job, "12 hours left" for 90 minutes' work.

`grid_progress` is `fedcore bench`'s bar (or, off a terminal, its lines) over the grid, with the time left.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from fedcore.bench.plan import is_done
from fedcore.io import atomic_write_bytes
from fedcore.methods.registry import build_method
from fedcore.registries import load_config


class TimeLeft:
    """costs: job -> progress units still to do (a finished job counts 0); workers: jobs at once;
    stated: job -> seconds a unit of it takes by a stated cost (`stated_pace`), the estimate before
    any job of the grid has been timed."""

    def __init__(self, costs: Mapping[Hashable, float], row: Mapping[Hashable, str], workers: int = 1,
                 stated: Mapping[Hashable, float] | None = None) -> None:
        self.pending = {j: c for j, c in costs.items() if c > 0}
        self.row = row
        self.workers = max(workers, 1)
        self.stated = dict(stated or {})
        self.seconds: dict[str, float] = {}
        self.units: dict[str, float] = {}

    @property
    def measured(self) -> bool:
        """Whether left() is paced on timed jobs (else on the stated costs, or unknown)."""
        return bool(self.units)

    def add_past(self, row: str, seconds: float, units: float) -> None:
        """A job of `row` that an earlier invocation finished: `units` of work in `seconds`."""
        if units > 0 and seconds > 0:
            self.seconds[row] = self.seconds.get(row, 0.0) + seconds
            self.units[row] = self.units.get(row, 0.0) + units

    def finish(self, job: Hashable, seconds: float) -> None:
        """A job ended after `seconds` of its own (not the grid's) wall time."""
        self.add_past(self.row[job], seconds, self.pending.pop(job, 0.0))

    def left(self) -> float | None:
        """Seconds the pending jobs still need, spread over the workers; before any job is timed, at the
        stated costs (None without them)."""
        if not self.units:
            if not self.stated or any(j not in self.stated for j in self.pending):
                return None
            return sum(c * self.stated[j] for j, c in self.pending.items()) / self.workers
        overall = sum(self.seconds.values()) / sum(self.units.values())
        pace = {r: self.seconds[r] / self.units[r] for r in self.units}
        need = sum(c * pace.get(self.row[j], overall) for j, c in self.pending.items())
        return need / self.workers


def time_file(out: Path) -> Path:
    """Where a finished job's seconds are kept: beside its dir, as its log is."""
    return out.parent / f"{out.name}.time.json"


def save_time(out: Path, seconds: float, units: float) -> None:
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


def grid_eta(jobs: Sequence[Any], workers: int = 1, stated: bool = False) -> tuple[dict[Any, float], TimeLeft]:
    """(progress units each job still needs, a TimeLeft already paced on the finished jobs' saved times)
    for a grid's jobs (`fedcore.bench.plan.Job`); `stated`: with `stated_pace` for a grid none of whose
    jobs has been timed (it loads each row's config once)."""
    costs = {j: 0 if is_done(j) else j.cost for j in jobs}
    eta = TimeLeft(costs, {j: j.row for j in jobs}, workers, stated_pace(jobs) if stated else None)
    for j in jobs:
        if costs[j] == 0 and (past := load_time(j.out)) is not None:
            eta.add_past(j.row, *past)
    return costs, eta


@contextlib.contextmanager
def grid_progress(jobs: list[Any], enabled: bool, say: Callable[[str], None],
                  console: Console | None = None, workers: int = 1) -> Iterator[Callable[..., None]]:
    """`fedcore bench`'s bar over the whole grid, with the time left. Yields done(job, status, seconds).

    jobs: fedcore.bench.plan.Job (label, row, cost). What is done already is out of the total; the
    time left is each row's own pace on its finished jobs (grid_eta), over `workers`.
    Without the bar, one line per finished job."""
    costs, eta = grid_eta(jobs, workers)

    def finished(job: Any, seconds: float) -> None:
        if seconds > 0:
            save_time(job.out, seconds, costs[job])
        eta.finish(job, seconds)

    console = console or Console(stderr=True)
    if not enabled:
        def quiet(job: Any, status: str, seconds: float = 0.0) -> None:
            if status != "skipped":
                finished(job, seconds)
                say(f"bench: {job.label} {status}")

        yield quiet
        return
    if not console.is_terminal:
        # A log file or a pod's stdout: rich draws no live bar there, so a grid of hours would print
        # nothing until its end. One line a finished job instead, with the share done and time left.
        yield _progress_lines(costs, eta, finished, say)
        return
    bar = Progress(TextColumn("[bold]bench"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[last]}"),
                   TimeElapsedColumn(), TextColumn("{task.fields[left]}"), console=console)
    with bar:
        task = bar.add_task("bench", total=sum(costs.values()), last="", left=time_left(eta.left()))

        def done(job: Any, status: str, seconds: float = 0.0) -> None:
            if status != "skipped":
                finished(job, seconds)
                bar.update(task, advance=costs[job], last=f"{job.label} {status}", left=time_left(eta.left()))

        yield done


def time_left(seconds: float | None) -> str:
    return "" if seconds is None else f"about {timedelta(seconds=round(seconds))} left"


def _progress_lines(costs: dict[Any, float], eta: Any, finished: Callable[[Any, float], None],
                    say: Callable[[str], None]) -> Callable[..., None]:
    """done(job, status, seconds) printing 'bench: 14/112 LABEL done (0:17:06 elapsed, about 1:50:00 left)'."""
    total, start, advanced = sum(costs.values()), time.monotonic(), [0.0]
    if (known := eta.left()) is not None:  # a resumed grid: its earlier jobs' pace is known already
        say(f"bench: {total:g} units to do, {time_left(known)}")

    def done(job: Any, status: str, seconds: float = 0.0) -> None:
        if status == "skipped":
            return
        advanced[0] += costs[job]
        finished(job, seconds)
        left = time_left(eta.left())
        spent = timedelta(seconds=round(time.monotonic() - start))
        say(f"bench: {advanced[0]:g}/{total:g} {job.label} {status} ({spent} elapsed{', ' + left if left else ''})")

    return done


# What a run costs before this grid has timed any, from the costs lab/results/tuning.md states
# ("The cost": measured on two shared cores, one thread each, batched executor) for its Fashion-MNIST
# MLP presets, configs/fmnist/*.yaml: 10,000 training images (data.max_train), 40-50 rounds of 5
# local epochs, every client every round. Seconds of one run, the middle of each stated range:
STATED_RUN_S = {
    "fedavg": 37.5,        # "a FedAvg run of an MLP preset takes 30-45 s"
    "fedgr-robust": 75.0,  # "FedGR `robust` and Co-teaching about twice that"
    "coteaching": 75.0,
    "fedrg": 120.0,        # "FedRG about 2 minutes"
    "fedgr": 150.0,        # "FedGR `authors` about 2.5" (the presets' profile)
    "dividemix": 210.0,    # "FL-DivideMix 2-5 minutes (sequential executor)"
    "fedharmony": 90.0,    # "FedHarmony's CNN on mosaics 1-2" (minutes)
}
# The page states no time of its own for the other methods (FedProx, SCE, FedNoRo, FedCorr, FedSIR): each is
# FedAvg's local training plus its own hooks, so FedAvg's cost is their floor, and theirs here.
STATED_WORK = 45 * 5 * 10_000  # rounds x local epochs x training images of those runs
# "A tune of 8 trials costs about 4-6 full runs": a trial, with pruning and early stopping, 5/8 of a run.
STATED_TRIAL_RUNS = 5 / 8


def stated_pace(jobs: Sequence[Any]) -> dict[Any, float]:
    """job -> seconds a progress unit of it takes at the stated costs (STATED_RUN_S), scaled by its
    config's work (rounds of every stage x local epochs x the clients' share x training images, the
    presets' 10,000 where data.max_train sets no cap): a guess of the right order before anything
    has run, not a measurement. Jobs of one (scene, row) share the first one's config."""
    work: dict[tuple[str, str], tuple[str, float]] = {}
    for j in jobs:
        key = (j.scene, j.row)
        if key not in work and (j.kind == "tune" or j.setting == "default"):  # a tuned run's best.yaml may not exist
            cfg = load_config(j.config, list(j.overrides))
            rounds = sum(s.rounds for s in build_method(cfg).stages)
            images = cfg.data.max_train or 10_000
            work[key] = (cfg.method.name, rounds * cfg.train.local_epochs * cfg.train.client_fraction * images)
    pace = {}
    for j in jobs:
        if (j.scene, j.row) not in work:  # no config to read: left() gives no stated estimate
            continue
        method, units = work[(j.scene, j.row)]
        run_s = STATED_RUN_S.get(j.row, STATED_RUN_S.get(method, STATED_RUN_S["fedavg"])) * units / STATED_WORK
        pace[j] = run_s * (STATED_TRIAL_RUNS if j.kind == "tune" else 1.0)
    return pace

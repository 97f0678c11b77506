"""The live progress bar of `fedcore run`: a rich callback (early stopping is in `fedcore.engine.callbacks`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from fedcore.engine.callbacks import Callback


class ProgressCallback(Callback):
    """Stage, round, train loss, test accuracy and ETA on one live line."""

    def __init__(self, total_rounds: int, console: Console | None = None, label: str = "") -> None:
        self.total, self.label = total_rounds, label
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"), TextColumn("acc {task.fields[acc]}"),
            TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False,
        )
        self.task_id = None
        self.acc = "-"

    def on_run_start(self, info: dict[str, Any]) -> None:
        self.progress.start()
        self.task_id = self.progress.add_task(self.label or "run", total=self.total, loss="-", acc="-")

    def after_round(self, rnd: int, stage: str, metrics: dict[str, float]) -> None:
        loss = metrics.get("train/loss")
        acc = metrics.get("test/acc", metrics.get("test/mAP"))
        if acc is not None:
            self.acc = f"{acc:.3f}"
        self.progress.update(
            self.task_id, completed=min(rnd, self.total), description=f"{self.label} {stage}".strip(),
            loss="-" if loss is None else f"{loss:.3f}", acc=self.acc,
        )

    def on_run_end(self, summary: dict[str, float], out_dir: Path) -> None:
        self.progress.stop()

    def on_failure(self, error: BaseException) -> None:
        # Release the live display, so the one-line error is printed after it rather than into it.
        self.progress.stop()


@contextlib.contextmanager
def trial_progress(total: int, done: int, enabled: bool = True,
                   console: Console | None = None) -> Iterator[Callable[[int, int, float | None], None]]:
    """`fedcore tune`'s bar: trials finished of `total` (a resumed tune starts at `done`), pruned, best.
    Yields update(done, pruned, best_value)."""
    if not enabled:
        yield lambda done, pruned, best: None
        return
    bar = Progress(TextColumn("[bold]tune"), BarColumn(), MofNCompleteColumn(),
                   TextColumn("pruned {task.fields[pruned]}"), TextColumn("best {task.fields[best]}"),
                   TimeElapsedColumn(), TimeRemainingColumn(),
                   console=console or Console(stderr=True))
    with bar:
        task = bar.add_task("tune", total=total, completed=done, pruned="-", best="-")

        def update(done: int, pruned: int, best: float | None) -> None:
            bar.update(task, completed=done, pruned=str(pruned), best="-" if best is None else f"{best:.4f}")

        yield update


@contextlib.contextmanager
def grid_progress(jobs: list[Any], enabled: bool, say: Callable[[str], None],
                  console: Console | None = None, workers: int = 1) -> Iterator[Callable[..., None]]:
    """`fedcore bench`'s bar over the whole grid, with the time left. Yields done(job, status, seconds).

    jobs: fedcore.bench.plan.Job (label, row, cost). What is done already is out of the total; the
    time left is each row's own pace on its finished jobs (`fedcore.bench.eta`), over `workers`.
    Without the bar, one line per finished job."""
    from fedcore.bench.eta import grid_eta, save_time

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
    from datetime import timedelta

    return "" if seconds is None else f"about {timedelta(seconds=round(seconds))} left"


def _progress_lines(costs: dict[Any, float], eta: Any, finished: Callable[[Any, float], None],
                    say: Callable[[str], None]) -> Callable[..., None]:
    """done(job, status, seconds) printing 'bench: 14/112 LABEL done (0:17:06 elapsed, about 1:50:00 left)'."""
    import time
    from datetime import timedelta

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

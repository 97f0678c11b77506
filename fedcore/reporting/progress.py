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


def score_text(metrics: dict[str, float]) -> str | None:
    """'acc 16.9%' (or 'mAP 40.2%' for a multi-label task): in %, as every score a person reads; None
    when the round logged no test score."""
    for key, name in (("test/acc", "acc"), ("test/mAP", "mAP")):
        if metrics.get(key) is not None:
            return f"{name} {100 * metrics[key]:.1f}%"
    return None


class ProgressCallback(Callback):
    """Stage, round, train loss, test accuracy and ETA on one live line."""

    def __init__(self, total_rounds: int, console: Console | None = None, label: str = "") -> None:
        self.total, self.label = total_rounds, label
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("loss {task.fields[loss]}"), TextColumn("{task.fields[score]}"),
            TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False,
        )
        self.task_id = None
        self.score = "acc -"

    def on_run_start(self, info: dict[str, Any]) -> None:
        self.progress.start()
        self.task_id = self.progress.add_task(self.label or "run", total=self.total, loss="-", score=self.score)

    def after_round(self, rnd: int, stage: str, metrics: dict[str, float]) -> None:
        loss = metrics.get("train/loss")
        self.score = score_text(metrics) or self.score
        self.progress.update(
            self.task_id, completed=min(rnd, self.total), description=f"{self.label} {stage}".strip(),
            loss="-" if loss is None else f"{loss:.3f}", score=self.score,
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
            # In %, as the tune's closing line prints it (its objective is a validation score).
            bar.update(task, completed=done, pruned=str(pruned), best="-" if best is None else f"{100 * best:.2f}%")

        yield update

"""`fedcore tracking sync`: replay what an MLflow or S3 outage kept in a run dir's journal."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedcore.cli.console import group, make_console

app = group("Tracking: replay what an outage kept from MLflow.", "replay what an MLflow outage kept")
console = make_console()


@app.command("sync", short_help="replay a run's journal into MLflow")
def tracking_sync(
    run_dir: Annotated[Path, typer.Argument(help="a run dir (the --out of `fedcore run`, or a stage's output)")],
    retry_seconds: Annotated[float | None, typer.Option(
        "--retry-seconds", min=0, max=1080,
        help="seconds MLflow's retries may wait per call (default FEDCORE_TRACKING_RETRY_SECONDS, else 60)",
    )] = None,
) -> None:
    """Log what the run could not, into the same MLflow run, and give that run its final status."""
    from fedcore.tracking.sync import sync  # lazy: CLI start-up

    res = sync(run_dir, retry_seconds)
    what = f"replayed {res.delivered} journaled calls" if res.delivered else "nothing was waiting"
    console.print(f"{what}; MLflow run {res.run_id} at {res.uri} is {res.status}", markup=False, highlight=False)

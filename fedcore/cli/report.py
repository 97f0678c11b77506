"""`fedcore report`: a results page with figures from finished run dirs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedcore.cli.console import ReadTrackingUriOpt, local_folder, make_console
from fedcore.errors import UserError

console = make_console()


def report(
    runs: Annotated[list[Path] | None, typer.Argument(help=(
        "run dirs written by `fedcore run` or `fedcore pipeline run --local` (seeds of a setting together)"))] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="folder for report.md and its PNGs")] = Path("runs/report"),
    experiment: Annotated[str | None, typer.Option("--experiment", help="read the finished runs of this MLflow "
                                                   "experiment instead of run dirs")] = None,
    tracking_uri: ReadTrackingUriOpt = None,
) -> None:
    """Write OUT/report.md: accuracy curves with seed bands, noise-rate estimates, detection, memorization."""
    from fedcore.reporting.report import mlflow_runs, write_report  # lazy: CLI start-up
    from fedcore.reporting.rundirs import expand_run_dirs  # lazy: CLI start-up

    out = local_folder(out)
    if experiment and runs:
        raise UserError("pass run dirs or --experiment, not both")
    if experiment:
        runs = mlflow_runs(experiment, tracking_uri, out / ".mlflow-runs")
    else:
        runs = expand_run_dirs(runs or [])
    path = write_report(runs or [], out)
    console.print(f"wrote {path} (figures beside it)", markup=False, highlight=False)

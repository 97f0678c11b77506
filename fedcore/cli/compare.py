"""`fedcore compare`: the table of final metrics across run dirs, or across an MLflow experiment."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedcore.cli.console import ReadTrackingUriOpt, local_folder, make_console
from fedcore.errors import UserError

console = make_console()


def compare(
    runs: Annotated[list[Path] | None, typer.Argument(help="run dirs written by `fedcore run`, or "
                                                         "the run dir `fedcore pipeline run --local` printed")] = None,
    experiment: Annotated[str | None, typer.Option("--experiment", help="MLflow experiment to compare")] = None,
    by: Annotated[str, typer.Option(help="label rows by this record field (runs average only when their "
                                          "configs agree on all but the seed)")] = "method",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="folder for --experiment's bar chart, "
                                             "compare-<experiment>.png (default: none, compare only reads)")] = None,
    tracking_uri: ReadTrackingUriOpt = None,
) -> None:
    """Table of final metrics across runs (mean ± std over the seeds of one config)."""
    from fedcore.reporting.compare import budget_notes, load_run, merge_notes  # lazy: CLI start-up
    from fedcore.reporting.rundirs import expand_run_dirs  # lazy: CLI start-up
    from fedcore.reporting.terminal import console_table  # lazy: CLI start-up

    out = local_folder(out)
    if experiment:
        from fedcore.reporting.compare_mlflow import compare_experiment  # lazy: CLI start-up

        compare_experiment(experiment, console, uri=tracking_uri, out_dir=out)
        return
    if tracking_uri is not None:
        raise UserError("--tracking-uri is where --experiment is read from; comparing run dirs reads no MLflow")
    if out is not None:
        raise UserError("--out is where --experiment's bar chart goes; comparing run dirs only prints the table")
    if not runs:
        raise UserError("pass run directories (fedcore compare runs/a runs/b) or --experiment NAME")
    records = [load_run(p) for p in expand_run_dirs(runs)]
    console.print(console_table(records, by=by))
    for note in [*merge_notes(records, by=by), *budget_notes(records, by=by)]:
        console.print(f"note: {note}", soft_wrap=True, markup=False, highlight=False)

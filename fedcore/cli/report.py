"""`fedcore report`: a results page with figures from finished run dirs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedcore.cli.console import make_console

console = make_console()


def report(
    runs: Annotated[list[Path], typer.Argument(help="run dirs written by `fedcore run` (seeds of a setting together)")],
    out: Annotated[Path, typer.Option("--out", "-o", help="folder for report.md and its PNGs")] = Path("report"),
) -> None:
    """Write OUT/report.md: accuracy curves with seed bands, noise-rate estimates, detection, memorization."""
    from fedcore.reporting.report import write_report

    path = write_report(runs, out)
    console.print(f"wrote {path} (figures beside it)", markup=False, highlight=False)

"""The CLI's rich consoles.

Rich falls back to 80 columns when stdout is not a terminal, which squeezes the
comparison tables of `make run | tee log` or a CI log into unreadable stubs. Piped
output gets a wide fixed width instead; COLUMNS, when set, still wins.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

PIPED_WIDTH = 160


def make_console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(stderr=stderr, width=PIPED_WIDTH)


# The argument and option every config-taking command shares; only the example differs.
ConfigArg = Annotated[Path, typer.Argument(help="experiment YAML, e.g. configs/quickstart.yaml")]


def set_option(help_text: str = "dotted override, e.g. method.name=fedprox (repeatable)") -> Any:
    """The repeatable `--set/-s k=v` option type, with `help_text`."""
    return Annotated[list[str] | None, typer.Option("--set", "-s", help=help_text)]

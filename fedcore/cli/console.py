"""The CLI's rich consoles.

Rich falls back to 80 columns when stdout is not a terminal, which squeezes the
comparison tables of `make run | tee log` or a CI log into unreadable stubs. Piped
output gets a wide fixed width instead; COLUMNS, when set, still wins.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from fedcore.errors import UserError

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


# typer has already made a Path of the option, which folds 's3://b/p' into 's3:/b/p'.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/+")


def local_folder(path: Path | None, option: str = "--out") -> Path | None:
    """`path` when it names a local folder; a one-line UserError for an s3:// (or other scheme://) URI.

    Refused rather than uploaded: a run dir is also the run's lock, checkpoints and resume point,
    which need a local filesystem, and a URI taken as a path wrote a folder named 's3:' instead.
    """
    found = _SCHEME.match(str(path)) if path is not None else None
    if found is None:
        return path
    uri = _SCHEME.sub(r"\1://", str(path), count=1)
    raise UserError(f"{option} '{uri}' is not a local folder: fedcore writes its outputs (and a run's lock and "
                    "checkpoints) on local disk; pass a local path and copy the result to object storage after, "
                    "or run the pipeline (`fedcore pipeline submit`), whose artifacts go to the cluster's store")

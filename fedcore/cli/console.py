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

# Click's plain help, not typer's rich panels: rich cuts a word wider than its column with '…'
# (an example path, a default) at 80 columns, while click wraps every line within the terminal.
HELP = {"rich_markup_mode": None, "no_args_is_help": True}


def group(help_text: str, short_help: str | None = None) -> typer.Typer:
    """A command group (`fedcore config`, `fedcore data`, ...) with the CLI's help conventions;
    `short_help`: its row in `fedcore -h`, where click cuts a longer help with '...'."""
    return typer.Typer(help=help_text, short_help=short_help, **HELP)


def make_console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(stderr=stderr, width=PIPED_WIDTH)


# The argument and option every config-taking command shares; only the example differs.
ConfigArg = Annotated[Path, typer.Argument(help="experiment YAML, e.g. configs/quickstart.yaml")]


def set_option(help_text: str = "dotted override, e.g. method.name=fedprox (repeatable)") -> Any:
    """The repeatable `--set/-s k=v` option type, with `help_text`."""
    return Annotated[list[str] | None, typer.Option("--set", "-s", help=help_text, metavar="<key=value>")]


# One way to give a list: repeat the option, each value possibly a comma list, so
# `--method a --method b` and `--method a,b` mean the same on every command. Options of key=value
# pairs (--set, --resource, --node-selector) are repeated only: a value may hold commas.
LIST_HELP = "(repeatable, or comma-separated)"


def split_list(value: list[str] | tuple[str, ...] | None) -> list[str] | None:
    """The items of a list option: every value split at commas, blanks dropped; None when not given."""
    if value is None:
        return None
    return [item.strip() for v in value for item in str(v).split(",") if item.strip()]


def _option_name(param: Any) -> str:
    return next(o for o in param.opts if o.startswith("--"))


def split_items(ctx: Any, param: Any, value: list[str] | None) -> list[str] | None:
    """`split_list` as an option's callback: an option given with no item at all (`--seed ,`) is a
    one-line UserError, not taken for the option left out (typer passes an empty list on as None)."""
    from fedcore.errors import UserError  # lazy: CLI start-up

    items = split_list(value)
    if value and not items:
        name = _option_name(param)
        raise UserError(f"{name} '{','.join(value)}' names nothing; give one or more, e.g. {name} a,b")
    return items


def split_ints(ctx: Any, param: Any, value: list[str] | None) -> list[int] | None:
    """`split_items` for integers (seeds); a non-integer is a one-line UserError naming the option."""
    from fedcore.errors import UserError  # lazy: CLI start-up

    items = split_items(ctx, param, value)
    try:
        return None if items is None else [int(x) for x in items]
    except ValueError:
        name = _option_name(param)
        raise UserError(f"{name} '{','.join(value or [])}': give integers, e.g. {name} 0 {name} 1 or "
                        f"{name} 0,1") from None


def list_option(names: str | tuple[str, ...], help_text: str, ints: bool = False) -> Any:
    """A list option in the CLI's one style: `names` (the singular first), items as `LIST_HELP` says."""
    names = (names,) if isinstance(names, str) else names
    callback = split_ints if ints else split_items
    return Annotated[list[str] | None, typer.Option(*names, help=f"{help_text} {LIST_HELP}", callback=callback,
                                                    metavar="<int>" if ints else "<str>")]


# The tracking options of every command that writes to MLflow; commands that read it take
# --experiment NAME and TrackingUriOpt.
TrackingOpt = Annotated[bool | None, typer.Option("--tracking/--no-tracking", help="record in MLflow, or not "
                                                  "(default: the config's tracking.backend)")]
TrackingUriOpt = Annotated[str | None, typer.Option("--tracking-uri", help="MLflow tracking URI (default: the "
                                                    "config's tracking.uri, else MLFLOW_TRACKING_URI, else "
                                                    "./mlruns)")]

ReadTrackingUriOpt = Annotated[str | None, typer.Option("--tracking-uri", help="MLflow tracking URI to read "
                                                        "(default: MLFLOW_TRACKING_URI, else ./mlruns)")]


def tracking_sets(tracking: bool | None, uri: str | None) -> list[str]:
    """The tracking options as --set overrides (after the user's own, so they win)."""
    if tracking is None and uri:  # a URI says where to record: giving one turns tracking on
        tracking = True
    backend = [] if tracking is None else [f"tracking.backend={'mlflow' if tracking else 'none'}"]
    return [*backend, *([f"tracking.uri={uri}"] if uri else [])]


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

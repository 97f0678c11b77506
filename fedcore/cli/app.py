"""The `fedcore` command line (typer).

User errors print one line on stderr and exit with code 2; bugs keep their traceback.
Sub-command groups living in other modules (pipeline, deploy) register themselves in
`_SUBAPPS` so this file stays small.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated

import typer

from fedcore.console import make_console
from fedcore.errors import UserError

app = typer.Typer(
    name="fedcore",
    help="Federated learning under noisy labels: data, training, pipelines, deployment.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
config_app = typer.Typer(help="Inspect experiment configs.", no_args_is_help=True)
data_app = typer.Typer(help="Prepare federated, noisy datasets.", no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(data_app, name="data")

console = make_console()
err_console = make_console(stderr=True)

ConfigArg = Annotated[Path, typer.Argument(help="experiment YAML, e.g. configs/quickstart.yaml")]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", "-s", help="dotted override, e.g. noise.rate.max=0.9 (repeatable)")
]


@config_app.command("methods")
def config_methods(
    name: Annotated[str | None, typer.Argument(help="a method: list its params (method.params.*)")] = None,
) -> None:
    """List the methods, or one method's params with their types, defaults and meaning."""
    from rich.table import Table

    from fedcore.methods.registry import available_methods, describe_params, summary_line

    if name is None:
        table = Table("method.name", "what it is")
        for m in available_methods():
            table.add_row(m, summary_line(m))
    else:
        table = Table("method.params.", "type", "default", "meaning", title=f"{name}: {summary_line(name)}")
        for row in describe_params(name):
            table.add_row(*row)
    console.print(table)


@config_app.command("show")
def config_show(
    config: ConfigArg,
    set_: SetOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="yaml or json")] = "yaml",
) -> None:
    """Print the resolved config (defaults filled in, overrides applied) and its hash."""
    from fedcore.config import check_names, load_config

    if fmt not in ("yaml", "json"):  # anything else used to print JSON silently
        raise UserError(f"--format '{fmt}' is not supported; pass --format yaml or --format json")
    cfg = check_names(load_config(config, set_))
    text = cfg.to_yaml() if fmt == "yaml" else cfg.model_dump_json(indent=2)
    console.print(text, markup=False, highlight=False)
    console.print(f"# config_hash: {cfg.config_hash()}", markup=False, highlight=False)


@data_app.command("prepare")
def data_prepare(
    config: ConfigArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="artifact directory to write")],
    set_: SetOpt = None,
) -> None:
    """Partition the dataset, inject the noise scene, and write a verified FederatedDataset artifact."""
    from fedcore.config import load_config
    from fedcore.data.federated import build_federated_dataset
    from fedcore.data.report import print_scene

    cfg = load_config(config, set_)
    fed = build_federated_dataset(cfg)
    path = fed.save(out)
    print_scene(fed, console)
    console.print(f"wrote [bold]{path}[/] (data sha256 {fed.manifest['files']['data.pt'][:12]}…)")


def _register_subapps() -> None:
    for name, module in _SUBAPPS:
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise
            continue
        app.add_typer(mod.app, name=name)
    for module in _COMMAND_MODULES:
        try:
            importlib.import_module(module).register(app)
        except ModuleNotFoundError as err:
            if err.name != module:
                raise


# Groups of sub-commands that live in their own module, each exposing `app`.
_SUBAPPS: list[tuple[str, str]] = [("pipeline", "fedcore.cli_pipeline"), ("deploy", "fedcore.cli_deploy")]
# Modules that add top-level commands through `register(app)`.
_COMMAND_MODULES: list[str] = ["fedcore.cli_run"]
_register_subapps()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the typer app, turning user errors into one line and exit code 2."""
    try:
        # Without standalone mode click *returns* the code of a `typer.Exit(n)` (deploy check/smoke
        # failing) instead of exiting with it; dropping it would make a failed check exit 0.
        code = app(args=argv, standalone_mode=False)
    except UserError as err:
        err_console.print(f"error: {err}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except typer.Abort:
        err_console.print("aborted")
        sys.exit(130)
    except Exception as err:
        usage, exits = _click_error_types()
        if isinstance(err, usage):  # unknown command or option, missing argument, bad value
            err.show()
            sys.exit(2)
        if isinstance(err, exits):
            sys.exit(err.exit_code)
        raise
    if isinstance(code, int) and code:
        sys.exit(code)


def _click_error_types() -> tuple[tuple[type, ...], tuple[type, ...]]:
    """(usage-error, exit) exception classes of click and of the click copy that newer typer
    releases vendor as `typer._click`; either may raise, and neither subclasses the other."""
    usage: list[type] = []
    exits: list[type] = [typer.Exit]
    for name in ("click.exceptions", "typer._click.exceptions"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        usage += [mod.ClickException] if hasattr(mod, "ClickException") else []
        exits += [mod.Exit] if hasattr(mod, "Exit") else []
    return tuple(usage), tuple(exits)

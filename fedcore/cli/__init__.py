"""The `fedcore` command line (typer): `app` with every command group registered, and `main`.

Each group lives in its own module of this package (config, data, pipeline, deploy, run,
compare, quickstart, tracking) and imports its heavy dependencies inside the command, so
`fedcore --help` stays fast: this package is the one place where imports inside functions are the
rule, each marked `# lazy: CLI start-up` (tests/test_layout.py wants the mark). Measured on the
dev machine (2 shared cores, under load; median of 5): `python -m fedcore --help` takes 1.2 s
as it is, 9.3 s with torch imported at the top, 15.3 s with torch and MLflow. What `--help`
loads anyway (typer, rich, fedcore.errors, fedcore.deploy, ...) is imported at the top.

`fedcore.cli:main` is the console-script entry point and what
`python -m fedcore` runs. User errors print one line on stderr and exit with code 2;
bugs keep their traceback.
"""

from __future__ import annotations

import importlib
import signal
import sys
from typing import Annotated

import typer

from fedcore import __version__
from fedcore.cli import bench, compare, config, data, deploy, pipeline, quickstart, report, run, tracking, tune
from fedcore.cli.console import HELP, make_console
from fedcore.engine.interrupt import EXIT_CODES, stop_signal, stopped_line
from fedcore.errors import Interrupted, UserError

app = typer.Typer(
    name="fedcore",
    help="Federated learning under noisy labels: data, training, pipelines, deployment.",
    pretty_exceptions_enable=False,
    add_completion=False,
    # Click hands help_option_names down to every subcommand's context: -h works everywhere.
    context_settings={"help_option_names": ["-h", "--help"]},
    **HELP,
)
err_console = make_console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        print(f"fedcore {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="print fedcore's version and exit")] = False,
) -> None:
    """Federated learning under noisy labels: data, training, pipelines, deployment."""

app.add_typer(config.app, name="config")
app.add_typer(data.app, name="data")
app.add_typer(pipeline.app, name="pipeline")
app.add_typer(deploy.app, name="deploy")
app.add_typer(tracking.app, name="tracking")
app.command("run", short_help="run one experiment: history, metrics, model")(run.run)
app.command("resume", short_help="continue or extend a run from its run dir")(run.resume)
app.command("compare", short_help="a table of final metrics across runs")(compare.compare)
app.command("quickstart", short_help="what `make run` runs: every method on noisy digits")(quickstart.quickstart)
app.command("tune", short_help="tune a method on validation (Optuna)")(tune.tune)
app.command("report", short_help="a results page with figures from finished runs")(report.report)
app.command("bench", short_help="pick a method for your federation")(bench.bench)
app.command("bench-table", short_help="print the tables of bench results")(bench.bench_table)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the typer app, turning user errors into one line and exit code 2."""
    try:
        # Without standalone mode click *returns* the code of a `typer.Exit(n)` (deploy check/smoke
        # failing) instead of exiting with it; dropping it would make a failed check exit 0.
        code = app(args=argv, standalone_mode=False)
    except UserError as err:
        err_console.print(f"error: {printable(str(err))}", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except Interrupted as err:  # a command that says what it kept (fedcore run)
        err_console.print(printable(str(err)), markup=False, highlight=False, soft_wrap=True)
        sys.exit(err.code)
    except typer.Abort as err:  # click < 8.2 and older typer turn KeyboardInterrupt into Abort
        _exit_interrupted(err.__cause__)
    except Exception as err:
        usage, exits = _click_error_types()
        if isinstance(err, usage):  # unknown command or option, missing argument, bad value
            err.show()
            sys.exit(2)
        if isinstance(err, exits):
            sys.exit(err.exit_code)
        raise
    if code == EXIT_CODES[signal.SIGINT]:  # typer >= 0.13 turns KeyboardInterrupt into a silent Exit(130)
        _exit_interrupted(None)
    if isinstance(code, int) and code:
        sys.exit(code)


def _exit_interrupted(err: BaseException | None) -> None:
    """One line and 130 (Ctrl-C) or 143 (SIGTERM, as fedcore.errors.Terminated) for a command
    without its own message."""
    sig = stop_signal(err)
    err_console.print(stopped_line(sig), markup=False, highlight=False)
    sys.exit(EXIT_CODES[sig])


def printable(text: str) -> str:
    """`text` with control and other unprintable characters escaped (`\\x1b`, `\\n`, `\\u202e`):
    an error quoting a hostile key or path stays one line and cannot drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


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

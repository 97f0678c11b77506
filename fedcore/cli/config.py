"""`fedcore config methods|show`: the methods and their params, and a resolved config."""

from __future__ import annotations

from typing import Annotated, get_args

import typer
from rich.table import Table
from rich.text import Text

from fedcore.cli.console import ConfigArg, group, make_console, set_option
from fedcore.errors import UserError

app = group("Inspect experiment configs.", "inspect configs and the methods")
console = make_console()

SetOpt = set_option("dotted override, e.g. noise.rate.max=0.9 (repeatable)")


@app.command("methods", short_help="the methods, or one method's params and search space")
def config_methods(
    name: Annotated[str | None, typer.Argument(help="a method: list its params (method.params.*)")] = None,
) -> None:
    """List the methods, or one method's params (types, defaults, meaning) and search space."""
    from fedcore.methods.registry import available_methods, describe_params, summary_line  # lazy: CLI start-up

    if name is None:
        table = Table("method.name", "what it is")
        for m in available_methods():
            table.add_row(m, Text(summary_line(m)))
    else:
        table = Table("method.params.", "type", "default", "meaning", title=Text(f"{name}: {summary_line(name)}"))
        for row in describe_params(name):
            table.add_row(*(Text(cell) for cell in row))  # text, not markup: "B[y]", "[v1: weak]" are meanings
    console.print(table)
    if name is not None:
        console.print(space_table(name))


def space_table(name: str):
    """What `fedcore tune` searches for this method: the train section's ranges and the method's own,
    one column per `train.optimizer` (an Adam learning rate is not an SGD one)."""

    from fedcore.config import ExperimentConfig, TrainConfig  # lazy: CLI start-up
    from fedcore.tuning.space import full_space  # lazy: CLI start-up

    optimizers = get_args(TrainConfig.model_fields["optimizer"].annotation)
    spaces = {opt: {d.path: d.describe() for d in full_space(ExperimentConfig.model_validate(
        {"method": {"name": name}, "train": {"optimizer": opt}}))} for opt in optimizers}
    table = Table("param", *(f"search space (optimizer: {o})" for o in optimizers),
                  title=f"{name}: fedcore tune searches (Katib too)")
    paths = list(dict.fromkeys(p for space in spaces.values() for p in space))
    for path in paths:
        table.add_row(path, *(spaces[o].get(path, "not searched") for o in optimizers))
    return table


@app.command("show", short_help="the resolved config and its hash")
def config_show(
    config: ConfigArg,
    set_: SetOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="yaml or json")] = "yaml",
) -> None:
    """Print the resolved config (defaults filled in, overrides applied) and its hash."""
    from fedcore.registries import load_config  # lazy: CLI start-up

    if fmt not in ("yaml", "json"):  # anything else used to print JSON silently
        raise UserError(f"--format '{fmt}' is not supported; pass --format yaml or --format json")
    cfg = load_config(config, set_)
    text = cfg.to_yaml() if fmt == "yaml" else cfg.model_dump_json(indent=2)
    console.print(text, markup=False, highlight=False)
    console.print(f"# config_hash: {cfg.config_hash()}", markup=False, highlight=False)

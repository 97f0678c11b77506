"""`fedcore data prepare`: build the FederatedDataset artifact of a config and print its noise scene."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedcore.cli.console import ConfigArg, local_folder, make_console, set_option

app = typer.Typer(help="Prepare federated, noisy datasets.", no_args_is_help=True)
console = make_console()

SetOpt = set_option("dotted override, e.g. noise.rate.max=0.9 (repeatable)")


@app.command("prepare")
def data_prepare(
    config: ConfigArg,
    out: Annotated[Path, typer.Option("--out", "-o", help="artifact directory to write")],
    set_: SetOpt = None,
) -> None:
    """Partition the dataset, inject the noise scene, and write a verified FederatedDataset artifact."""
    from fedcore.data.build import build_federated_dataset
    from fedcore.data.report import print_scene
    from fedcore.registries import load_config

    out = local_folder(out)
    cfg = load_config(config, set_)
    fed = build_federated_dataset(cfg)
    path = fed.save(out)
    print_scene(fed, console)
    console.print(f"wrote [bold]{path}[/] (data sha256 {fed.manifest['files']['data.pt'][:12]}…)")

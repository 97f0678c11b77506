"""`fedcore data prepare`: build the FederatedDataset artifact of a config and print its noise scene;
`fedcore data inspect`: summarize a federation (clients, classes, labels, trusted labels) before training."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedcore.cli.console import ConfigArg, group, local_folder, make_console, set_option

app = group("Prepare federated, noisy datasets.", "prepare and inspect federated, noisy datasets")
console = make_console()

SetOpt = set_option("dotted override, e.g. noise.rate.max=0.9 (repeatable)")


@app.command("prepare", short_help="write a config's noisy federated dataset artifact")
def data_prepare(
    config: ConfigArg,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="artifact directory to write (default "
                                                                 "runs/data-<data hash>)")] = None,
    set_: SetOpt = None,
) -> None:
    """Partition the dataset, inject the noise scene, and write a verified FederatedDataset artifact."""
    from fedcore.data.build import build_federated_dataset  # lazy: CLI start-up
    from fedcore.data.federated import scene_report  # lazy: CLI start-up
    from fedcore.data.report import print_federation, print_scene  # lazy: CLI start-up
    from fedcore.registries import load_config  # lazy: CLI start-up

    out = local_folder(out)
    cfg = load_config(config, set_)
    fed = build_federated_dataset(cfg)
    path = fed.save(out or Path("runs") / f"data-{cfg.data_hash()[:12]}")
    print_scene(fed, console)
    if "federation" in (rep := scene_report(fed)):
        print_federation(rep["federation"], console)
    console.print(f"wrote [bold]{path}[/] (data sha256 {fed.manifest['files']['data.pt'][:12]}…)")


@app.command("inspect", short_help="summarize a federation before training")
def data_inspect(
    config: ConfigArg,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="folder for the client x class figure (default: "
                                                                 "none, inspect only reads)")] = None,
    set_: SetOpt = None,
) -> None:
    """Summarize a federation before training: clients and their sizes, classes per client, the label
    histogram, agreement with trusted labels, and, with --out, a client x class figure. Writes
    nothing else."""
    # Imported here: `fedcore --help` stays fast (torch, matplotlib).
    from fedcore.data.build import build_federated_dataset  # lazy: CLI start-up
    from fedcore.data.report import print_federation  # lazy: CLI start-up
    from fedcore.data.summary import client_class_counts, client_names, federation_summary  # lazy: CLI start-up
    from fedcore.registries import load_config  # lazy: CLI start-up
    from fedcore.reporting.plots import client_class_figure, save  # lazy: CLI start-up

    out = local_folder(out)
    cfg = load_config(config, set_)
    fed = build_federated_dataset(cfg)
    console.print(f"[bold]{fed.meta['name']}[/]: {fed.num_classes} classes ({fed.task}-label), partition "
                  f"{cfg.partition.kind}")
    print_federation(federation_summary(fed), console)
    if out is None:  # a look before training leaves no files behind unless asked (issue 71)
        console.print("client x class figure: pass --out FOLDER to draw it")
        return
    fig = client_class_figure(client_class_counts(fed), client_names(fed), fed.meta["class_names"])
    path = save(fig, out / "clients_by_class.png")
    console.print(f"wrote [bold]{path}[/]")

"""`fedcore run`: one experiment in-process, with a progress bar, early stopping and tracking."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fedcore.cli.console import make_console

console = make_console()

ConfigArg = Annotated[Path, typer.Argument(help="experiment YAML, e.g. configs/quickstart.yaml")]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", "-s", help="dotted override, e.g. method.name=fedprox (repeatable)")
]


def run_callbacks(cfg, total_rounds: int, progress: bool, label: str = ""):
    """Progress bar, early stopping and tracking, as the config asks."""
    from fedcore.engine.callbacks import EarlyStopping
    from fedcore.reporting.progress import ProgressCallback

    cbs = []
    if progress:
        cbs.append(ProgressCallback(total_rounds, console, label=label or cfg.method.name))
    if cfg.train.early_stop_patience:
        cbs.append(EarlyStopping(cfg.train.early_stop_patience))
    if cfg.tracking.backend != "none":
        from fedcore.tracking import make_tracker
        from fedcore.tracking.callback import TrackingCallback

        cbs.append(TrackingCallback(make_tracker(cfg.tracking, Path.cwd()), cfg, None))
    return cbs


def total_rounds(cfg) -> int:
    from fedcore.methods.registry import build_method

    return sum(s.rounds for s in build_method(cfg).stages)


def run(
    config: ConfigArg,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="run dir (default runs/<method>-<hash>)")] = None,
    set_: SetOpt = None,
    data: Annotated[str | None, typer.Option("--data", help="FederatedDataset artifact dir or s3:// prefix")] = None,
    resume: Annotated[Path | None, typer.Option("--resume", help="continue from this run dir or checkpoint")] = None,
    stage: Annotated[list[str] | None, typer.Option("--stage", help="run only these stages (repeatable)")] = None,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
) -> None:
    """Run one experiment in-process and write history.csv, metrics.json and model.pt."""
    from fedcore.registries import load_config
    from fedcore.reporting.compare import comparison_table, load_run
    from fedcore.run import run_experiment

    cfg = load_config(config, set_)
    out = out or (resume if resume and resume.is_dir() else Path("runs") / f"{cfg.method.name}-{cfg.config_hash()[:8]}")
    check_run_dir(out, resume)
    result = run_experiment(cfg, out, data=data, resume=resume, stages=stage,
                            callbacks=run_callbacks(cfg, total_rounds(cfg), progress))
    console.print(comparison_table([load_run(result.out_dir)], title=str(result.out_dir)))


def check_run_dir(out: Path, resume: Path | None) -> None:
    """Refuse an --out that is a file or would overwrite a run.

    A run dir (finished, or interrupted with checkpoints) is only written again when it is the
    one being resumed; a fresh run there would silently replace its model, metrics and
    checkpoints. Scripts that redo unfinished runs pass --resume when checkpoints exist.
    """
    from fedcore.errors import UserError

    if out.exists() and not out.is_dir():
        raise UserError(f"--out '{out}' is a file; pass a folder for the run")
    if resume is not None and resume.resolve().is_relative_to(out.resolve()):
        return
    if (out / "metrics.json").is_file():
        raise UserError(f"'{out}' already holds a finished run; continue it with --resume {out} "
                        "(a larger train.rounds trains more rounds), or choose another --out")
    if any((out / "checkpoints").glob("*.pt")):
        raise UserError(f"'{out}' holds an interrupted run; continue it with --resume {out}, "
                        "or choose another --out")

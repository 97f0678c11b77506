"""`fedcore run`: one experiment in-process, with a progress bar, early stopping and tracking."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Annotated, Any

import typer

from fedcore.cli.console import (
    TrackingOpt,
    TrackingUriOpt,
    list_option,
    local_folder,
    make_console,
    set_option,
    tracking_sets,
)
from fedcore.engine.callbacks import Callback
from fedcore.engine.interrupt import EXIT_CODES, stop_signal, stopped_line
from fedcore.errors import Interrupted, UserError

console = make_console()

SetOpt = set_option()
StagesOpt = list_option("--stage", "run only these stages")


def run_callbacks(cfg, total_rounds: int, progress: bool, label: str = "", main: bool = True):
    """Progress bar, early stopping and tracking, as the config asks (fedcore.tracking.callback)."""
    from fedcore.reporting.progress import ProgressCallback  # lazy: CLI start-up
    from fedcore.tracking.callback import run_callbacks as library_callbacks  # lazy: CLI start-up

    bar = ProgressCallback(total_rounds, console, label=label or cfg.method.name) if progress else None
    return library_callbacks(cfg, bar, main)


def total_rounds(cfg) -> int:
    from fedcore.methods.registry import build_method  # lazy: CLI start-up

    return sum(s.rounds for s in build_method(cfg).stages)


def run(
    config: Annotated[Path | None, typer.Argument(help="experiment YAML, e.g. configs/quickstart.yaml (with "
                                                  "--resume: optional, RUN's own config.yaml otherwise)")] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="run dir (default runs/<method>-<hash>)")] = None,
    set_: SetOpt = None,
    data: Annotated[str | None, typer.Option("--data", help="FederatedDataset artifact dir or s3:// prefix")] = None,
    resume: Annotated[Path | None, typer.Option("--resume", help="continue this run dir (or checkpoint) with its "
                                                "own config; a CONFIG given is checked against it")] = None,
    stage: StagesOpt = None,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
    nproc: Annotated[int, typer.Option("--nproc", min=1, help="processes for this one run, each training a share "
                                       "of every round (torchrun; one GPU each on CUDA)")] = 1,
    sweep: Annotated[Path | None, typer.Option("--sweep", help="a sweep file of tuned settings (fedcore bench's "
                                               "tuned_sweep.yaml): train its selected row at its setting")] = None,
    method: Annotated[str | None, typer.Option("--method", help="the method or variant to train (fedgr-robust); "
                                               "with --sweep, that row at its tuned setting")] = None,
    katib_metrics: Annotated[bool, typer.Option("--katib-metrics", help="end by printing the validation metrics as "
                                                "name=value lines (Katib's StdOut collector)")] = False,
    tracking: TrackingOpt = None,
    tracking_uri: TrackingUriOpt = None,
) -> None:
    """Run one experiment and write history.csv, metrics.json and model.pt.

    `fedcore run --resume RUN` continues RUN with the config it recorded (--set still applies,
    e.g. train.rounds=60 to extend it). Also the entry point of every rank under
    `torchrun --nproc-per-node N -m fedcore run CONFIG`.
    """
    import os  # lazy: CLI start-up

    from fedcore.engine.distributed import init_distributed, shutdown  # lazy: CLI start-up
    from fedcore.errors import UserError  # lazy: CLI start-up
    from fedcore.io import run_dir_lock  # lazy: CLI start-up
    from fedcore.models import resolve_device  # lazy: CLI start-up
    from fedcore.reporting.compare import load_run  # lazy: CLI start-up
    from fedcore.reporting.terminal import console_table  # lazy: CLI start-up
    from fedcore.run import run_experiment  # lazy: CLI start-up

    out, resume = local_folder(out), local_folder(resume, "--resume")
    given, config = config, resumed_config(config, resume)
    set_ = [*(set_ or []), *tracking_sets(tracking, tracking_uri)] or None
    set_, cfg = run_config(config, set_, sweep, method)
    if given is not None and resume is not None:
        check_resumed_config(given, cfg, resume)
    out = out or resume_run_dir(resume) or Path("runs") / f"{cfg.method.name}-{cfg.config_hash()[:8]}"
    if out.exists() and not out.is_dir():
        raise UserError(f"--out '{out}' is a file; pass a folder for the run")
    if nproc > 1:
        with run_dir_lock(out):  # judged under the lock; rank 0 of the launched run takes it again
            check_run_dir(out, resume)
        args = [str(config), "--out", str(out), *_passed_on(set_, data, resume, stage, progress)]
        return launch_ranks(cfg, nproc, out, resume, args)
    # Rank 0 (the only writer; a plain run is rank 0) locks before the folder is judged: a second
    # process is refused here, rather than told to --resume a run that is still being written.
    writer = int(os.environ.get("RANK", "0")) == 0
    try:
        with run_dir_lock(out) if writer else contextlib.nullcontext():
            check_run_dir(out, resume)
            info = init_distributed(resolve_device(cfg.train.device))
            main = info is None or info.is_main
            try:
                cbs = run_callbacks(cfg, total_rounds(cfg), progress, main=main)
                cbs += [RecordConfig()] if main else []  # last: checkpoints keep callback state by position
                result = run_experiment(cfg, out, data=data, resume=resume, stages=stage, dist=info, callbacks=cbs)
            finally:
                shutdown(info)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM as fedcore.errors.Terminated
        raise interrupted(err, out) from None
    if main:
        console.print(console_table([load_run(result.out_dir)], title=str(result.out_dir)))
        if katib_metrics:
            for line in katib_lines(result.summary):
                print(line, flush=True)


def resume(
    run_dir: Annotated[Path, typer.Argument(help="the run dir to continue (the --out of `fedcore run`)")],
    set_: SetOpt = None,
    data: Annotated[str | None, typer.Option("--data", help="FederatedDataset artifact dir or s3:// prefix")] = None,
    stage: StagesOpt = None,
    progress: Annotated[bool, typer.Option(help="show the progress bar")] = True,
    nproc: Annotated[int, typer.Option("--nproc", min=1, help="processes (torchrun), any number")] = 1,
    tracking: TrackingOpt = None,
    tracking_uri: TrackingUriOpt = None,
) -> None:
    """Continue an interrupted run, or extend a finished one, with the config it recorded.

    The same as `fedcore run --resume RUN`; --set train.rounds=N trains it further."""
    run(config=None, resume=run_dir, set_=set_, data=data, stage=stage, progress=progress, nproc=nproc,
        tracking=tracking, tracking_uri=tracking_uri)


def resumed_config(config: Path | None, resume: Path | None) -> Path:
    """The config a run reads: CONFIG when given, else the config.yaml of the run dir --resume names
    (every run records it when it starts, so an interrupted run has one too)."""
    from fedcore.errors import UserError  # lazy: CLI start-up

    if config is not None:
        return config
    if resume is None:
        raise UserError("pass the experiment config (fedcore run configs/quickstart.yaml), or --resume RUN "
                        "to continue a run dir with its own config")
    run_dir = resume_run_dir(resume)
    if run_dir is None or not (run_dir / "config.yaml").is_file():
        where = f"'{run_dir}' holds no config.yaml" if run_dir else f"'{resume}' is not inside a run dir"
        raise UserError(f"--resume '{resume}': {where} (runs record it since fedcore 0.1; earlier ones did not); "
                        f"pass the run's config as well: fedcore run CONFIG --resume {resume}")
    return run_dir / "config.yaml"


def check_resumed_config(given: Path, cfg, resume: Path) -> None:
    """Refuse a CONFIG (with its --set) other than the one the resumed run recorded, naming the keys
    that differ, before any data is loaded; the round budget may grow, tracking may change.
    A run without a recorded config is checked against its checkpoint's, when it loads."""
    from fedcore.errors import UserError  # lazy: CLI start-up
    from fedcore.registries import load_config  # lazy: CLI start-up
    from fedcore.reporting.config_diff import resume_mismatch  # lazy: CLI start-up

    run_dir = resume_run_dir(resume)
    if run_dir is None or not (run_dir / "config.yaml").is_file():
        return
    recorded = load_config(run_dir / "config.yaml")
    if recorded.resume_hash() != cfg.resume_hash():
        why = resume_mismatch(recorded.resume_dict(), cfg.resume_dict())
        raise UserError(f"'{given}' is not the config '{run_dir}' ran ({why}); leave the config out to resume with "
                        "the run's own "
                        f"(fedcore run --resume {run_dir}; --set train.rounds=N extends it)")


class RecordConfig(Callback):
    """Writes OUT/config.yaml when a run starts, so `fedcore run --resume OUT` finds the config of a
    run interrupted before its end (which writes it again, with what was resumed)."""

    def on_run_start(self, info: dict[str, Any]) -> None:
        from fedcore.io import atomic_write_bytes  # lazy: CLI start-up

        atomic_write_bytes(Path(info["out_dir"]) / "config.yaml", info["config"].to_yaml().encode())


def run_config(config: Path, set_: list[str] | None, sweep: Path | None, method: str | None) -> tuple[list[str], Any]:
    """(every override, the config): --sweep's scene and row, then --set (which wins; ranks get the
    whole list). With --sweep, the federation is checked and one line says what was applied."""
    from fedcore.registries import load_config  # lazy: CLI start-up

    chosen, spec = row_overrides(config, set_, sweep, method)
    overrides = [*chosen, *(set_ or [])]
    cfg = load_config(config, overrides)
    if sweep is not None:
        check_scene(cfg, spec, sweep, config)
        if int(os.environ.get("RANK", "0")) == 0:  # one line per run, not per rank
            console.print(sweep_line(spec, sweep, config, method, chosen), markup=False, highlight=False,
                          soft_wrap=True)
    return overrides, cfg


def row_overrides(config: Path, set_: list[str] | None, sweep: Path | None, method: str | None) -> tuple[list, Any]:
    """(--method / --sweep as overrides, the sweep spec or None): the sweep's scene (its set, its seed
    keys at the run's seed), then the row's method switch and its values at the chosen setting."""
    from fedcore.pipeline.plan import load_sweep_spec, one_row_overrides  # lazy: CLI start-up
    from fedcore.registries import load_config  # lazy: CLI start-up

    if sweep is None and method is None:
        return [], None
    if method is not None and any(s.startswith("method.name=") for s in set_ or []):
        raise UserError("pass the method once: --method or --set method.name=..., not both")
    spec = None if sweep is None else load_sweep_spec(sweep)
    scene = [] if spec is None or spec.scene is None else list(spec.scene.set)
    if scene and spec.scene.seed_keys:  # as the bench set them: to the run's seed
        seed = load_config(config, [*scene, *(set_ or [])]).seed
        scene += [f"{k}={seed}" for k in spec.scene.seed_keys]
    rows = one_row_overrides(load_config(config, [*scene, *(set_ or [])]), spec, method, f"sweep file '{sweep}'")
    return [*scene, *rows], spec


def check_scene(cfg, spec, sweep: Path, config: Path) -> None:
    """Refuse a run whose data, partition or noise differ from the federation the sweep file was tuned
    and chosen on: its values would train another federation than the one they were picked for."""
    from fedcore.bench.sweepfile import federation_mismatch  # lazy: CLI start-up

    if spec.scene is None or (diff := federation_mismatch(cfg, spec.scene)) is None:
        return
    raise UserError(f"'{config}' (with the scene's set and --set) is another federation than scene "
                    f"'{spec.scene.name}', which sweep file '{sweep}' was tuned and chosen on ({diff}); train on "
                    f"the scene's config ({spec.scene.config or 'see the file'}) with no --set of data, partition "
                    "or noise, or delete the file's `scene:` to train its values on this federation")


def sweep_line(spec, sweep: Path, config: Path, method: str | None, applied: list[str]) -> str:
    """What --sweep applied, in one line: the row, its setting, the scene, and the overrides."""
    from fedcore.pipeline.plan import selected_setting  # lazy: CLI start-up

    row = method or spec.selected
    setting = selected_setting(spec.model_copy(update={"methods": [method]}) if method else spec)
    why = "" if method else " (the bench's choice)"
    scene = spec.scene
    where = (f"on scene '{scene.name}' ({len(scene.set)} scene overrides first)" if scene is not None else
             f"on '{config}''s own data, partition and noise (the file names no scene)")
    return (f"sweep '{sweep}': training row '{row}' at its {setting} setting{why} {where}; applied: "
            f"{', '.join(applied) or 'nothing'} (--set after them)")


def interrupted(err: KeyboardInterrupt, out: Path):
    """The one line and exit code of a run stopped by a signal: what it kept and how to go on.

    No checkpoint is written on SIGTERM: the signal lands mid-round, where the per-client store
    may already hold the round's updates while the server state does not, so only a round's end
    is consistent; and deferring the stop to the next round's end can outlast Kubernetes' grace
    period (30 s by default) on a long round, when SIGKILL would take the pod anyway. So the line
    says what the periodic and stage-end checkpoints kept, and how to make a run resumable.
    """
    from fedcore.engine.checkpoint import saved_round  # lazy: CLI start-up

    sig = stop_signal(err)
    rnd = saved_round(out / "checkpoints")
    if rnd is not None or any((out / "checkpoints").glob("*.pt")):
        upto = f" up to round {rnd}" if rnd is not None else ""
        tail = f"its checkpoints{upto} are kept: continue it with the same command plus --resume {out}"
    else:
        tail = ("nothing was saved (a run checkpoints at stage ends only, unless --set "
                "train.checkpoint_every=N saves every N rounds, which makes a killed run resumable)")
    return Interrupted(f"{stopped_line(sig)} before the run finished; {tail}", EXIT_CODES[sig])


def katib_lines(summary: dict[str, float]) -> list[str]:
    """final/val_* metrics as Katib reads them: 'val_acc_last10=0.8123', and the same under the
    task-free name (val_score_*: accuracy, or mAP on multi-label runs) that `deploy katib` optimizes."""
    lines = []
    for key, value in summary.items():
        if key.startswith("final/val") and value == value:  # NaN: no line, Katib reports it unavailable
            name = key.split("/", 1)[1]
            lines.append(f"{name}={value:.6f}")
            generic = name.replace("_acc_", "_score_").replace("_mAP_", "_score_")
            if generic != name:
                lines.append(f"{generic}={value:.6f}")
    return lines


def _passed_on(set_, data, resume, stage, progress) -> list[str]:
    """The options of `fedcore run` that every rank gets again."""
    args = [a for s in set_ or [] for a in ("--set", s)]
    args += ["--data", data] if data else []
    args += ["--resume", str(resume)] if resume else []
    args += [a for s in stage or [] for a in ("--stage", s)]
    return args + ([] if progress else ["--no-progress"])


def launch_ranks(cfg, nproc: int, out: Path, resume: Path | None, args: list[str]) -> None:
    """`fedcore run --nproc N`: torchrun N ranks of this run; a failed rank ends it with one line."""
    import torch  # lazy: CLI start-up

    from fedcore.engine import distributed  # lazy: CLI start-up
    from fedcore.models import resolve_device  # lazy: CLI start-up

    if distributed.launched_world() > 1:
        raise UserError("--nproc starts torchrun itself; under torchrun (or a TrainJob) leave --nproc out")
    device = resolve_device(cfg.train.device)
    distributed.rank_device(device, nproc - 1, torch.cuda.device_count() if device.type == "cuda" else 0)
    if resume is not None:  # refuse a bad checkpoint here, in one line, rather than once per rank
        from fedcore.engine.checkpoint import load_checkpoint  # lazy: CLI start-up
        from fedcore.reporting.config_diff import resume_mismatch  # lazy: CLI start-up

        load_checkpoint(resume, cfg.resume_hash(), lambda recorded: resume_mismatch(recorded, cfg.resume_dict()))
    from fedcore.engine.interrupt import terminate_as_interrupt  # lazy: CLI start-up

    try:  # a stopped launcher ends as a stopped one-process run: one line, exit 143 (130 for Ctrl-C)
        with terminate_as_interrupt():
            code = distributed.launch(nproc, "fedcore", ["run", *args])
    except KeyboardInterrupt as err:
        raise interrupted(err, out) from None
    if code == 0:
        return
    resumable = any((out / "checkpoints").glob("*.pt"))
    hint = (f"continue it with the same command plus --resume {out} (any --nproc)" if resumable
            else "it wrote no checkpoint; fix the cause and run it again")
    make_console(stderr=True).print(
        f"error: the {nproc}-process run failed (torchrun exit code {code}; the failing rank's error is above); "
        f"{hint}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(1)


def resume_run_dir(resume: Path | None) -> Path | None:
    """The run dir a --resume continues by default: the folder itself, or the run dir holding a
    checkpoint file (RUN/checkpoints/x.pt -> RUN). Resuming from a file used to train into a new
    runs/<method>-<hash>, leaving the run it came from unfinished. None for a loose file."""
    if resume is None:
        return None
    if resume.is_dir():
        return resume.parent if resume.name == "checkpoints" and not (resume / "checkpoints").is_dir() else resume
    return resume.parent.parent if resume.parent.name == "checkpoints" else None


def check_run_dir(out: Path, resume: Path | None) -> None:
    """Refuse an --out that is a file or would overwrite a run.

    A run dir (finished, or interrupted with checkpoints) is only written again when it is the
    one being resumed; a fresh run there would silently replace its model, metrics and
    checkpoints. Scripts that redo unfinished runs pass --resume when checkpoints exist.
    """
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

"""`fedcore quickstart` (`make run`): the local `sweep` pipeline, every method on noisy digits,
beside FedAvg on clean labels (the reference of what the noise costs).

It runs the `sweep` pipeline under kfp.local in its folded local shape (one task per run, two
runs side by side; `pipelines.sweep`): one prepared dataset per noise setting shared by every
method, each run tracked in an embedded MLflow store under the run dir.

Every method runs at its tuned setting (configs/sweeps/quickstart_tuned.yaml: the same `fedcore
tune` budget for each, on seed 100, judged on the clients' noisy validation split), so the table
compares methods, not one shared optimizer setting; `--untuned` runs the presets' shared defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from fedcore.cli.console import local_folder, make_console, set_option
from fedcore.cli.pipeline import TrackOpt, UriOpt, find_config, load_pipeline_config, local_resources, print_result

console = make_console()
SetOpt = set_option("dotted override of configs/quickstart.yaml for every run (repeatable)")

# Every single-label method: each takes 5-15 s of one core on the quickstart budget.
# (fedharmony is multi-label and has its own digits_mosaic preset.)
QUICKSTART_METHODS = ("fedavg", "fedprox", "symmetric_ce", "coteaching", "fednoro", "fedcorr", "dividemix", "fedsir",
                     "fedrg", "fedgr")
CLEAN = ["noise.type=none"]
CLEAN_METHODS = ["fedavg"]  # the clean setting is a reference: what FedAvg reaches without noise
# The quickstart logs no served MLflow model (state_dicts are still logged): torch.export costs ~5 s
# of CPU a run, 11 runs here, and the 3-minute budget of `make run` cannot carry it.
QUICKSTART_OVERRIDES = ["tracking.log_model=false"]
# Each method's tuned values (the quickstart's equal-budget tunes; `fedcore bench lab/grids/quickstart.yaml`
# writes such a file as OUT/quickstart/tuned_sweep.yaml) and the validation split they were tuned on, which also
# gives the table its acc-at-val-best column.
TUNED_SWEEP = "sweeps/quickstart_tuned.yaml"
TUNED_OVERRIDES = ["data.validation.fraction=0.1"]


def quickstart_pipeline(out: Path, rounds: int | None = None, methods: tuple[str, ...] = QUICKSTART_METHODS,
                        tuned: bool = True, overrides: list[str] | None = None, tracking: bool = True,
                        uri: str | None = None):
    """(config, sweep pipeline): methods on the config's noise, FedAvg on clean labels, one seed;
    tuned: each method at its tuned setting, else all at the config's shared one; `overrides`
    (--set) after the quickstart's own; tracking and `uri` as `fedcore pipeline run` takes them."""
    from fedcore.methods.registry import available_methods  # lazy: CLI start-up
    from fedcore.pipeline.plan import SweepSpec, load_sweep_spec  # lazy: CLI start-up
    from fedcore.pipeline.resources import PipelineResources  # lazy: CLI start-up
    from fedcore.tracking.base import noise_label  # lazy: CLI start-up
    from pipelines import PipelineOptions, build_pipeline  # lazy: CLI start-up

    sets = [*QUICKSTART_OVERRIDES, *(TUNED_OVERRIDES if tuned else [])]
    sets += [f"train.rounds={rounds}"] if rounds else []
    cfg = load_pipeline_config(find_config(), [*sets, *(overrides or [])], tracking=tracking, local_root=out,
                               uri=uri)
    known = set(available_methods())
    chosen = [m for m in methods if m in known]
    own = load_sweep_spec(find_config(TUNED_SWEEP)).method_overrides if tuned else {}
    spec = SweepSpec(methods=chosen, seeds=[cfg.seed], settings={noise_label(cfg): [], "clean": CLEAN},
                     setting_methods={"clean": [m for m in CLEAN_METHODS if m in chosen] or chosen[:1]},
                     method_overrides={m: o for m, o in own.items() if m in chosen})
    # Two runs at once keep both cores busy; more would only contend for them.
    options = PipelineOptions(resources=local_resources(PipelineResources()), sweep=spec, parallelism=2, fold=True)
    return cfg, build_pipeline("sweep", cfg, options)


def run_quickstart(out: Path, console: Console, rounds: int | None = None,
                   methods: tuple[str, ...] = QUICKSTART_METHODS, tuned: bool = True,
                   overrides: list[str] | None = None, tracking: bool = True, uri: str | None = None) -> object:
    from pipelines.runner import run_local  # lazy: CLI start-up

    cfg, pipeline = quickstart_pipeline(out, rounds, methods, tuned, overrides, tracking, uri)
    setting = (f"each method at its tuned setting\n  tuned values: configs/{TUNED_SWEEP} (--untuned: the config's)"
               if tuned else "every method at the config's shared setting")
    # Short lines: the header fits a 100-column terminal like the table below it.
    for line in (f"quickstart: the local sweep pipeline on {cfg.data.name}, {setting}",
                 f"  noisy labels: {' '.join(methods)}", f"  clean labels: {' '.join(CLEAN_METHODS)}",
                 f"  task logs: {out / 'kfp-local.log'}"):
        console.print(line, soft_wrap=True, markup=False, highlight=False)
    result = run_local(pipeline, out)
    print_result("sweep", result, cfg, out, console)
    report = write_run_report(getattr(result, "run_dir", None), out / "report")
    if report is not None:
        console.print(f"report: {report} (accuracy per round: {report.parent / 'accuracy.png'})",
                      soft_wrap=True, markup=False, highlight=False)
    return result


def write_run_report(run_dir: Path | None, out: Path) -> Path | None:
    """`fedcore report` over the runs of a finished local pipeline (their checkpoint artifacts)."""
    from fedcore.reporting.report import write_report  # lazy: CLI start-up

    runs = sorted(p.parent for p in run_dir.glob("**/checkpoint/metrics.json")) if run_dir else []
    return write_report(runs, out) if runs else None


def quickstart(
    out: Annotated[Path, typer.Option("--out", "-o", help="where runs and the dataset go")] = Path("runs/quickstart"),
    rounds: Annotated[int | None, typer.Option(help="override train.rounds")] = None,
    untuned: Annotated[bool, typer.Option("--untuned", help="run every method at the config's shared optimizer "
                                                             "setting and default params, without validation")] = False,
    set_: SetOpt = None,
    tracking: TrackOpt = True,
    tracking_uri: UriOpt = None,
) -> None:
    """The `make run` job: the local sweep pipeline comparing methods on noisy digits, FedAvg on clean ones.

    It reads configs/quickstart.yaml; --set changes it for every run (after the quickstart's own
    settings, e.g. --set train.rounds=5)."""
    run_quickstart(local_folder(out), console, rounds=rounds, tuned=not untuned, overrides=set_, tracking=tracking,
                   uri=tracking_uri)

"""Pipeline definitions: `experiment`, `sweep`, `retrain`, built per config at compile time, and
`bench`, built per grid (`cfg` then holds only its tracking settings).

`build_pipeline(name, cfg, options)` returns the kfp pipeline object; the same object is
compiled for a cluster (`runner.compile_pipeline`) or run on a laptop (`runner.run_local`).
`cfg` and `options.overrides` become the defaults of its run-time inputs `config`
and `overrides`; the graph is planned from `cfg` with the overrides applied.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from fedcore.config import ExperimentConfig
from fedcore.errors import UserError
from fedcore.pipeline.plan import SweepSpec
from fedcore.pipeline.resources import PipelineResources


@dataclass
class PipelineOptions:
    resources: PipelineResources = field(default_factory=PipelineResources)
    sweep: SweepSpec = field(default_factory=SweepSpec)
    parallelism: int = 0  # sweep: settings trained at once (0 = no limit)
    data_prefix: str = ""  # retrain: where dated snapshots land
    model_name: str = ""  # retrain: registered model name
    overrides: tuple[str, ...] = ()  # the `overrides` input's default (the --set list)
    fold: bool = False  # sweep: one task per run, the shape kfp.local can run side by side (pipelines.sweep)
    sweep_file: str = ""  # where `sweep` came from, for error messages
    grid: Any = None  # bench: the loaded fedcore.bench.grid.Grid


def _experiment(cfg: ExperimentConfig, o: PipelineOptions) -> Any:
    from pipelines.experiment import build

    return build(cfg, o.resources, o.overrides)


def _sweep(cfg: ExperimentConfig, o: PipelineOptions) -> Any:
    from pipelines.sweep import build

    return build(cfg, o.resources, o.sweep, o.parallelism, o.overrides, o.fold)


def _retrain(cfg: ExperimentConfig, o: PipelineOptions) -> Any:
    from fedcore.pipeline.plan import apply, selected_overrides
    from pipelines.retrain import build

    if o.sweep != SweepSpec():  # --sweep FILE (e.g. fedcore bench's tuned_sweep.yaml) and/or --method
        where = f"sweep file '{o.sweep_file}'" if o.sweep_file else "the sweep"
        cfg = apply(cfg, selected_overrides(o.sweep, cfg, where))  # the config input trains the chosen row
    return build(cfg, o.resources, o.data_prefix, o.model_name, o.overrides)


def _bench(cfg: ExperimentConfig, o: PipelineOptions) -> Any:
    from pipelines.bench import build

    if o.grid is None:
        raise UserError("the bench pipeline needs a grid: fedcore pipeline compile bench GRID.yaml")
    return build(o.grid, cfg, o.resources, o.overrides, o.parallelism, o.model_name)


BUILDERS: dict[str, Callable[[ExperimentConfig, PipelineOptions], Any]] = {
    "experiment": _experiment, "sweep": _sweep, "retrain": _retrain, "bench": _bench,
}


def build_pipeline(name: str, cfg: ExperimentConfig, options: PipelineOptions | None = None) -> Any:
    from fedcore.pipeline.plan import apply
    from fedcore.pipeline.resources import check_accelerators

    if name not in BUILDERS:
        raise UserError(f"unknown pipeline '{name}'; choose one of {sorted(BUILDERS)}")
    options = options or PipelineOptions()
    device = apply(cfg, options.overrides).train.device
    # The tasks' GPUs follow the config it compiles (a CPU config asks for none), unless --gpus says.
    options = replace(options, resources=options.resources.for_device(device))
    check_accelerators(options.resources, device)
    return BUILDERS[name](cfg, options)

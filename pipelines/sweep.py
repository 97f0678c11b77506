"""sweep: ParallelFor over noise settings; per setting one dataset, shared by every method x seed.

Run-time inputs: `config`, `overrides`, `methods`, `seeds` and `settings` (a list of
{setting, overrides}), defaults from compile time. Why this shape (kfp 2.17, checked with
kfp.local and the compiler):
- the noise settings are the ParallelFor axis, over the `settings` input itself: each
  iteration prepares one dataset that all of its runs train on, and the last evaluate's
  rows are fanned in with dsl.Collected into `compare`;
- methods x seeds are unrolled inside the loop body at compile time (slot i is method
  i // len(seeds), seed i % len(seeds)), because every method declares its own stages and
  each stage is its own task; a loop body cannot change shape per item, so a run may
  change methods and seeds only to ones with the same count and stages;
- no nested ParallelFor: kfp.local 2.17 cannot fan in (Collected) from a nested loop;
- the evaluates of one iteration are chained through their `rows` output so one output
  per iteration carries every run's record to the fan-in.

Local runs (`fold=True`: `fedcore quickstart`, `fedcore pipeline run --local`) take another
shape, because kfp.local runs a DAG's tasks one at a time and only a ParallelFor's iterations
side by side: with one task per stage, the runs of one setting would share a single core.
Folded, each run is one task (`train_evaluate`: every stage, then its evaluation), so the
runs of a setting become the iterations of a ParallelFor over its slots, and the settings,
fixed at compile time, are unrolled, each with its own prepared dataset. That shape also lets
a setting train only some methods (`SweepSpec.setting_methods`, e.g. a clean FedAvg reference).
"""

# No `from __future__ import annotations`: kfp reads pipeline parameter annotations as objects.
from kfp import dsl

from components import compare, merge_rows, prepare_data, start_tracking, train_evaluate
from fedcore.config import ExperimentConfig
from fedcore.errors import ConfigError
from fedcore.pipeline.plan import SweepSpec, apply, config_input, plan_sweep, shared_data, sweep_axes
from fedcore.pipeline.resources import PipelineResources
from pipelines.common import evaluation, exit_task, light, stage_chain, training


def build(cfg: ExperimentConfig, res: PipelineResources | None = None, spec: SweepSpec | None = None,
          parallelism: int = 0, overrides: tuple[str, ...] = (), fold: bool = False):
    """The sweep pipeline: settings x methods x seeds of `spec` over `cfg` plus `overrides` (the inputs' defaults).

    fold: the local shape (module docstring); parallelism then bounds the runs trained at once."""
    res, spec = res or PipelineResources(), spec or SweepSpec()
    base = shared_data(apply(cfg, overrides))
    plans = plan_sweep(base, spec)
    if not fold and any(p.restricted for p in plans):
        raise ConfigError("setting_methods needs the folded local sweep (fedcore pipeline run sweep --local --fold); "
                          "on a cluster, sweep the restricted setting in its own pipeline")
    methods_default, seeds_default = (list(a) for a in sweep_axes(base, spec)[:2])
    settings_default = [p.item() for p in plans]
    config_default, default_overrides = config_input(cfg), list(overrides)
    body = _folded_body if fold else _loop_body

    @dsl.pipeline(name="fedcore-sweep",
                  description=f"{len(plans)} settings x {len(plans[0].runs)} runs on {base.data.name}")
    def sweep(config: str = config_default, overrides: list = default_overrides,  # noqa: B006 (kfp reads defaults)
              methods: list = methods_default, seeds: list = seeds_default,  # noqa: B006
              settings: list = settings_default):  # noqa: B006
        inputs = {"config": config, "overrides": overrides}
        with dsl.ExitHandler(exit_task(res, config, overrides, settings), name="sweep"):
            parent = start_tracking(**inputs, pipeline="sweep", job_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                                    methods=methods, settings=settings)
            track = light(parent, res, "start-tracking", cache=False).outputs["tracking"]
            rows = body(res, plans, parallelism, inputs, methods, seeds, settings, track)
            light(compare(**inputs, **rows, tracking=track), res, "compare", cache=False)

    return sweep


def _loop_body(res: PipelineResources, plans, parallelism: int, inputs: dict, methods, seeds, settings,
               track) -> dict:
    """The cluster's shape: a ParallelFor over the settings input, one task per stage; compare's rows."""
    runs = plans[0].runs  # the same (method, seed, stages) in every setting
    many_seeds = len({r.seed for r in runs}) > 1
    with dsl.ParallelFor(settings, parallelism=parallelism) as item:
        prep = light(prepare_data(**inputs, setting=item), res, "prepare-data")
        rows = "[]"
        for i, run in enumerate(runs):
            label = f"{run.method}-s{run.seed}" if many_seeds else run.method
            slot = {**inputs, "setting": item, "methods": methods, "seeds": seeds, "slot": i, "slots": len(runs)}
            last = stage_chain(res, label, run.stages, prep.outputs["dataset"], track, **slot)
            ev = evaluation(res, label, last, prep.outputs["dataset"], prep.outputs["report"], track, rows=rows,
                            **slot)
            rows = ev.outputs["Output"]
    return {"rows": dsl.Collected(rows)}


def _folded_body(res: PipelineResources, plans, parallelism: int, inputs: dict, methods, seeds, settings,
                 track) -> dict:
    """The local shape: per setting (unrolled), its dataset, then a ParallelFor over the slots it trains,
    one task per run; compare's rows (the last setting's fan-in, the earlier ones merged)."""
    earlier, fan_in = "[]", None
    for plan in plans:
        if fan_in is not None:
            earlier = light(merge_rows(rows=fan_in, previous=earlier), res, "merge-rows").output
        prep = light(prepare_data(**inputs, setting=plan.item()), res, f"prepare-data-{plan.name}")
        with dsl.ParallelFor(list(plan.active), parallelism=parallelism) as slot:
            run = train_evaluate(**inputs, setting=plan.item(), methods=methods, seeds=seeds, slot=slot,
                                 slots=len(plan.runs), dataset=prep.outputs["dataset"],
                                 report=prep.outputs["report"], tracking=track)
            training(run, res, f"{plan.name}-run")
        fan_in = dsl.Collected(run.outputs["Output"])
    return {"rows": fan_in, "more_rows": earlier}

"""sweep: ParallelFor over noise settings; per setting one dataset, shared by every method x seed.

Why this shape (kfp 2.17, checked with kfp.local and the compiler):
- the noise settings are the ParallelFor axis: each iteration prepares one dataset that
  all of its runs train on, and the last evaluate's rows are fanned in with
  dsl.Collected into `compare`;
- methods x seeds are unrolled inside the loop body at compile time, because every method
  declares its own stages and each stage is its own task (named `<method>-<stage>`);
  a loop body cannot change shape per item;
- no nested ParallelFor: kfp.local 2.17 cannot fan in (Collected) from a nested loop;
- the evaluates of one iteration are chained through their `rows` output so one output
  per iteration carries every run's record to the fan-in.
"""

# No `from __future__ import annotations`: kfp reads pipeline parameter annotations as objects.
from kfp import dsl

from components import compare, prepare_data, start_tracking
from fedcore.config import ExperimentConfig
from fedcore.pipeline.plan import SweepSpec, config_text, plan_sweep, shared_data
from fedcore.pipeline.resources import PipelineResources
from pipelines.common import evaluation, light, stage_chain


def build(cfg: ExperimentConfig, res: PipelineResources | None = None, spec: SweepSpec | None = None,
          parallelism: int = 0):
    """The sweep pipeline: settings x methods x seeds of `spec` over the base config `cfg`."""
    res = res or PipelineResources()
    base = shared_data(cfg)
    text = config_text(base)
    plans = plan_sweep(base, spec or SweepSpec())
    items = [p.item() for p in plans]
    runs = plans[0].runs  # the same (method, seed, stages) in every setting; overrides/hashes come per item
    many_seeds = len({r.seed for r in runs}) > 1

    @dsl.pipeline(name="fedcore-sweep", description=f"{len(plans)} settings x {len(runs)} runs on {base.data.name}")
    def sweep() -> str:
        parent = light(start_tracking(config_yaml=text, pipeline="sweep"), res, "start-tracking", cache=False)
        track = parent.outputs["tracking"]
        with dsl.ParallelFor(items, parallelism=parallelism) as item:
            prep = prepare_data(config_yaml=text, overrides=item.overrides, data_hash=item.data_hash)
            light(prep, res, "prepare-data")
            rows = "[]"
            for i, run in enumerate(runs):
                label = f"{run.method}-s{run.seed}" if many_seeds else run.method
                config = {"config_yaml": text, "overrides": getattr(item, f"o{i}"),
                          "config_hash": getattr(item, f"h{i}"), "setting": item.setting}
                last = stage_chain(res, label, run.stages, prep.outputs["dataset"], track, **config)
                ev = evaluation(res, label, last, prep.outputs["dataset"], prep.outputs["report"], track,
                                rows=rows, **config)
                rows = ev.outputs["Output"]
        table = compare(config_yaml=text, rows=dsl.Collected(rows), tracking=track)
        light(table, res, "compare", cache=False)
        return table.outputs["Output"]

    return sweep

"""bench: `fedcore bench GRID` as a pipeline; per scene, shared datasets -> tunes -> runs -> choose.

Run-time inputs: `grid` (the grid with its scene configs, `fedcore.bench.tasks.grid_input`),
`overrides` (the --set list every scene gets, tracking settings included), `config` (the
tracking settings of the parent run and the registry) and `model_prefix` (the chosen model of
scene S is registered as PREFIX-S). The graph is the grid's, unrolled at compile time, so a
run may change params but not the scenes, methods or seeds: recompile for those.

Per scene (kfp 2.17; the reasons are those of pipelines/sweep.py):
- one `bench_data` task builds every seed's dataset, the tuning seed's too, into one artifact
  that every task of the scene reads (an artifact enters a ParallelFor intact, where kfp.local
  would replace a task-output parameter with the loop item);
- a ParallelFor over the methods: the method's tune, then its tuned run on each reporting seed,
  chained in the body through their `rows` output, so one output per iteration carries the
  tune's record and the runs' rows to the fan-in (no nested loop: kfp.local cannot fan in
  from one);
- a ParallelFor over (method, seed) for the default runs, fanned in through `merge_rows`
  (a task takes one dsl.Collected here, as the sweep's compare does);
- `choose`: the choice from the rows (validation only), bench.json, the chosen model
  registered with alias `selected`, all logged on the parent run; the scenes' choose tasks
  are chained, so the last one's bench.json holds every scene.
kfp.local runs a DAG's tasks one at a time and a ParallelFor's iterations side by side, so
locally the tunes (and then the default runs) of a scene train in parallel, --parallelism at once.
Each run is one task (`fedcore run`'s whole run), not one task per stage: the bench compares
whole runs, and a stage split would only serialize them under kfp.local.
"""

# No `from __future__ import annotations`: kfp reads pipeline parameter annotations as objects.
from kfp import dsl

from components import merge_rows, start_tracking
from components.bench import bench_data, bench_run, bench_tune, choose
from fedcore.bench.grid import Grid
from fedcore.bench.tasks import grid_input
from fedcore.config import ExperimentConfig
from fedcore.errors import ConfigError
from fedcore.pipeline.plan import config_input
from fedcore.pipeline.resources import PipelineResources
from pipelines.common import exit_task, light, training

MODEL_PREFIX = "fedcore-bench"


def build(g: Grid, cfg: ExperimentConfig, res: PipelineResources | None = None, overrides: tuple[str, ...] = (),
          parallelism: int = 0, model_prefix: str = ""):
    """The bench pipeline of grid `g`; `cfg` holds the tracking settings (the `config` input's default)."""
    res = res or PipelineResources()
    if res.workers > 1:
        raise ConfigError("the bench pipeline trains each run in its own task; drop --workers (TrainJobs are "
                          "for the experiment, sweep and retrain pipelines)")
    grid_default, config_default, default_overrides = grid_input(g), config_input(cfg), list(overrides)
    scenes = [{"setting": name} for name in g.scenes]  # the exit handler names a scene without runs

    @dsl.pipeline(name="fedcore-bench", description=f"{len(g.scenes)} scenes x {len(g.methods)} methods, "
                  f"{g.trials} trials each, seeds {g.seeds}")
    def bench(grid: str = grid_default, overrides: list = default_overrides,  # noqa: B006 (kfp reads it)
              config: str = config_default, model_prefix: str = model_prefix or MODEL_PREFIX):
        with dsl.ExitHandler(exit_task(res, config, [], scenes), name="bench"):
            parent = start_tracking(config=config, overrides=[], pipeline="bench",
                                    job_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER, methods=list(g.methods),
                                    settings=scenes)
            track = light(parent, res, "start-tracking", cache=False).outputs["tracking"]
            previous = "{}"
            for name in g.scenes:
                inputs = {"grid": grid, "overrides": overrides, "scene": name}
                previous = _scene(res, g, name, inputs, track, parallelism, config, model_prefix, previous)

    return bench


def _scene(res: PipelineResources, g: Grid, name: str, inputs: dict, track, parallelism: int, config,
           model_prefix, previous):
    """One scene's tasks; returns its choose task's output (bench.json so far)."""
    data = light(bench_data(**inputs), res, f"{name}-data").outputs["data"]
    with dsl.ParallelFor([{"row": m, "setting": "tuned"} for m in g.methods], parallelism=parallelism) as item:
        tune = training(bench_tune(**inputs, item=item, data=data), res, f"{name}-tune")
        rows = tune.outputs["Output"]
        for seed in g.seeds:
            run = bench_run(**inputs, item=item, seed=seed, data=data, tracking=track,
                            tune=tune.outputs["tune"], rows=rows)
            rows = training(run, res, f"{name}-tuned-s{seed}").outputs["Output"]
    tuned = dsl.Collected(rows)
    items = [{"row": m, "setting": "default", "seed": s} for m in g.methods for s in g.seeds]
    with dsl.ParallelFor(items, parallelism=parallelism) as item:
        default = training(bench_run(**inputs, item=item, data=data, tracking=track), res, f"{name}-default")
    merged = light(merge_rows(rows=dsl.Collected(default.outputs["Output"])), res, f"{name}-merge-rows").output
    pick = choose(**inputs, config=config, tuned=tuned, default_rows=merged, tracking=track,
                  model_prefix=model_prefix, previous=previous)
    return light(pick, res, f"{name}-choose", cache=False).outputs["Output"]

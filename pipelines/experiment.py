"""experiment: prepare -> one task per stage of the method -> evaluate, under one parent run.

Run-time inputs: `config` (default: the compiled config) and `overrides` (default:
the `--set` list it was compiled with). The graph follows the method's declared stages;
a run may change anything that keeps them (see `fedcore.pipeline.inputs`).
"""

# No `from __future__ import annotations`: kfp reads pipeline parameter annotations as objects.
from kfp import dsl

from components import prepare_data, start_tracking
from fedcore.config import ExperimentConfig
from fedcore.pipeline.plan import apply, config_input, stage_shape
from fedcore.pipeline.resources import PipelineResources
from pipelines.common import EXPERIMENT_RUN, evaluation, exit_task, light, stage_chain


def build(cfg: ExperimentConfig, res: PipelineResources | None = None, overrides: tuple[str, ...] = ()):
    """The experiment pipeline: `cfg` and `overrides` are its inputs' defaults."""
    res = res or PipelineResources()
    run_cfg = apply(cfg, overrides)
    config_default, method, shape = config_input(cfg), run_cfg.method.name, stage_shape(run_cfg)
    default_overrides = list(overrides)

    @dsl.pipeline(name="fedcore-experiment", description=f"{method} on {run_cfg.data.name} ({run_cfg.config_hash()})")
    def experiment(config: str = config_default, overrides: list = default_overrides):  # noqa: B006 (kfp reads it)
        inputs = {"config": config, "overrides": overrides}
        with dsl.ExitHandler(exit_task(res, config, overrides, []), name="experiment"):
            parent = start_tracking(**inputs, pipeline="experiment", job_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                                    methods=[], settings=[])
            track = light(parent, res, "start-tracking", cache=False).outputs["tracking"]
            prep = light(prepare_data(**inputs, setting={}), res, "prepare-data")
            run = {**inputs, **EXPERIMENT_RUN}
            last = stage_chain(res, method, shape, prep.outputs["dataset"], track, **run)
            evaluation(res, method, last, prep.outputs["dataset"], prep.outputs["report"], track,
                       finish_parent=True, **run)

    return experiment

"""retrain: newest snapshot -> prepare -> stages -> evaluate -> champion/challenger registration."""

# No `from __future__ import annotations`: kfp reads pipeline parameter annotations as objects.
from kfp import dsl

from components import champion, latest_snapshot, prepare_data, start_tracking
from fedcore.config import ExperimentConfig
from fedcore.pipeline.plan import apply, config_input, require_served_model, stage_shape
from fedcore.pipeline.resources import PipelineResources
from fedcore.registries import check_snapshot_root
from pipelines.common import EXPERIMENT_RUN, evaluation, exit_task, light, stage_chain


def build(cfg: ExperimentConfig, res: PipelineResources | None = None, data_prefix: str = "",
          model_name: str = "", overrides: tuple[str, ...] = ()):
    """The retrain pipeline; `data_prefix`, `model_name`, `config` and `overrides` are run
    parameters (defaults baked in here). An empty data_prefix trains on the config's own `data.root`."""
    res = res or PipelineResources()
    run_cfg = apply(cfg, overrides)
    require_served_model(run_cfg)
    check_snapshot_root(run_cfg, data_prefix)  # compile time; the tasks check a run-time prefix (inputs.resolve)
    config_default, method, shape = config_input(cfg), run_cfg.method.name, stage_shape(run_cfg)
    default_model = model_name or f"fedcore-{run_cfg.data.name}-{method}"
    default_overrides = list(overrides)

    @dsl.pipeline(name="fedcore-retrain", description=f"scheduled retraining of {default_model}")
    def retrain(data_prefix: str = data_prefix, model_name: str = default_model, min_delta: float = 0.0,
                config: str = config_default, overrides: list = default_overrides):  # noqa: B006 (kfp reads it)
        inputs = {"config": config, "overrides": overrides}
        with dsl.ExitHandler(exit_task(res, config, overrides, []), name="retrain"):
            # Never cached: the point of a scheduled run is to see the newest snapshot and champion.
            snap = light(latest_snapshot(prefix=data_prefix), res, "latest-snapshot", cache=False)
            parent = start_tracking(**inputs, pipeline="retrain", job_id=dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                                    methods=[], settings=[])
            track = light(parent, res, "start-tracking", cache=False).outputs["tracking"]
            prep = light(prepare_data(**inputs, setting={}, data_root=snap.output), res, "prepare-data")
            run = {**inputs, **EXPERIMENT_RUN, "data_root": snap.output}
            last = stage_chain(res, method, shape, prep.outputs["dataset"], track, **run)
            ev = evaluation(res, method, last, prep.outputs["dataset"], prep.outputs["report"], track, **run)
            decide = champion(**inputs, model_name=model_name, dataset=prep.outputs["dataset"],
                              run=last.outputs["checkpoint"], run_id=last.outputs["Output"], tracking=track,
                              min_delta=min_delta, data_root=snap.output)
            light(decide.after(ev), res, "champion", cache=False)

    return retrain

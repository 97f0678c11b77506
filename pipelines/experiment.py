"""experiment: prepare -> the method's stages (one task each) -> evaluate, under one parent run."""

# No `from __future__ import annotations`: kfp reads pipeline parameter annotations as objects.
from kfp import dsl

from components import prepare_data, start_tracking
from fedcore.config import ExperimentConfig
from fedcore.pipeline.plan import config_text, stage_names
from fedcore.pipeline.resources import PipelineResources
from pipelines.common import evaluation, light, stage_chain


def build(cfg: ExperimentConfig, res: PipelineResources | None = None):
    """The experiment pipeline for `cfg`; its task graph follows the method's declared stages."""
    res = res or PipelineResources()
    text, method = config_text(cfg), cfg.method.name
    config = {"config_yaml": text, "overrides": "[]", "config_hash": cfg.config_hash()}

    @dsl.pipeline(name="fedcore-experiment", description=f"{method} on {cfg.data.name} ({cfg.config_hash()})")
    def experiment() -> str:
        parent = light(start_tracking(config_yaml=text, pipeline="experiment"), res, "start-tracking", cache=False)
        track = parent.outputs["tracking"]
        prep = light(prepare_data(config_yaml=text, overrides="[]", data_hash=cfg.data_hash()), res, "prepare-data")
        last = stage_chain(res, method, stage_names(cfg), prep.outputs["dataset"], track, **config)
        ev = evaluation(res, method, last, prep.outputs["dataset"], prep.outputs["report"], track,
                        finish_parent=True, **config)
        return ev.outputs["Output"]

    return experiment

"""retrain (for schedules): newest data snapshot -> prepare -> stages -> evaluate -> champion decision."""

# No `from __future__ import annotations`: kfp reads pipeline parameter annotations as objects.
from kfp import dsl

from components import champion, latest_snapshot, prepare_data, start_tracking
from fedcore.config import ExperimentConfig
from fedcore.pipeline.plan import config_text, stage_names
from fedcore.pipeline.resources import PipelineResources
from pipelines.common import evaluation, light, stage_chain


def build(cfg: ExperimentConfig, res: PipelineResources | None = None, data_prefix: str = "",
          model_name: str = ""):
    """The retrain pipeline; `data_prefix` and `model_name` are run parameters (defaults baked in here).

    An empty data_prefix trains on the config's own `data.root`.
    """
    res = res or PipelineResources()
    text, method = config_text(cfg), cfg.method.name
    config = {"config_yaml": text, "overrides": "[]", "config_hash": cfg.config_hash()}
    default_model = model_name or f"fedcore-{cfg.data.name}-{method}"

    @dsl.pipeline(name="fedcore-retrain", description=f"scheduled retraining of {default_model}")
    def retrain(data_prefix: str = data_prefix, model_name: str = default_model, min_delta: float = 0.0):
        # Never cached: the point of a scheduled run is to see the newest snapshot and champion.
        snap = light(latest_snapshot(prefix=data_prefix), res, "latest-snapshot", cache=False)
        parent = light(start_tracking(config_yaml=text, pipeline="retrain"), res, "start-tracking", cache=False)
        track = parent.outputs["tracking"]
        root = {**config, "data_root": snap.output}
        prep = prepare_data(config_yaml=text, overrides="[]", data_hash=cfg.data_hash(), data_root=snap.output)
        light(prep, res, "prepare-data")
        last = stage_chain(res, method, stage_names(cfg), prep.outputs["dataset"], track, **root)
        ev = evaluation(res, method, last, prep.outputs["dataset"], prep.outputs["report"], track, **root)
        decide = champion(model_name=model_name, dataset=prep.outputs["dataset"], run=last.outputs["checkpoint"],
                          run_id=last.outputs["Output"], tracking=track, min_delta=min_delta, **root)
        light(decide.after(ev), res, "champion", cache=False)

    return retrain

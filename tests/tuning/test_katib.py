"""`fedcore deploy katib`: the tune's space as a Katib Experiment, valid against the vendored schema."""

from __future__ import annotations

import copy

import pytest
import yaml

from fedcore import cli
from fedcore.cli.deploy import katib_problems
from fedcore.cli.run import katib_lines
from fedcore.pipeline.resources import PipelineResources
from fedcore.registries import load_config
from fedcore.tuning.katib import experiment, validate_experiment
from fedcore.tuning.space import search_space

CONFIG = "configs/quickstart.yaml"


def _objects(method="fedprox"):
    cfg = load_config(CONFIG, [f"method.name={method}", "data.validation.fraction=0.1"])
    return experiment(cfg, cfg.to_yaml(), search_space(cfg), "final/val_score_last10", 6, PipelineResources(),
                      "fedcore-tune-fedprox")


def test_the_rendered_experiment_validates_and_carries_the_tune_space(tmp_path):
    pytest.importorskip("kubernetes_validate")
    out = tmp_path / "katib.yaml"
    cli.main(["deploy", "katib", CONFIG, "--set", "method.name=fedprox", "--trials", "6", "--out", str(out)])
    cm, exp = list(yaml.safe_load_all(out.read_text()))
    assert katib_problems([cm, exp]) == []
    spec = exp["spec"]
    assert spec["objective"] == {"type": "maximize", "objectiveMetricName": "val_score_last10",
                                 "additionalMetricNames": ["val_score_best"]}
    assert [p["name"] for p in spec["parameters"]] == ["train-lr", "train-momentum", "train-weight-decay",
                                                       "method-params-mu"]
    assert spec["parameters"][0]["feasibleSpace"] == {"min": "0.005", "max": "0.2", "distribution": "logUniform"}
    args = spec["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "method.params.mu=${trialParameters.method_params_mu}" in args and "--katib-metrics" in args
    # The mounted config is the one the trials run: validation included (the objective reads it).
    assert load_config_text(cm["data"]["experiment.yaml"]).data.validation.fraction == 0.1


def load_config_text(text):
    from fedcore.config import ExperimentConfig

    return ExperimentConfig.model_validate(yaml.safe_load(text))


def test_a_broken_experiment_is_caught():
    cm, exp = _objects()
    assert validate_experiment(exp) == []
    typo = copy.deepcopy(exp)
    typo["spec"]["maxTrialCounts"] = 3
    assert any("maxTrialCounts" in p for p in validate_experiment(typo))
    wrong_type = copy.deepcopy(exp)
    wrong_type["spec"]["parallelTrialCount"] = "two"
    assert any("parallelTrialCount" in p for p in validate_experiment(wrong_type))
    dangling = copy.deepcopy(exp)
    dangling["spec"]["parameters"].pop()
    assert any("refers to no parameter" in p for p in validate_experiment(dangling))
    pytest.importorskip("kubernetes_validate")
    rooted = copy.deepcopy(exp)
    rooted["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["securityContext"]["runAsUser"] = 0
    rooted["spec"]["trialTemplate"]["trialSpec"]["spec"]["template"]["spec"]["containers"][0].pop("resources")
    problems = katib_problems([cm, rooted])
    assert any("uid 0" in p for p in problems) and any("resources.limits" in p for p in problems)


def test_katib_metric_lines():
    lines = katib_lines({"final/acc": 0.9, "final/val_acc_last10": 0.5, "final/val_acc_best": float("nan"),
                         "final/val_server_mAP_best": 0.25})
    assert lines == ["val_acc_last10=0.500000", "val_score_last10=0.500000", "val_server_mAP_best=0.250000",
                     "val_server_score_best=0.250000"]

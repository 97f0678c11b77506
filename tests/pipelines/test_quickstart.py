"""`make run`'s pipeline (fedcore quickstart): what it compiles to, without running it."""

from __future__ import annotations

import json

from google.protobuf import json_format

from fedcore.cli.quickstart import QUICKSTART_METHODS, quickstart_pipeline
from fedcore.methods.registry import available_methods
from pipelines.runner import compile_pipeline, load_specs


def test_quickstart_sweeps_every_single_label_method_noisy_and_clean_without_served_models(tmp_path):
    cfg, pipeline = quickstart_pipeline(tmp_path / "out", rounds=2)
    spec, _ = load_specs(compile_pipeline(pipeline, tmp_path / "quickstart.yaml"))
    params = spec.root.input_definitions.parameters
    config = json.loads(params["config"].default_value.string_value)
    # 11 runs' torch.export would cost about 55 s of CPU: the quickstart logs state_dicts only.
    assert config["tracking"] == {**config["tracking"], "backend": "mlflow", "log_model": False}
    assert config["train"]["rounds"] == 2 and cfg.tracking.log_model is False
    methods = [v.string_value for v in params["methods"].default_value.list_value.values]
    assert methods == list(QUICKSTART_METHODS)
    assert set(available_methods()) - set(methods) == {"fedharmony"}  # the one multi-label method
    settings = [json_format.MessageToDict(v) for v in params["settings"].default_value.list_value.values]
    assert len(settings) == 2 and settings[1] == {"setting": "clean", "overrides": ["noise.type=none"]}


def test_quickstart_trains_every_method_noisy_and_fedavg_alone_clean_two_runs_at_a_time(tmp_path):
    _, pipeline = quickstart_pipeline(tmp_path / "out", rounds=2)
    spec, _ = load_specs(compile_pipeline(pipeline, tmp_path / "quickstart.yaml"))
    inner = json_format.MessageToDict(spec)["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    loops = {k: v for k, v in inner.items() if k.startswith("for-loop")}
    items = sorted(json.loads(v["parameterIterator"]["items"]["raw"]) for v in loops.values())
    fedavg = QUICKSTART_METHODS.index("fedavg")
    assert items == sorted([list(range(len(QUICKSTART_METHODS))), [fedavg]])  # 11 runs, not 20
    assert {v["iteratorPolicy"]["parallelismLimit"] for v in loops.values()} == {2}

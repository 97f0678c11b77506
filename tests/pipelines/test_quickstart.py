"""`make run`'s pipeline (fedcore quickstart): what it compiles to, without running it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from google.protobuf import json_format

from fedcore.cli.quickstart import QUICKSTART_METHODS, TUNED_SWEEP, quickstart_pipeline
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
    assert len(settings) == 2 and settings[1]["overrides"] == ["noise.type=none"]


def test_quickstart_runs_each_method_at_its_tuned_setting_on_the_validation_split_it_was_tuned_on(tmp_path):
    from fedcore.cli.pipeline import find_config
    from fedcore.pipeline.plan import load_sweep_spec

    tuned = load_sweep_spec(find_config(TUNED_SWEEP)).method_overrides
    assert set(tuned) == set(QUICKSTART_METHODS)  # every row tuned, with the same budget (the file's header)
    for untuned in (False, True):
        cfg, pipeline = quickstart_pipeline(tmp_path / str(untuned), rounds=2, tuned=not untuned)
        spec, _ = load_specs(compile_pipeline(pipeline, tmp_path / f"q{untuned}.yaml"))
        params = spec.root.input_definitions.parameters
        settings = [json_format.MessageToDict(v) for v in params["settings"].default_value.list_value.values]
        if untuned:
            assert all("method_overrides" not in s for s in settings) and cfg.data.validation.fraction == 0
        else:
            assert all(s["method_overrides"] == tuned for s in settings)  # the clean FedAvg reference too
            assert cfg.data.validation.fraction == 0.1


def test_quickstart_trains_every_method_noisy_and_fedavg_alone_clean_two_runs_at_a_time(tmp_path):
    _, pipeline = quickstart_pipeline(tmp_path / "out", rounds=2)
    spec, _ = load_specs(compile_pipeline(pipeline, tmp_path / "quickstart.yaml"))
    inner = json_format.MessageToDict(spec)["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    loops = {k: v for k, v in inner.items() if k.startswith("for-loop")}
    items = sorted(json.loads(v["parameterIterator"]["items"]["raw"]) for v in loops.values())
    fedavg = QUICKSTART_METHODS.index("fedavg")
    assert items == sorted([list(range(len(QUICKSTART_METHODS))), [fedavg]])  # 11 runs, not 20
    assert {v["iteratorPolicy"]["parallelismLimit"] for v in loops.values()} == {2}


def test_the_quickstart_header_fits_100_columns_and_names_every_method(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from rich.console import Console

    import fedcore.cli.quickstart as quickstart
    import pipelines.runner

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop  # the header is printed; the pipeline itself is not run here

    cfg = SimpleNamespace(data=SimpleNamespace(name="digits"))
    monkeypatch.setattr(quickstart, "quickstart_pipeline", lambda *args: (cfg, None))
    monkeypatch.setattr(pipelines.runner, "run_local", stop)
    console = Console(width=100, record=True)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Stop):
        quickstart.run_quickstart(Path("runs/quickstart"), console)  # make run's --out
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 100
    assert lines[2] == "  noisy labels: " + " ".join(QUICKSTART_METHODS)

"""The sweep's folded local shape (`fedcore quickstart`, `fedcore pipeline run --local --fold`):
one task per run, the runs of a setting as a ParallelFor over its slots, and settings that
train only some methods (`SweepSpec.setting_methods`)."""

from __future__ import annotations

import json
import re

import pytest
from google.protobuf import json_format
from mlflow import MlflowClient

from fedcore.cli.quickstart import write_run_report
from fedcore.errors import ConfigError
from fedcore.pipeline.plan import SweepSpec, plan_sweep, shared_data
from fedcore.registries import config_from_dict
from pipelines import PipelineOptions, build_pipeline
from pipelines.runner import compile_pipeline, load_specs, run_local
from tests.components.test_components import tiny_config

FEDSIR = {"name": "fedsir", "params": {"identify_epochs": 1, "min_class_n": 5, "relabel_every": 2}}
SPEC = SweepSpec(methods=["fedsir", "fedavg"], settings={"noisy": [], "clean": ["noise.type=none"]},
                 setting_methods={"clean": ["fedavg"]})


def _cfg(tmp_path):
    data = tiny_config(tmp_path, experiment="folded")
    data["method"] = FEDSIR
    return config_from_dict(data)


def test_setting_methods_picks_the_slots_a_setting_trains(tmp_path):
    plans = plan_sweep(shared_data(_cfg(tmp_path)), SPEC)
    assert [(p.name, p.active, p.restricted) for p in plans] == [("noisy", (0, 1), False), ("clean", (1,), True)]
    assert [r.method for r in plans[1].runs] == ["fedsir", "fedavg"]  # slot indices keep their meaning


@pytest.mark.parametrize("only, words", [({"dirty": ["fedavg"]}, "does not have"),
                                         ({"clean": ["fedprox"]}, "some of the sweep's methods"),
                                         ({"clean": []}, "some of the sweep's methods")])
def test_setting_methods_must_name_the_sweeps_settings_and_methods(tmp_path, only, words):
    spec = SPEC.model_copy(update={"setting_methods": only})
    with pytest.raises(ConfigError, match=words):
        plan_sweep(shared_data(_cfg(tmp_path)), spec)


def test_the_cluster_shape_refuses_a_restricted_setting(tmp_path):
    with pytest.raises(ConfigError, match="local sweep"):
        build_pipeline("sweep", _cfg(tmp_path), PipelineOptions(sweep=SPEC))


def test_the_folded_shape_loops_over_each_settings_slots(tmp_path):
    pipeline = build_pipeline("sweep", _cfg(tmp_path), PipelineOptions(sweep=SPEC, parallelism=2, fold=True))
    spec, _ = load_specs(compile_pipeline(pipeline, tmp_path / "sweep.yaml"))
    tasks = json_format.MessageToDict(spec)["root"]["dag"]["tasks"]
    inner = json_format.MessageToDict(spec)["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    assert "exit-handler-1" in tasks
    loops = sorted(k for k in inner if k.startswith("for-loop"))
    assert len(loops) == 2  # one loop per setting, unrolled at compile time
    items = [inner[k]["parameterIterator"]["items"]["raw"] for k in loops]
    assert sorted(json.loads(i) for i in items) == [[0, 1], [1]]
    assert {"merge-rows", "compare", "prepare-data", "prepare-data-2", "start-tracking"} <= set(inner)


def test_a_folded_local_sweep_trains_every_run_in_one_task_on_its_settings_dataset(tmp_path, capsys):
    cfg = _cfg(tmp_path)
    spec = SPEC.model_copy(update={"method_overrides": {"fedavg": ["train.lr=0.05"]}})  # FedAvg "tuned"
    pipeline = build_pipeline("sweep", cfg, PipelineOptions(sweep=spec, parallelism=2, fold=True))
    result = run_local(pipeline, tmp_path / "root")

    # One numbered line per finished task; each run names its method, setting, tuned or not, seconds.
    printed = [line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("[")]
    total = len(printed)  # 2 datasets, start-tracking, 3 runs, merge-rows, compare, finish-tracking
    assert total == 9 and [line.split("]")[0] for line in printed] == [f"[{k}/{total}" for k in range(1, 10)]
    runs = sorted(line.split("] ", 1)[1].rsplit(": ", 1)[0] for line in printed if " · " in line)
    assert runs == ["fedavg · clean · tuned", "fedavg · noisy · tuned", "fedsir · noisy · default"]
    assert all(re.search(r": \d+\.\d s$", line) for line in printed if " · " in line)
    assert not any("-run: success" in line for line in printed)  # kfp's line, alike for every run

    (compared,) = (tmp_path / "root").glob("kfp/**/compare/figures/compare.json")
    records = json.loads(compared.read_text())["runs"]
    assert sorted((r["method"], r["setting"]) for r in records) == [
        ("fedavg", "clean"), ("fedavg", "noisy"), ("fedsir", "noisy")]
    by = {(r["method"], r["setting"]): r for r in records}
    # Every method of a setting trains on that setting's one artifact; the clean one is another.
    assert by["fedavg", "noisy"]["data_sha256"] == by["fedsir", "noisy"]["data_sha256"]
    assert by["fedavg", "clean"]["data_sha256"] != by["fedavg", "noisy"]["data_sha256"]
    (ckpt,) = [p for p in (tmp_path / "root").glob("kfp/**/train-evaluate*/checkpoint")
               if (p / "checkpoints" / "stage-identify.pt").is_file()]
    assert {"stage-identify.pt", "stage-relabel.pt", "stage-train.pt"} <= {p.name for p in
                                                                         (ckpt / "checkpoints").iterdir()}
    client = MlflowClient(cfg.tracking.uri)
    for r in records:
        child = client.get_run(r["run_id"])
        assert child.info.status == "FINISHED" and child.data.tags["evaluated"] == "true"
        assert child.data.tags["setting"] == r["setting"]
    parent = client.get_run(client.get_run(records[0]["run_id"]).data.tags["mlflow.parentRunId"])
    assert parent.info.status == "FINISHED"
    table = json.loads(open(client.download_artifacts(parent.info.run_id, "summary/compare_table.json")).read())
    assert sorted(row[0] for row in table["data"]) == ["fedavg · clean", "fedavg · noisy", "fedsir · noisy"]
    # make run's report: the curves of every run, from the runs' checkpoint artifacts.
    report = write_run_report(result.run_dir, tmp_path / "report")
    assert "3 runs in 3 groups" in report.read_text()
    assert (tmp_path / "report" / "accuracy.png").read_bytes()[:4] == b"\x89PNG"

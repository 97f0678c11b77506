"""The bench protocol as a Kubeflow pipeline (`fedcore pipeline compile|run bench GRID`): its
compiled shape, and one local run under kfp.local's subprocess runner on a grid smaller than
configs/grids/tiny.yaml (2 rounds, 1 trial), with MLflow in a sqlite store under tmp_path:
the choice is `choose` over the rows, the sweep file records it, and the chosen tuned run's
model is registered with alias `selected`."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import yaml
from google.protobuf import json_format

from fedcore import cli
from fedcore.bench.choice import SCORE, choose
from fedcore.bench.selection import selected_run, split_records
from fedcore.pipeline.plan import load_sweep_spec
from pipelines.runner import load_specs

ROOT = Path(__file__).resolve().parents[2]
SCENE = "digits-mini"


def _grid(tmp: Path, **extra) -> Path:
    grid = {"scenes": {SCENE: {"config": str(ROOT / "configs/quickstart.yaml"),
                               "set": ["train.rounds=2", "train.device=cpu", "tracking.backend=none",
                                       "train.memorization=false"]}},
            "methods": ["fedavg", "fedprox"], "trials": 1, "tuning_seed": 100, "seeds": [0], **extra}
    path = tmp / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


def test_the_compiled_package_is_kfp_ir_with_a_tune_loop_over_methods_and_a_default_loop(tmp_path, capsys):
    out = tmp_path / "bench.yaml"
    cli.main(["pipeline", "compile", "bench", str(_grid(tmp_path, seeds=[0, 1])), "--out", str(out)])
    assert "1 scenes x 2 methods" in capsys.readouterr().out
    spec, _ = load_specs(out)  # parsed into the PipelineSpec proto, as the KFP backend parses it
    d = json_format.MessageToDict(spec)
    assert sorted(d["root"]["inputDefinitions"]["parameters"]) == ["config", "grid", "model_prefix", "overrides"]
    tasks = d["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    loops = {k: json.loads(v["parameterIterator"]["items"]["raw"]) for k, v in tasks.items() if k.startswith("for")}
    assert sorted(map(json.dumps, loops.values())) == sorted(map(json.dumps, [
        [{"row": "fedavg", "setting": "tuned"}, {"row": "fedprox", "setting": "tuned"}],
        [{"row": m, "seed": s, "setting": "default"} for m in ("fedavg", "fedprox") for s in (0, 1)]]))
    tune_loop = next(k for k, v in loops.items() if v[0]["setting"] == "tuned")
    body = d["components"][tasks[tune_loop]["componentRef"]["name"]]["dag"]["tasks"]
    assert sorted(body) == ["bench-run", "bench-run-2", "bench-tune"]  # the tune, then a tuned run per seed
    assert {"bench-data", "choose", "merge-rows", "start-tracking"} <= set(tasks)
    grid = json.loads(d["root"]["inputDefinitions"]["parameters"]["grid"]["defaultValue"])
    assert "partition:" in grid["configs"][SCENE]  # the scene config travels with the package
    overrides = d["root"]["inputDefinitions"]["parameters"]["overrides"]["defaultValue"]
    assert overrides == ["tracking.backend=mlflow"]  # after the scene's own set: it wins


def test_scenes_are_unrolled_and_their_choose_tasks_chained_with_the_clis_methods_and_seeds(tmp_path, capsys):
    grid = _grid(tmp_path)
    data = yaml.safe_load(grid.read_text())
    data["scenes"]["clean"] = {**data["scenes"][SCENE], "set": [*data["scenes"][SCENE]["set"], "noise.type=none"]}
    grid.write_text(yaml.safe_dump(data))
    out = tmp_path / "bench.yaml"
    cli.main(["pipeline", "compile", "bench", str(grid), "--out", str(out), "--method", "fedprox", "--seed", "3"])
    d = json_format.MessageToDict(load_specs(out)[0])
    tasks = d["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    assert {"bench-data", "bench-data-2", "choose", "choose-2"} <= set(tasks)
    assert "choose" in tasks["choose-2"]["dependentTasks"]  # the second scene's bench.json extends the first's
    items = [json.loads(v["parameterIterator"]["items"]["raw"]) for v in tasks.values() if "parameterIterator" in v]
    assert sorted(map(json.dumps, items)) == sorted(2 * [json.dumps([{"row": "fedprox", "setting": "tuned"}]),
                                                         json.dumps([{"row": "fedprox", "seed": 3,
                                                                      "setting": "default"}])])


def test_a_bad_grid_fails_in_one_line_with_exit_code_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["pipeline", "compile", "bench", str(_grid(tmp_path, tuning_seed=0)), "--out",
                  str(tmp_path / "b.yaml")])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and err.startswith("error: ") and "\n" not in err
    assert "tuning_seed 0 is also a reporting seed" in err


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench-pipeline")
    out = tmp / "run"
    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(printed):
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)  # the run dir's embedded store
        cli.main(["pipeline", "run", "bench", str(_grid(tmp)), "--local", "--out", str(out)])
    (tmp / "console.txt").write_text(printed.getvalue())  # what the user saw (test_the_progress_lines...)
    return out, json.loads((out / "bench.json").read_text())  # copied where `fedcore bench` writes it


def test_the_progress_lines_name_each_method_with_its_seconds_and_count_to_the_total(local_run):
    # Issue 71: the tunes and runs printed `[ 3/11] SCENE-tune: success`, no method and no seconds (a loop's
    # iterations share a task name), the count stopped short of its total, and no `mlflow ui` line ended it.
    lines = (local_run[0].parent / "console.txt").read_text().splitlines()
    progress = [line.strip() for line in lines if line.strip().startswith("[")]
    total = int(progress[0].split("/")[1].split("]")[0])
    assert len(progress) == total and progress[-1].startswith(f"[{total}/{total}]")
    named = [line.split("] ", 1)[1] for line in progress if f" · {SCENE} · " in line]
    whats = ("tune, 1 trials", "tuned s0", "default s0")
    assert sorted(n.split(":")[0] for n in named) == sorted(
        f"{m} · {SCENE} · {what}" for m in ("fedavg", "fedprox") for what in whats)
    assert all(n.endswith(" s") for n in named)
    assert not any(f"{SCENE}-tune" in line or f"{SCENE}-default" in line for line in progress)
    assert any(line.startswith("MLflow: mlflow ui --backend-store-uri sqlite:///") for line in lines)


def test_the_choice_is_choose_over_the_rows_and_the_sweep_file_records_it(local_run):
    _, bench = local_run
    scene = bench["scenes"][SCENE]
    assert {(r["method"], r["setting"], r["seed"]) for r in scene["rows"]} == {
        (m, s, 0) for m in ("fedavg", "fedprox") for s in ("default", "tuned")}
    assert all(isinstance(r[SCORE], float) for r in scene["rows"])
    want = choose(scene["rows"], [0])
    assert {k: scene[k] for k in want} == want and scene["choice"] in ("fedavg", "fedprox")
    assert {m: t["n_trials"] for m, t in scene["tuned"].items()} == {"fedavg": 1, "fedprox": 1}
    assert scene["sweep"] == str(local_run[0] / SCENE / "tuned_sweep.yaml")
    spec = load_sweep_spec(scene["sweep"])
    assert spec.selected == scene["choice"] and set(spec.method_overrides) == {"fedavg", "fedprox"}
    assert spec.selected_setting == scene["choice_setting"] and spec.scene.name == SCENE
    # The scene's and --set's overrides, less tracking keys (the pipeline's own MLflow store is no part of it).
    assert spec.scene.set == scene["set"] == ["train.rounds=2", "train.device=cpu", "train.memorization=false",
                                              "train.threads=1", "data.validation.fraction=0.1"]
    assert any(o.startswith("method.params.mu=") for o in spec.method_overrides["fedprox"])
    # Every run of seed 0 trained on the one shared artifact, never a copy of its own.
    shas = {json.loads((Path(r["run"]) / "metrics.json").read_text())["data_sha256"] for r in scene["rows"]}
    assert len(shas) == 1
    # kfp.local leaves the run dirs here, so the scene's report is written, its groups named as `fedcore bench`'s
    # (the choice marked)
    page = Path(scene["report"]).read_text()
    chosen = (scene["choice"], scene["choice_setting"])
    assert {line.split(" | ")[0][2:] for line in page.splitlines() if line.startswith("| fed")} == {
        f"{m} ({s}{', chosen' if (m, s) == chosen else ''})"
        for m in ("fedavg", "fedprox") for s in ("default", "tuned")}


def test_the_chosen_run_is_registered_with_alias_selected(local_run):
    from mlflow import MlflowClient

    out, bench = local_run
    scene = bench["scenes"][SCENE]
    uri = f"sqlite:///{out.resolve() / 'mlruns' / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    version = client.get_model_version_by_alias(f"fedcore-bench-{SCENE}", "selected")
    chosen = selected_run(scene["rows"], scene["choice"], scene["choice_setting"])
    assert version.run_id == chosen["run_id"] == scene["model"]["run_id"]
    assert (chosen["method"], chosen["setting"]) == (scene["choice"], scene["choice_setting"])
    assert (version.tags["bench.method"], version.tags["bench.setting"]) == (scene["choice"], scene["choice_setting"])
    run = client.get_run(chosen["run_id"])
    assert run.data.tags["row"] == scene["choice"]  # the grid's row (a variant's own name), as sweeps tag it
    parent_id = run.data.tags["mlflow.parentRunId"]  # the runs are children of the pipeline's parent
    parent = client.get_run(parent_id)
    assert parent.data.tags[f"bench.{SCENE}.choice"] == scene["choice"]
    assert parent.info.status == "FINISHED"
    logged = {a.path for a in client.list_artifacts(parent_id, f"bench/{SCENE}")}
    assert {f"bench/{SCENE}/rows.json", f"bench/{SCENE}/bench.json", f"bench/{SCENE}/tuned_sweep.yaml"} <= logged


def test_the_selected_run_is_the_best_validation_score_never_test():
    rows = [{"method": "a", "setting": "tuned", "seed": 0, SCORE: 0.5, "acc_last10": 0.9, "run_id": "r0"},
            {"method": "a", "setting": "tuned", "seed": 1, SCORE: 0.7, "acc_last10": 0.1, "run_id": "r1"},
            {"method": "a", "setting": "default", "seed": 2, SCORE: 0.9, "run_id": "r2"},
            {"method": "b", "setting": "tuned", "seed": 0, SCORE: 0.99, "run_id": "r3"}]
    assert selected_run(rows, "a")["run_id"] == "r1"
    rows[0][SCORE] = 0.7  # a tie goes to the lower seed
    assert selected_run(rows, "a")["run_id"] == "r0"
    assert selected_run(rows, "c") is None and selected_run(rows, None) is None
    assert selected_run(rows, "a", "default")["run_id"] == "r2"  # a default choice registers its default run


def test_records_split_into_rows_and_tunes():
    rows, tunes = split_records([{"method": "a", "tune": {"n_trials": 1}}, {"method": "a", "setting": "tuned"}])
    assert rows == [{"method": "a", "setting": "tuned"}] and tunes == {"a": {"method": "a", "tune": {"n_trials": 1}}}


def test_katib_writes_a_valid_experiment_per_scene_and_method_on_the_tuning_seed(tmp_path, capsys):
    from fedcore.tuning.katib import validate_experiment

    out = tmp_path / "bench.yaml"
    cli.main(["pipeline", "compile", "bench", str(_grid(tmp_path, start_at_default=False)), "--out", str(out),
              "--katib"])
    objects = list(yaml.safe_load_all((tmp_path / "bench.katib.yaml").read_text()))
    experiments = [o for o in objects if o["kind"] == "Experiment"]
    assert [e["metadata"]["name"] for e in experiments] == [f"fedcore-bench-{SCENE}-fedavg",
                                                           f"fedcore-bench-{SCENE}-fedprox"]
    assert all(validate_experiment(e) == [] and e["spec"]["maxTrialCount"] == 1 for e in experiments)
    configs = [yaml.safe_load(o["data"]["experiment.yaml"]) for o in objects if o["kind"] == "ConfigMap"]
    assert [(c["method"]["name"], c["seed"]) for c in configs] == [("fedavg", 100), ("fedprox", 100)]
    assert all(c["data"]["validation"]["fraction"] == 0.1 for c in configs)


def test_katib_is_a_bench_option(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["pipeline", "compile", "sweep", "--out", str(tmp_path / "s.yaml"), "--katib"])
    assert exit_info.value.code == 2 and "--katib applies to the bench pipeline" in capsys.readouterr().err

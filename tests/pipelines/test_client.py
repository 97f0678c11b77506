"""submit / schedule against a local stub of the KFP v2beta1 API, and the CLI's one-line errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google.protobuf import json_format

from fedcore.cli import main
from fedcore.deploy import env
from pipelines.runner import load_specs
from tests.pipelines.kfp_stub import KfpStub, start_stub

QUICK = "configs/quickstart.yaml"


@pytest.fixture
def kfp_api() -> Iterator[KfpStub]:
    stub, server = start_stub()
    yield stub
    server.shutdown()
    server.server_close()


def _cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_submit_posts_the_compiled_spec_under_the_experiment(kfp_api, capsys):
    code, out, _ = _cli(["pipeline", "submit", "experiment", QUICK, "--host", kfp_api.url, "--experiment", "nightly",
                         "--gpus", "2", "--image", "reg/fedcore:9"], capsys)

    assert code == 0, out
    assert "run-123" in out
    assert [e["display_name"] for e in kfp_api.posted("/experiments")] == ["nightly"]
    (run,) = kfp_api.posted("/runs")
    assert run["experiment_id"] == "exp-1"
    assert run["service_account"] == env.PIPELINE_SERVICE_ACCOUNT
    spec, platform = run["pipeline_spec"]["pipeline_spec"], run["pipeline_spec"]["platform_spec"]
    assert spec["pipelineInfo"]["name"] == "fedcore-experiment"
    stage = next(e for k, e in spec["deploymentSpec"]["executors"].items() if k.startswith("exec-run-stage"))
    assert stage["container"]["image"] == "reg/fedcore:9"
    assert stage["container"]["resources"]["accelerator"]["resourceCount"] == "2"
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-run-stage"]
    assert k8s["secretAsEnv"][0]["secretName"] == env.S3_SECRET


def test_submit_passes_set_methods_and_seeds_as_run_time_inputs(kfp_api, tmp_path, capsys):
    code, out, _ = _cli(["pipeline", "submit", "sweep", QUICK, "--host", kfp_api.url, "--set", "train.rounds=3",
                         "--method", "fedavg", "--seed", "4", "--parallelism", "2"], capsys)
    assert code == 0, out
    (run,) = kfp_api.posted("/runs")
    assert run["runtime_config"]["parameters"] == {"overrides": ["train.rounds=3"], "methods": ["fedavg"],
                                                   "seeds": [4]}
    loop = next(t for t in run["pipeline_spec"]["pipeline_spec"]["components"].values()
                if "dag" in t and any("iteratorPolicy" in x for x in t["dag"]["tasks"].values()))
    assert next(x for x in loop["dag"]["tasks"].values() if "iteratorPolicy" in x)["iteratorPolicy"] == \
        {"parallelismLimit": 2}

    package = tmp_path / "experiment.yaml"
    assert _cli(["pipeline", "compile", "experiment", QUICK, "--out", str(package)], capsys)[0] == 0
    code, out, _ = _cli(["pipeline", "submit", "experiment", "--package", str(package), "--host", kfp_api.url,
                         "--set", "train.rounds=2"], capsys)
    assert code == 0, out
    sent = kfp_api.posted("/runs")[-1]
    assert sent["runtime_config"]["parameters"] == {"overrides": ["train.rounds=2"]}  # the package as compiled
    assert sent["pipeline_spec"]["pipeline_spec"] == json_format.MessageToDict(load_specs(package)[0])


def test_schedule_creates_one_at_a_time_recurring_run_without_catchup(kfp_api, capsys):
    kfp_api.experiments["fedcore"] = "exp-9"  # an existing experiment is reused, not re-created
    code, out, _ = _cli(["pipeline", "schedule", "retrain", QUICK, "--host", kfp_api.url, "--cron", "0 0 2 * * *",
                         "--data-prefix", "s3://bucket/snapshots/", "--set", "data.name=table"], capsys)

    assert code == 0, out
    assert "rr-7" in out
    assert kfp_api.posted("/experiments") == []
    (job,) = kfp_api.posted("/recurringruns")
    assert job["experiment_id"] == "exp-9"
    assert int(job["max_concurrency"]) == 1
    assert job["no_catchup"] is True
    assert job["trigger"]["cron_schedule"]["cron"] == "0 0 2 * * *"
    assert job["service_account"] == env.PIPELINE_SERVICE_ACCOUNT
    params = job["pipeline_spec"]["pipeline_spec"]["root"]["inputDefinitions"]["parameters"]
    assert params["data_prefix"]["defaultValue"] == "s3://bucket/snapshots/"


@pytest.mark.parametrize(("argv", "message"), [
    (["pipeline", "compile", "nosuch", QUICK], "unknown pipeline 'nosuch'"),
    (["pipeline", "submit", "experiment", "missing.yaml", "--host", "http://127.0.0.1:1"], "not found"),
    (["pipeline", "submit", "experiment", QUICK, "--host", "localhost:8080"], "bad --host"),
    (["pipeline", "schedule", "retrain", QUICK, "--host", "http://x:1", "--cron", "0 2 * * *"], "6 fields"),
    (["pipeline", "run", "experiment", QUICK], "--local"),
    (["pipeline", "run", "experiment", "--local", "--package", "missing.yaml"], "not found"),
    (["pipeline", "run", "experiment", QUICK, "--local", "--package", QUICK], "drop the config argument"),
    (["pipeline", "compile", "experiment", QUICK, "--resource", "memory_limit=1Mi"], "below"),
    # bundled digits reads no files: a snapshot prefix would be ignored, not retrained on
    (["pipeline", "run", "retrain", QUICK, "--local", "--data-prefix", "s3://b/snapshots/"], "reads no files"),
    (["pipeline", "schedule", "retrain", QUICK, "--host", "http://x:1", "--cron", "0 0 2 * * *",
      "--data-prefix", "s3://b/snapshots/"], "its snapshots would be ignored"),
])
def test_user_errors_are_one_line_and_exit_2(argv, message, capsys):
    code, _, err = _cli(argv, capsys)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_unreachable_kfp_host_is_a_user_error(capsys):
    from tests.fixtures.s3 import free_port

    code, _, err = _cli(["pipeline", "submit", "experiment", QUICK, "--host", f"http://127.0.0.1:{free_port()}"],
                        capsys)
    assert code == 2
    assert "cannot reach the KFP API" in err


def test_compile_writes_a_package_from_the_default_config(tmp_path, capsys):
    out = tmp_path / "sweep.yaml"
    code, stdout, _ = _cli(["pipeline", "compile", "sweep", "--out", str(out)], capsys)
    assert code == 0, stdout
    assert out.is_file() and "fedcore-sweep" in out.read_text()


def test_submit_with_workers_sends_stage_tasks_that_submit_a_trainjob(kfp_api, capsys):
    code, out, _ = _cli(["pipeline", "submit", "experiment", QUICK, "--host", kfp_api.url, "--workers", "2",
                         "--gpus", "4"], capsys)
    assert code == 0, out
    spec = kfp_api.posted("/runs")[0]["pipeline_spec"]["pipeline_spec"]
    tasks = [t for c in [spec["root"], *spec["components"].values()] if "dag" in c for t in c["dag"]["tasks"].values()]
    stage = next(t for t in tasks if t["taskInfo"]["name"] == "fedavg-train")
    trainjob = stage["inputs"]["parameters"]["trainjob"]["runtimeValue"]["constant"]
    assert (trainjob["workers"], trainjob["accelerators"]) == (2, 4)
    executor = spec["deploymentSpec"]["executors"]["exec-run-stage"]["container"]
    assert "accelerator" not in executor["resources"]  # the TrainJob's nodes hold the GPUs, not this task


def test_submit_bench_compiles_the_grid_with_its_set_list_in_the_overrides_default(kfp_api, tmp_path, capsys):
    code, out, _ = _cli(["pipeline", "submit", "bench", "configs/grids/tiny.yaml", "--host", kfp_api.url,
                         "--set", "train.rounds=2"], capsys)
    assert code == 0, out
    (run,) = kfp_api.posted("/runs")
    spec = run["pipeline_spec"]["pipeline_spec"]
    assert spec["pipelineInfo"]["name"] == "fedcore-bench"
    assert run["runtime_config"]["parameters"] == {}  # --set is compiled in, after the tracking settings
    assert spec["root"]["inputDefinitions"]["parameters"]["overrides"]["defaultValue"] == [
        "tracking.backend=mlflow", "train.rounds=2"]
    package = tmp_path / "bench.yaml"
    assert _cli(["pipeline", "compile", "bench", "configs/grids/tiny.yaml", "--out", str(package)], capsys)[0] == 0
    code, _, err = _cli(["pipeline", "submit", "bench", "--package", str(package), "--host", kfp_api.url,
                         "--set", "train.rounds=2"], capsys)
    assert code == 2 and "recompile with `fedcore pipeline compile bench GRID --set ...`" in err

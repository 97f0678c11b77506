"""The local runner's console lines: numbered, one per finished task, and each folded run named by
the line it prints itself (kfp.local names every iteration of the run loop alike)."""

from __future__ import annotations

import io

from fedcore.cli.quickstart import QUICKSTART_METHODS, quickstart_pipeline
from fedcore.pipeline.done import done_line, parse_done
from pipelines.progress import Echo, TaskPlan, task_plan

C, R = "\x1b[96m", "\x1b[0m"  # kfp.local colours task names


def kfp_line(text: str) -> str:
    return f"04:52:06.481 - INFO - {text}\n"


def test_the_quickstart_plan_counts_every_task_and_knows_its_run_tasks(tmp_path):
    _, pipeline = quickstart_pipeline(tmp_path / "out", rounds=2)
    plan = task_plan(pipeline)
    # two datasets, start-tracking, 10 noisy runs and the clean FedAvg, merge-rows, compare, finish-tracking
    assert plan.total == 2 + 1 + len(QUICKSTART_METHODS) + 1 + 3
    assert {plan.names[t] for t in plan.self_reporting} == {"sym U(0.7,1.0)-run", "clean-run"}


def test_parallel_runs_of_one_loop_are_told_apart_by_their_own_lines():
    plan = TaskPlan(names={"prepare-data": "prepare-data-noisy", "train-evaluate": "noisy-run"},
                    self_reporting={"train-evaluate"}, total=3)
    console, log = io.StringIO(), io.StringIO()
    echo = Echo(log, console, plan)
    stream = [kfp_line(f"Executing task {C}'prepare-data'{R}"), kfp_line(f"Task {C}'prepare-data'{R} finished with "
                                                                         f"status \x1b[92mSUCCESS{R}"),
              kfp_line(f"Executing task {C}'train-evaluate'{R}"), kfp_line(f"Executing task {C}'train-evaluate'{R}"),
              "    " + done_line("fedprox", "noisy", True, 12.34) + "\n",
              kfp_line(f"Task {C}'train-evaluate'{R} finished with status \x1b[92mSUCCESS{R}"),
              "    " + done_line("coteaching", "noisy", False, 20.0) + "\n",
              kfp_line(f"Task {C}'train-evaluate'{R} finished with status \x1b[92mSUCCESS{R}")]
    for chunk in stream:  # as kfp writes: whole lines, and a line split over two writes
        half = len(chunk) // 2
        echo.write(chunk[:half])
        echo.write(chunk[half:])
    lines = console.getvalue().splitlines()
    assert lines[0].startswith("  [1/3] prepare-data-noisy: success, ") and lines[0].endswith(" s")
    assert lines[1:] == ["  [2/3] fedprox · noisy · tuned: 12.3 s", "  [3/3] coteaching · noisy · default: 20.0 s"]
    assert "noisy-run" not in console.getvalue() and log.getvalue() == "".join(stream)  # the log keeps all


def test_a_failed_run_task_still_gets_its_line_and_an_unknown_total_is_left_out():
    console = io.StringIO()
    echo = Echo(io.StringIO(), console, TaskPlan(names={"train-evaluate": "noisy-run"},
                                                 self_reporting={"train-evaluate"}))
    echo.write(kfp_line("Task 'train-evaluate' finished with status FAILURE"))
    assert console.getvalue() == "  [1] noisy-run: failure\n"


def test_the_done_line_is_found_wherever_kfp_puts_it_and_nothing_else_is_taken_for_it():
    line = done_line("fedavg-s1", "sym U(0.7,1.0)", False, 3.0)
    assert parse_done("        " + line) == {"label": "fedavg-s1", "setting": "sym U(0.7,1.0)", "tuned": False,
                                              "seconds": 3.0}
    assert parse_done("fedcore-run-done {not json}") is None and parse_done("round 3/30 done") is None


def test_two_tasks_lines_met_in_one_still_count_twice_and_a_last_line_without_newline_counts():
    # Issue 71: a loop's iterations write from threads; one event taken a line stopped the count short.
    plan = TaskPlan(names={"a": "scene-data", "t": "scene-tune"}, self_reporting={"t"}, total=4)
    console = io.StringIO()
    echo = Echo(io.StringIO(), console, plan)
    echo.write(kfp_line("Executing task 'a'"))
    met = kfp_line("Task 'a' finished with status SUCCESS").rstrip("\n") + "    " + \
        done_line("fedprox", "scene", False, 9.0, "tune, 8 trials") + " " + done_line("fedavg", "scene", False, 4.0)
    echo.write(met + "\n")
    echo.write(kfp_line("Task 't' finished with status FAILURE").rstrip("\n"))  # the stream ends on it
    echo.drain()
    lines = console.getvalue().splitlines()
    assert lines[0].startswith("  [1/4] scene-data: success, ")
    assert lines[1:] == ["  [2/4] fedprox · scene · tune, 8 trials: 9.0 s", "  [3/4] fedavg · scene · default: 4.0 s",
                         "  [4/4] scene-tune: failure"]


def test_the_bench_plan_counts_every_task_and_its_tunes_and_runs_report_themselves(tmp_path):
    import yaml

    from fedcore.bench.grid import load_grid
    from fedcore.registries import load_config
    from pipelines.bench import build

    path = tmp_path / "tiny.yaml"  # configs/grids/tiny.yaml's shape: one scene, two methods, one seed
    path.write_text(yaml.safe_dump({"scenes": {"quickstart-tiny": {"config": "configs/quickstart.yaml"}},
                                    "methods": ["fedavg", "fedprox"], "trials": 2, "seeds": [0]}))
    grid = load_grid(path)
    plan = task_plan(build(grid, load_config("configs/quickstart.yaml")))
    # start-tracking, data, 2 tunes, 2 tuned runs, 2 default runs, merge-rows, choose, finish-tracking
    assert plan.total == 11
    assert {plan.names[t] for t in plan.self_reporting} == {"quickstart-tiny-tune", "quickstart-tiny-tuned-s0",
                                                            "quickstart-tiny-default"}

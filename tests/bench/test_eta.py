"""TimeLeft: the grid's time left follows each row's own pace, not the grid's average."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from fedcore.bench.eta import TimeLeft


def test_a_slow_row_still_to_run_at_its_own_pace_once_one_of_its_jobs_is_done():
    costs = {"fast1": 1, "fast2": 1, "slow1": 1, "slow2": 1, "slow3": 1, "done": 0}
    row = {j: j.rstrip("0123456789") for j in costs}
    eta = TimeLeft(costs, row, workers=1)
    assert eta.left() is None
    eta.finish("fast1", 30.0)
    # No slow job finished yet: every pending unit at the grid's pace so far.
    assert eta.left() == pytest.approx(4 * 30.0)
    eta.finish("slow1", 360.0)
    assert eta.left() == pytest.approx(30.0 + 2 * 360.0)
    eta.finish("fast2", 40.0)  # the row's pace is its mean per unit: (30 + 40) / 2
    assert eta.left() == pytest.approx(2 * 360.0)


def test_a_tune_weighs_its_trials_and_workers_share_the_work():
    costs = {"tune": 4, "run": 1, "run2": 1}
    row = {"tune": "a", "run": "a", "run2": "a"}
    eta = TimeLeft(costs, row, workers=2)
    eta.finish("tune", 400.0)  # 100 s a unit
    assert eta.left() == pytest.approx(2 * 100.0 / 2)
    eta.finish("run", 0.0)  # skipped or instant: it teaches nothing about the pace
    assert eta.left() == pytest.approx(100.0 / 2)


def test_a_finished_jobs_past_pace_counts_like_its_own():
    eta = TimeLeft({"run": 1, "run2": 1}, {"run": "a", "run2": "a"}, workers=1)
    eta.add_past("a", 300.0, 3)
    assert eta.left() == pytest.approx(2 * 100.0)
    eta.add_past("a", 0.0, 1)  # a time never measured teaches nothing
    assert eta.left() == pytest.approx(2 * 100.0)


def _job(tmp_path, name: str, row: str):
    from fedcore.bench.plan import Job

    return Job("run", "scene", row, "default", 0, "cfg.yaml", (), tmp_path / row / name, tmp_path / "data")


def test_a_resumed_grid_is_paced_on_the_jobs_an_earlier_invocation_finished(tmp_path):
    from fedcore.bench.eta import grid_progress, load_time, time_file

    slow = [_job(tmp_path, f"s{i}", "dividemix") for i in range(3)]
    fast = [_job(tmp_path, f"s{i}", "fedavg") for i in range(3)]
    lines: list[str] = []
    with grid_progress([*slow, *fast], True, lines.append, Console(file=io.StringIO()), workers=1) as done:
        for job, seconds in ((slow[0], 600.0), (fast[0], 30.0)):
            (job.out / "metrics.json").parent.mkdir(parents=True)
            (job.out / "metrics.json").write_text("{}")
            done(job, "done", seconds)
    assert load_time(slow[0].out) == (600.0, 1.0)
    assert time_file(fast[0].out).is_file()

    lines.clear()
    # The next invocation: before any of its jobs ends, the two left of each row at their own pace.
    with grid_progress([*slow, *fast], True, lines.append, Console(file=io.StringIO()), workers=1):
        pass
    assert lines == ["bench: 4 units to do, about 0:21:00 left"]


def test_a_damaged_time_file_only_coarsens_the_estimate(tmp_path):
    from fedcore.bench.eta import load_time, save_time, time_file

    out = tmp_path / "row" / "s0"
    save_time(out, 12.34, 1)
    assert load_time(out) == (12.3, 1.0)
    time_file(out).write_text("{not json")
    assert load_time(out) is None


def test_before_any_job_is_timed_the_stated_costs_give_the_estimate():
    eta = TimeLeft({"tune": 2, "run": 1}, {"tune": "a", "run": "a"}, workers=2, stated={"tune": 30.0, "run": 60.0})
    assert not eta.measured and eta.left() == pytest.approx((2 * 30.0 + 60.0) / 2)
    eta.finish("tune", 100.0)  # a timed job wins over what was stated
    assert eta.measured and eta.left() == pytest.approx(50.0 / 2)
    assert TimeLeft({"run": 1}, {"run": "a"}, stated={}).left() is None


def _tiny_grid(tmp_path, methods=("fedavg", "fedprox")):
    """configs/grids/tiny.yaml's shape, here so that the product's tests do not read the lab's files."""
    import yaml

    grid = {"scenes": {"quickstart-tiny": {"config": "configs/quickstart.yaml", "set": [
        "train.rounds=3", "train.device=cpu", "tracking.backend=none", "train.memorization=false"]}},
        "methods": list(methods), "trials": 2, "tuning_seed": 100, "seeds": [0], "validation_fraction": 0.1}
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(grid))
    return str(path)


def test_the_stated_pace_scales_each_rows_stated_cost_by_its_work(tmp_path):
    from fedcore.bench.eta import STATED_RUN_S, STATED_TRIAL_RUNS, STATED_WORK, stated_pace
    from fedcore.bench.grid import load_grid
    from fedcore.bench.plan import plan_grid

    grid = load_grid(_tiny_grid(tmp_path, ["fedavg", "coteaching"]))
    first, after = plan_grid(grid, tmp_path / "out", [])
    jobs = [*first, *(j for js in after.values() for j in js)]
    pace = stated_pace(jobs)
    # the tiny grid: configs/quickstart.yaml (2 local epochs, every client, no max_train) for 3 rounds.
    work = 3 * 2 * 1.0 * 10_000
    run = {j.row: pace[j] for j in jobs if j.kind == "run"}
    assert run["fedavg"] == pytest.approx(STATED_RUN_S["fedavg"] * work / STATED_WORK)
    assert run["coteaching"] == pytest.approx(2 * run["fedavg"])  # "about twice that"
    tune = next(j for j in jobs if j.kind == "tune" and j.row == "fedavg")
    assert pace[tune] == pytest.approx(STATED_TRIAL_RUNS * run["fedavg"])


def test_a_dry_run_on_a_fresh_out_estimates_the_time_from_the_stated_costs(tmp_path, capsys):
    # Issue 71: it said "no time measured yet" until a job had run.
    from fedcore import cli

    cli.main(["bench", _tiny_grid(tmp_path), "--out", str(tmp_path / "out"), "--dry-run"])
    out = " ".join(capsys.readouterr().out.split())
    assert "8 units to run" in out and "left at the per-method costs lab/results/tuning.md states" in out
    assert "no time measured" not in out and not (tmp_path / "out").exists()

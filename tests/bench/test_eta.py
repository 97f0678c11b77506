"""TimeLeft: the grid's time left follows each row's own pace, not the grid's average."""

from __future__ import annotations

import pytest

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

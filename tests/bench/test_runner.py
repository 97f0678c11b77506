"""The bench's worker pool and progress: a grid that ends early (Ctrl-C, SIGTERM to the bench alone,
an error) stops its workers too, rather than leaving them running their jobs with the run dirs
locked; without a terminal the progress is a line a finished job."""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from rich.console import Console

from fedcore.bench.eta import grid_progress
from fedcore.bench.plan import Job
from fedcore.bench.runner import executor, run_jobs
from fedcore.errors import Interrupted, Terminated

ROOT = Path(__file__).resolve().parents[2]


def test_an_interrupted_grid_stops_the_jobs_its_workers_are_running():
    with pytest.raises(KeyboardInterrupt):
        with executor(2) as pool:
            busy = pool.submit(time.sleep, 30)  # a job that would hold its worker for 30 s
            procs = list(pool._processes.values())
            deadline = time.monotonic() + 20
            while not busy.running() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert busy.running()
            raise KeyboardInterrupt
    for p in procs:
        p.join(timeout=10)  # a terminated worker is gone at once; this bounds a regression's wait
    # Asked of the kernel, not of Process.is_alive: that one answers "alive" for good once the
    # worker's exit status went to another waiter (it saw ECHILD), which failed this test once in CI.
    assert procs and all(_gone(p.pid) for p in procs)
    # Stopped, not finished: time.sleep would have returned None after its 30 s.
    assert isinstance(busy.exception(timeout=10), BrokenProcessPool)


def test_in_process_jobs_run_when_submitted():
    with executor(1) as pool:
        fut = pool.submit(sum, [1, 2, 3])
        assert fut.done() and fut.result() == 6
        assert isinstance(fut, cf.Future)


def _job(tmp_path: Path, kind: str, row: str, trials: int = 0) -> Job:
    return Job(kind=kind, scene="s", row=row, setting="" if kind == "tune" else "default", seed=0,
               config="c.yaml", overrides=(), out=tmp_path / row / kind, data=tmp_path / "data", trials=trials)


def test_without_a_terminal_the_grid_prints_a_line_a_job_with_the_share_done(tmp_path):
    """A log file or a pod's stdout gets no live bar from rich; a grid of hours must still say how far it is."""
    lines: list[str] = []
    tune, run, skipped = _job(tmp_path, "tune", "a", trials=3), _job(tmp_path, "run", "a"), _job(tmp_path, "run", "b")
    quiet = Console(file=io.StringIO())  # not a terminal
    assert not quiet.is_terminal
    with grid_progress([tune, run, skipped], True, lines.append, quiet) as done:
        done(tune, "done", 300.0)
        done(skipped, "skipped", 0.0)
        done(run, "diverged", 90.0)
    assert len(lines) == 2
    # Row a's pace is 100 s a unit (its tune of 3 trials took 300 s): a's run and b's (at the grid's
    # pace) are 200 s away; then a is (300 + 90) / 4 = 97.5 s a unit, b's run the one left.
    assert lines[0].startswith("bench: 3/5 s a tune done (") and lines[0].endswith("about 0:03:20 left)")
    assert lines[1].startswith("bench: 4/5 s a default s0 diverged (") and lines[1].endswith("about 0:01:38 left)")


CHILD = """
import concurrent.futures as cf, sys, time
from fedcore.bench.runner import executor
with executor(2) as pool:
    busy = [pool.submit(time.sleep, 60) for _ in range(2)]
    while not all(f.running() for f in busy):
        time.sleep(0.05)
    print(" ".join(str(p) for p in pool._processes), flush=True)
    cf.wait(busy)
"""


# Jobs as the bench's are: each turns SIGTERM into an exception while it trains (tests/bench/sigterm_jobs.py).
TRAINING_CHILD = """
import concurrent.futures as cf, sys, tempfile, time
from pathlib import Path
from fedcore.bench.runner import executor
from tests.bench.sigterm_jobs import train

flags = Path(tempfile.mkdtemp())
with executor(2) as pool:
    busy = [pool.submit(train, 60, str(flags / str(i))) for i in range(4)]
    while len(list(flags.iterdir())) < 2:
        if any(f.done() for f in busy):
            sys.exit(f"a job ended before training: {next(f for f in busy if f.done()).exception()!r}")
        time.sleep(0.05)
    print(" ".join(str(p) for p in pool._processes), flush=True)
    cf.wait(busy)
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with contextlib.suppress(OSError):  # a dead child of the init process may linger as a zombie
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    return True


@pytest.mark.parametrize("program", [CHILD, TRAINING_CHILD], ids=["plain-jobs", "jobs-that-catch-sigterm"])
def test_sigterm_to_the_bench_alone_stops_its_workers(program):
    """`kill BENCH_PID` (a scheduler, a user): before, the bench died at once and its workers ran on; then,
    a worker whose job turned SIGTERM into an exception went on to its next job, and the bench waited."""
    child = subprocess.Popen([sys.executable, "-c", program], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        workers = [int(p) for p in child.stdout.readline().split()]
        assert len(workers) == 2
        child.send_signal(signal.SIGTERM)
        # About 10 s (the grace before SIGKILL); 60 bounds a hang, with room for a loaded machine
        # (30 s ran out once with CI's suite, a grid and this test sharing two cores).
        child.wait(timeout=60)
        deadline = time.monotonic() + 10  # bounds a regression's wait; a stopped worker is gone at once
        while not all(_gone(p) for p in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(_gone(p) for p in workers)
    finally:
        child.kill()
        for pid in workers if "workers" in locals() else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_in_a_terminal_the_bar_shows_the_time_left_at_each_rows_pace(tmp_path):
    out = io.StringIO()
    term = Console(file=out, force_terminal=True, width=160)
    tune, run, other = _job(tmp_path, "tune", "a", trials=3), _job(tmp_path, "run", "a"), _job(tmp_path, "run", "b")
    with grid_progress([tune, run, other], True, lambda line: None, term, workers=2) as done:
        done(tune, "done", 600.0)  # 200 s a unit: a's run and b's (the grid's pace) are 400 s of work, on 2 workers
    assert "about 0:03:20 left" in out.getvalue()  # the bar's last frame, drawn as it closes


def _tiny_plan(tmp_path: Path):
    from fedcore.bench.grid import load_grid
    from fedcore.bench.plan import plan_grid

    return plan_grid(load_grid(ROOT / "configs/grids/tiny.yaml", seeds=[0, 1]), tmp_path, [])


def _name(job: Job) -> str:
    return f"{job.row} {job.kind if job.kind == 'tune' else f'{job.setting} s{job.seed}'}"


def test_a_tunes_tuned_runs_are_handed_out_before_the_next_rows_jobs(tmp_path):
    """Two workers: the tune ends first, and its tuned runs jump the queue, so fedavg's row is
    whole before fedprox's tune starts (the pool's own queue ran every tune and default run first)."""
    from fedcore.bench.runner import GridQueue

    first, after = _tiny_plan(tmp_path)
    queue = GridQueue(first, after)
    running = [queue.pop(), queue.pop()]
    handed = [_name(j) for j in running]
    while running:
        job = running.pop(0)  # the oldest ends first
        queue.finished(job)
        if (nxt := queue.pop()) is not None:
            running.append(nxt)
            handed.append(_name(nxt))
    assert handed == ["fedavg tune", "fedavg default s0", "fedavg tuned s0", "fedavg tuned s1",
                      "fedavg default s1", "fedprox tune", "fedprox default s0", "fedprox tuned s0",
                      "fedprox tuned s1", "fedprox default s1"]


def test_run_jobs_skips_finished_jobs_and_reports_each_in_queue_order(tmp_path, monkeypatch):
    from fedcore.bench import runner

    first, after = _tiny_plan(tmp_path)
    finished = next(j for j in first if j.kind == "run")  # a default run that already has its metrics
    finished.out.mkdir(parents=True)
    (finished.out / "metrics.json").write_text("{}")
    monkeypatch.setattr(runner, "timed", lambda job: ("done", 1.0))
    seen: list[tuple[str, str]] = []
    runner.run_jobs(first, after, 1, lambda job, status, s: seen.append((_name(job), status)))
    assert seen[:4] == [("fedavg tune", "done"), ("fedavg tuned s0", "done"), ("fedavg tuned s1", "done"),
                        (_name(finished), "skipped")]
    assert len(seen) == 10 and sum(status == "skipped" for _, status in seen) == 1


@pytest.mark.parametrize("stop", [KeyboardInterrupt, Terminated], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_grid_says_what_is_kept_and_how_to_go_on(tmp_path, monkeypatch, stop):
    # Issue 71: it printed only "interrupted (Ctrl-C)", where `fedcore run` says what it kept.
    jobs = [Job(kind="run", scene="s", row=r, setting="default", seed=0, config="c.yaml", overrides=(),
                out=tmp_path / "s" / r / "default" / "s0", data=tmp_path / "s" / "data-s0") for r in "abc"]

    def timed(job):
        if job.row == "b":
            raise stop("stopped")
        job.out.mkdir(parents=True)
        (job.out / "metrics.json").write_text("{}")  # what a finished run leaves
        return "done", 1.0

    monkeypatch.setattr("fedcore.bench.runner.timed", timed)
    with pytest.raises(Interrupted) as err:
        run_jobs(jobs, {}, 1, lambda *a: None)
    text = str(err.value)
    assert err.value.code == (143 if stop is Terminated else 130)
    assert text.startswith("terminated (SIGTERM)" if stop is Terminated else "interrupted (Ctrl-C)")
    assert f"1 of 3 tunes and runs are done and kept in '{tmp_path}'" in text
    assert "the same `fedcore bench` command again does the rest" in text and "--so-far" in text

"""The bench's worker pool: a grid that ends early (Ctrl-C, SIGTERM to the bench alone, an error)
stops its workers too, rather than leaving them running their jobs with the run dirs locked."""

from __future__ import annotations

import concurrent.futures as cf
import time
from concurrent.futures.process import BrokenProcessPool

import pytest

from fedcore.bench.runner import executor


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
    assert procs and not any(p.is_alive() for p in procs)
    # Stopped, not finished: time.sleep would have returned None after its 30 s.
    assert isinstance(busy.exception(timeout=10), BrokenProcessPool)


def test_in_process_jobs_run_when_submitted():
    with executor(1) as pool:
        fut = pool.submit(sum, [1, 2, 3])
        assert fut.done() and fut.result() == 6
        assert isinstance(fut, cf.Future)

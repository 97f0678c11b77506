"""A job as the bench's are, for tests/bench/test_runner.py: it trains (spins) with SIGTERM turned into
an exception (fedcore.engine.interrupt), and says it started by creating a file. Its own module, so
that spawned worker processes can import it."""

from __future__ import annotations

import time
from pathlib import Path


def train(seconds: float, started: str) -> None:
    from fedcore.engine.interrupt import terminate_as_interrupt

    with terminate_as_interrupt():
        Path(started).touch()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            sum(range(10000))

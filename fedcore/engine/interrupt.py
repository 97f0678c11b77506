"""SIGTERM as an interruption, and what an interrupted command says and exits with.

Kubernetes stops a pod with SIGTERM and reads the exit code: 143 (128 + 15) for SIGTERM and 130
(128 + 2) for Ctrl-C, as a shell reports a process those signals killed. Inside a run SIGTERM is
raised as `Terminated` (a KeyboardInterrupt), so the run ends as Ctrl-C ends it: callbacks see it
(the tracking run is marked KILLED) and the checkpoints stay.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from fedcore.errors import Terminated

EXIT_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}
_seen: list[int] = []  # SIGTERMs turned into Terminated in this process, for `stop_signal`


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into `Terminated` for the block (main thread only, when nobody else handles it)."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        _seen.append(signum)
        raise Terminated(f"stopped by {signal.Signals(signum).name}")

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def stop_signal(err: BaseException | None = None) -> signal.Signals:
    """SIGTERM when `err` is a `Terminated`, or (no `err`: typer swallowed it) when this process
    turned a SIGTERM into one; SIGINT otherwise."""
    term = isinstance(err, Terminated) if err is not None else bool(_seen)
    return signal.SIGTERM if term else signal.SIGINT


def stopped_line(sig: signal.Signals) -> str:
    """The start of the one line an interrupted command prints."""
    return "terminated (SIGTERM)" if sig == signal.SIGTERM else "interrupted (Ctrl-C)"

"""The CLI's rich consoles.

Rich falls back to 80 columns when stdout is not a terminal, which squeezes the
comparison tables of `make run | tee log` or a CI log into unreadable stubs. Piped
output gets a wide fixed width instead; COLUMNS, when set, still wins.
"""

from __future__ import annotations

import os

from rich.console import Console

PIPED_WIDTH = 160


def make_console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    if console.is_terminal or os.environ.get("COLUMNS"):
        return console
    return Console(stderr=stderr, width=PIPED_WIDTH)

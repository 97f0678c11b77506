"""The line a folded sweep run prints when it ends, for the local runner's progress lines.

kfp.local names a ParallelFor's iterations alike (every run of `make run`'s noisy setting is the task
`sym U(0.7,1.0)-run`), so its own "finished" line cannot say which run ended. The run task prints
this one line to its stdout, which kfp.local streams into the log; `pipelines.progress` reads it
and prints the method, the setting, whether the sweep gave the method its tuned values, and the
seconds the run took.
"""

from __future__ import annotations

import json
import re
from typing import Any

MARK = "fedcore-run-done"
_LINE = re.compile(MARK + r" (\{.*\})\s*$")


def done_line(label: str, setting: str, tuned: bool, seconds: float) -> str:
    """One line: the marker, then the run as JSON. label: the method, with its seed when the sweep
    has several (`fedprox-s1`); tuned: the sweep gave the method its own values (method_overrides)."""
    return f"{MARK} " + json.dumps({"label": label, "setting": setting, "tuned": tuned, "seconds": round(seconds, 1)})


def parse_done(line: str) -> dict[str, Any] | None:
    """The run a `done_line` names, found anywhere in `line` (kfp.local indents what tasks print); else None."""
    m = _LINE.search(line)
    if not m:
        return None
    try:
        run = json.loads(m.group(1))
    except json.JSONDecodeError:
        return None
    return run if isinstance(run, dict) and {"label", "setting", "seconds"} <= set(run) else None


def describe(run: dict[str, Any]) -> str:
    """'fedprox · sym U(0.7,1.0) · tuned: 12.3 s'."""
    tuned = "tuned" if run.get("tuned") else "default"
    return f"{run['label']} · {run['setting']} · {tuned}: {float(run['seconds']):.1f} s"

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


def done_line(label: str, setting: str, tuned: bool, seconds: float, what: str = "") -> str:
    """One line: the marker, then the run as JSON. label: the method, with its seed when the sweep
    has several (`fedprox-s1`); tuned: the sweep gave the method its own values (method_overrides);
    what: the task's own word for what ended, in place of tuned/default (the bench's `tune, 8 trials`,
    `default s0`)."""
    run = {"label": label, "setting": setting, "tuned": tuned, "seconds": round(seconds, 1)}
    return f"{MARK} " + json.dumps({**run, **({"what": what} if what else {})})


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
    """'fedprox · sym U(0.7,1.0) · tuned: 12.3 s' (a bench task: 'fedprox · SCENE · tune, 8 trials: 95.0 s')."""
    what = run.get("what") or ("tuned" if run.get("tuned") else "default")
    return f"{run['label']} · {run['setting']} · {what}: {float(run['seconds']):.1f} s"

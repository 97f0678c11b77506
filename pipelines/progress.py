"""What a local pipeline run prints while it runs: one line per finished task, numbered.

kfp.local logs every task's output; all of it goes to the run's log file, and one line per
finished task goes to the console: `[ 5/16] prepare-data-clean: success, 3.1 s`. The runs of a
folded sweep are the iterations of one ParallelFor, which kfp.local names alike, so each run
task prints its own line (`fedcore.pipeline.done`) and the console gets that instead:
`[ 7/16] fedprox · sym U(0.7,1.0) · tuned: 12.3 s`.
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from fedcore.pipeline.done import MARK, describe, parse_done

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TASK_START = re.compile(r"Executing task '?([\w-]+)'?")
_TASK_DONE = re.compile(r"Task '?([\w-]+)'? finished with status (\w+)")
# Tasks that print their own line (fedcore.pipeline.done), named by method, setting and seconds, since
# a loop's iterations share one task name: the folded sweep's one task per run (components.train_evaluate),
# and the bench's tunes and runs (components.bench).
_RUN_COMPONENT = re.compile(r"^comp-(train-evaluate|bench-tune|bench-run)(-\d+)?$")


@dataclass
class TaskPlan:
    """What the console lines need from the pipeline: task id -> display name, the ids of run tasks
    that print their own line, and how many tasks will run (None when a loop's length is unknown)."""

    names: dict[str, str] = field(default_factory=dict)
    self_reporting: set[str] = field(default_factory=set)
    total: int | None = None


def task_plan(pipeline: Any, arguments: dict[str, Any] | None = None) -> TaskPlan:
    spec = getattr(pipeline, "pipeline_spec", None)
    if spec is None:
        return TaskPlan()
    dags = [spec.root.dag, *(c.dag for c in spec.components.values() if c.HasField("dag"))]
    plan = TaskPlan(names={tid: t.task_info.name for dag in dags for tid, t in dag.tasks.items()})
    plan.self_reporting = {tid for dag in dags for tid, t in dag.tasks.items()
                           if _RUN_COMPONENT.match(t.component_ref.name)}
    plan.total = _count(spec, spec.root.dag, _inputs(spec, arguments or {}))
    return plan


def _inputs(spec: Any, arguments: dict[str, Any]) -> dict[str, Any]:
    """The pipeline's list inputs (what a loop may iterate over): the run's arguments, else defaults."""
    from google.protobuf import json_format

    out = {k: json_format.MessageToDict(p.default_value) for k, p in spec.root.input_definitions.parameters.items()
           if p.HasField("default_value")}
    return {**out, **arguments}


def _iterations(task: Any, inputs: dict[str, Any]) -> int | None:
    if not task.HasField("parameter_iterator"):
        return 1
    items = task.parameter_iterator.items
    if items.HasField("raw"):
        return len(json.loads(items.raw))
    value = inputs.get(items.input_parameter.removeprefix("pipelinechannel--"))
    return len(value) if isinstance(value, list) else None


def _count(spec: Any, dag: Any, inputs: dict[str, Any]) -> int | None:
    """Container tasks the DAG runs, loops multiplied out; None when a loop's length is unknown."""
    total = 0
    for task in dag.tasks.values():
        n = _iterations(task, inputs)
        comp = spec.components[task.component_ref.name]
        inner = _count(spec, comp.dag, inputs) if comp.HasField("dag") else 1
        if n is None or inner is None:
            return None
        total += n * inner
    return total


def _done_runs(line: str) -> list[tuple[int, dict[str, Any]]]:
    """(position, run) of every `fedcore.pipeline.done` line in `line`, followed by anything or not."""
    found = []
    for m in re.finditer(re.escape(MARK) + " ", line):
        try:
            run, _ = json.JSONDecoder().raw_decode(line, m.end())
        except ValueError:
            continue
        if parse_done(f"{MARK} {json.dumps(run)}") is not None:  # the fields a done line has
            found.append((m.start(), run))
    return found


class Echo(io.TextIOBase):
    """Everything kfp.local prints goes to `log`; one numbered line per finished task to `console`."""

    def __init__(self, log: io.TextIOBase, console: Any, plan: TaskPlan) -> None:
        self.log, self.console, self.plan, self.buf = log, console, plan, ""
        self.done = 0
        self.started: dict[str, list[float]] = defaultdict(list)
        self.lock = threading.Lock()  # a loop's iterations print from threads

    def write(self, text: str) -> int:
        with self.lock:
            self.log.write(text)
            self.buf += text
            *lines, self.buf = self.buf.split("\n")
            for line in lines:
                self._line(_ANSI.sub("", line))
        return len(text)

    def _line(self, line: str) -> None:
        # Every event of the line, in order: a loop's iterations write from threads, so two tasks'
        # lines can meet in one (one's text, then the other's, then the first one's newline); taking
        # one event a line lost the other, and the count stopped short of its total.
        events = [(m.start(), "done", m) for m in _TASK_DONE.finditer(line)]
        events += [(m.start(), "start", m) for m in _TASK_START.finditer(line)]
        events += [(at, "run", run) for at, run in _done_runs(line)]
        for _, kind, found in sorted(events, key=lambda e: e[0]):
            if kind == "run":
                self._say(describe(found))
            elif kind == "start":
                self.started[found.group(1)].append(time.monotonic())
            else:
                self._task_done(found.group(1), found.group(2).lower())

    def _task_done(self, tid: str, status: str) -> None:
        starts = self.started.get(tid, [])
        # Timed only when one task of that id is running: loop iterations share an id.
        seconds = f", {time.monotonic() - starts[0]:.1f} s" if len(starts) == 1 else ""
        if starts:
            starts.pop(0)
        if not (status == "success" and tid in self.plan.self_reporting):
            self._say(f"{self.plan.names.get(tid, tid)}: {status}{seconds}")

    def drain(self) -> None:
        """Take a last line that never got its newline (the stream ended on it)."""
        with self.lock:
            rest, self.buf = self.buf, ""
            if rest:
                self._line(_ANSI.sub("", rest))

    def _say(self, text: str) -> None:
        self.done += 1
        if self.console is None:
            return
        total = self.plan.total
        count = f"{self.done:>{len(str(total))}}/{total}" if total else str(self.done)
        self.console.write(f"  [{count}] {text}\n")
        self.console.flush()

    def flush(self) -> None:
        self.log.flush()

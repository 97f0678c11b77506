"""Tracking that survives outages: a Tracker wrapper that never loses a call and never stalls a run.

`TrackingCallback` wraps its tracker with `attach` when a run starts. With a run dir:

- artifact uploads wait in the run dir's journal until the run's end, after the local outputs
  (model.pt, metrics.json, history.csv, ...) are written; only then do they go up;
- params, tags and metrics go to MLflow as they come. When an endpoint is down (a call failed
  through MLflow's own retries, see `fedcore.tracking.transport`), the call is journaled instead, the
  run says so once on stderr, naming the endpoint, and training goes on;
- the served model, when its upload fails, waits exported in the journal too, and the end
  of a run MLflow missed is journaled with its time;
- a resumed run continues the MLflow run recorded in the journal (not a second run), skips
  metric steps that run already holds, and first replays what the previous process left;
- `sync(run_dir)` (`fedcore tracking sync RUN_DIR`) replays the journal into the same run
  later and gives it its final status: FINISHED, FAILED or KILLED (a run whose process died
  without ending it is KILLED), or RUNNING again for a pipeline stage its successor resumes.

Without a run dir (library callers, tests) the wrapper passes every call straight through.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedcore.errors import TrackingError
from fedcore.tracking.journal import OPEN, RUNNING, Journal
from fedcore.tracking.served_journal import OP as SERVED_OP
from fedcore.tracking.served_journal import keep_served, replay_served
from fedcore.tracking.transport import TrackingUnavailable

log = logging.getLogger("fedcore.tracking")
DEFERRED = ("artifact", "dict", "figure", "table", "state_dict")
TERMINAL = ("FINISHED", "FAILED", "KILLED")
STATUS_TAG = "fedcore.tracking"


def attach(tracker: Any, info: Mapping[str, Any]) -> ResilientTracker:
    """`tracker` wrapped for the run described by a callback's `info` (see Callback.on_run_start)."""
    if isinstance(tracker, ResilientTracker):
        return tracker
    out = info.get("out_dir")
    if out is None:
        return ResilientTracker(tracker, None)
    source = info.get("resumed_from")
    previous = Journal(_run_dir_of(Path(source))) if source else None
    return ResilientTracker(tracker, Journal(out), previous=previous, resumed=bool(info.get("resumed")))


def _run_dir_of(resume: Path) -> Path:
    """The run dir behind a --resume value: the dir itself, its checkpoints/ folder, or a file in it."""
    folder = resume if resume.is_dir() else resume.parent
    return folder.parent if folder.name == "checkpoints" else folder


class ResilientTracker:
    """A Tracker over `inner` that journals what cannot be delivered (module docstring)."""

    def __init__(self, inner: Any, journal: Journal | None, previous: Journal | None = None,
                 resumed: bool = False) -> None:
        self.inner = inner
        self.journal = journal
        self.previous = previous or journal
        self.resumed = resumed
        self.state: dict[str, Any] = {}
        self._warned: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)  # uri, client, ui_command, ... of the wrapped tracker

    @property
    def run_id(self) -> str | None:
        return self.inner.run_id

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, run_name: str, tags: dict[str, str], parent_run_id: str | None = None,
              run_id: str | None = None, nested: bool = False) -> str:
        if self.journal is None:
            return self.inner.start(run_name, tags, parent_run_id, run_id, nested)
        prev = self.previous.state() if self.resumed and self.previous else {}
        own = self.journal.state()
        same_store = prev.get("uri") == getattr(self.inner, "uri", None)
        if run_id is None and prev.get("run_id") and same_store:
            run_id, parent_run_id, nested = prev["run_id"], None, False  # the run this one continues
        elif not self.resumed and own.get("run_id") and own.get("status") == RUNNING:
            self._close_abandoned(own)
        rid = self.inner.start(run_name, tags, parent_run_id, run_id, nested)
        logged = prev.get("logged", {}) if prev.get("run_id") == rid else {}
        self.state = {"uri": getattr(self.inner, "uri", None), "experiment": getattr(self.inner, "experiment", None),
                      "artifact_location": getattr(self.inner, "artifact_root", None), "run_id": rid,
                      "status": RUNNING, "logged": dict(logged)}
        self._save()
        if self.resumed and self.previous is not None and prev.get("run_id") == rid:
            self._adopt(self.previous)
        return rid

    def start_parent(self, run_name: str, tags: dict[str, str]) -> str:
        return self.inner.start_parent(run_name, tags)

    def flush(self, leave_open: bool = False) -> int:
        """Deliver what waits in the journal; returns how many calls still wait."""
        if self.journal is None:
            return 0
        ops = self.journal.pending()
        if ops:
            transport = getattr(self.inner, "transport", None)
            if transport is not None:
                transport.revive()  # one more try for a down endpoint before giving up on it
            remaining = [op for op in ops if not self._replay(op)]
            self.journal.replace_pending(remaining)
            ops = remaining
        if leave_open:
            self._set_status(OPEN)
        return len(ops)

    def end(self, status: str = "FINISHED") -> None:
        if self.journal is None:
            self.inner.end(status)
            return
        waiting = self.flush()
        if waiting:
            self._tag_degraded(waiting)
        try:
            self.inner.end(status)
        except TrackingUnavailable as err:
            self._degrade(err)
            # With its time: sync ends the MLflow run when it ended here, not when it was synced.
            self.journal.append({"op": "end", "status": status, "ts": int(time.time() * 1000)})
            self.inner.abandon()
        self._set_status(status)

    def impatient(self) -> None:
        """One attempt per call from now on: the run is failing or being stopped (SIGTERM)."""
        transport = getattr(self.inner, "transport", None)
        if transport is not None:
            transport.impatient()

    # -- logging ------------------------------------------------------------------------------

    def logged_params(self) -> dict[str, str]:
        return self.inner.logged_params()

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._deliver({"op": "params", "params": dict(params)})

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self._deliver({"op": "tags", "tags": dict(tags)})

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        logged = self.state.get("logged", {})
        fresh = {k: float(v) for k, v in metrics.items() if logged.get(k, -1) < step}
        if fresh and self._deliver({"op": "metrics", "step": step, "ts": int(time.time() * 1000), "metrics": fresh}):
            self._mark(fresh, step)

    def log_artifact(self, local_path: str | Path, artifact_path: str | None = None) -> None:
        if self.journal is None:
            self.inner.log_artifact(local_path, artifact_path)
            return
        if not Path(local_path).exists():
            raise FileNotFoundError(f"artifact {local_path} does not exist")
        self._deliver({"op": "artifact", "path": self.journal.keep_file(Path(local_path)),
                       "artifact_path": artifact_path})

    def log_dict(self, obj: Any, artifact_file: str) -> None:
        self._deliver({"op": "dict", "obj": obj, "file": artifact_file})

    def log_figure(self, fig: Any, artifact_file: str) -> None:
        if self.journal is None:
            self.inner.log_figure(fig, artifact_file)
            return
        path = self.journal.new_file(Path(artifact_file).name)
        fig.savefig(path)
        self._deliver({"op": "figure", "path": self.journal.rel(path), "file": artifact_file})

    def log_table(self, data: dict[str, list[Any]], artifact_file: str) -> None:
        self._deliver({"op": "table", "data": data, "file": artifact_file})

    def log_state_dict(self, state_dict: dict[str, Any], artifact_path: str) -> None:
        if self.journal is None:
            self.inner.log_state_dict(state_dict, artifact_path)
            return
        import torch  # lazy: torch, only to log a model or tensor

        path = self.journal.new_file("state_dict.pt")
        torch.save(state_dict, path)
        self._deliver({"op": "state_dict", "path": self.journal.rel(path), "artifact_path": artifact_path})

    # -- best effort: calls that carry live objects cannot wait in the journal -----------------

    def log_model(self, model: Any, example: Any, name: str = "model", step: int = 0) -> str | None:
        # A live module cannot wait in the journal as it is: when the upload fails, its export
        # does (fedcore.tracking.served_journal), and sync logs it to the run.
        if self.journal is None:
            return self.inner.log_model(model, example, name, step)
        if not self._warned:
            try:
                return self.inner.log_model(model, example, name, step)
            except TrackingUnavailable as err:
                self._degrade(err)
        self.journal.append(keep_served(self.journal, model, example, name, step))
        log.warning("tracking: the run's served model '%s' waits in %s for `fedcore tracking sync`", name,
                    self.journal.dir)
        return None

    def log_dataset(self, dataset: Any) -> None:
        self._best_effort("dataset input", lambda: self.inner.log_dataset(dataset))

    def _best_effort(self, what: str, call: Any) -> Any:
        if self._warned:  # an endpoint is down: a try would only wait through MLflow's retries again
            log.warning("tracking: the run's %s was not logged (tracking is degraded); `fedcore tracking sync` "
                        "does not replay it", what)
            return None
        try:
            return call()
        except TrackingUnavailable as err:
            # Not `_degrade`: that warning names the outage once, and it has (or the journal's end will).
            log.warning("tracking: the run's %s was not logged (%s); `fedcore tracking sync` does not replay it",
                        what, f"{err.endpoint.kind} at {err.endpoint.url} unreachable")
            return None

    # -- delivery -----------------------------------------------------------------------------

    def _deliver(self, op: dict[str, Any]) -> bool:
        """Send `op` now, or keep it: True when it was delivered."""
        if self.journal is None:
            self._apply(op, replay=False)
            return True
        if op["op"] in DEFERRED:  # uploads wait for the run's end, after the local outputs
            self.journal.append(op)
            return False
        try:
            self._apply(op, replay=False)
        except TrackingUnavailable as err:
            self._degrade(err)
            self.journal.append(op)
            return False
        return True

    def _replay(self, op: dict[str, Any]) -> bool:
        """Deliver a journaled call; False when it must keep waiting."""
        try:
            self._apply(op, replay=True)
        except TrackingUnavailable as err:
            self._degrade(err)
            return False
        except (TrackingError, FileNotFoundError) as err:
            log.warning("tracking: dropped a journaled %s call that MLflow refuses: %s", op["op"], err)
            return True
        if op["op"] == "metrics":
            self._mark(op["metrics"], op["step"])
        return True

    def _apply(self, op: dict[str, Any], replay: bool) -> None:
        kind, inner = op["op"], self.inner
        if kind == "params":
            inner.log_params(op["params"])
        elif kind == "tags":
            inner.set_tags(op["tags"])
        elif kind == "metrics":
            if replay and "timestamp_ms" in inspect.signature(inner.log_metrics).parameters:
                inner.log_metrics(op["metrics"], op["step"], timestamp_ms=op["ts"])
            else:
                inner.log_metrics(op["metrics"], op["step"])
        elif kind == "dict":
            inner.log_dict(op["obj"], op["file"])
        elif kind == "table":
            inner.log_table(op["data"], op["file"])
        elif kind in ("artifact", "figure"):
            assert self.journal is not None
            dest = op.get("artifact_path") if kind == "artifact" else (str(Path(op["file"]).parent) or None)
            inner.log_artifact(self.journal.resolve(op["path"]), None if dest == "." else dest)
        elif kind == "state_dict":
            assert self.journal is not None
            from fedcore.engine.checkpoint import safe_torch_load  # lazy: loads torch, only to log a model or dataset

            path = self.journal.resolve(op["path"])
            inner.log_state_dict(safe_torch_load(path.read_bytes(), f"journaled state dict '{path}'"),
                                 op["artifact_path"])
        elif kind == SERVED_OP:
            assert self.journal is not None
            replay_served(inner, self.journal, op)
        elif kind == "end":
            inner.end(op["status"])

    def _adopt(self, previous: Journal) -> None:
        """Take over what a previous process of this run left waiting, then try to deliver it."""
        assert self.journal is not None
        ops = [op for op in previous.pending() if op["op"] != "end"]  # the run goes on: no old end
        if previous.dir != self.journal.dir:
            ops = [{**op, "path": str(previous.resolve(op["path"]))} if "path" in op else op for op in ops]
            for op in ops:
                self.journal.append(op)
        else:
            self.journal.replace_pending(ops)
        self.flush()

    def _close_abandoned(self, old: dict[str, Any]) -> None:
        """A fresh run replaces one that died before its first checkpoint: mark that one KILLED."""
        try:
            self.inner.start("", {}, run_id=old["run_id"])
            self.inner.end("KILLED")
        except TrackingError as err:
            log.warning("tracking: could not mark the abandoned run %s KILLED: %s", old["run_id"], err)
        assert self.journal is not None
        self.journal.replace_pending([])

    def _degrade(self, err: TrackingUnavailable) -> None:
        if err.endpoint.key in self._warned:
            return
        self._warned.add(err.endpoint.key)
        where = self.journal.run_dir if self.journal else "the run dir"
        log.warning("warning: tracking degraded: %s. Training goes on; what did not reach MLflow waits in %s/ "
                    "until `fedcore tracking sync %s`", err, self.journal.dir if self.journal else where, where)

    def _tag_degraded(self, waiting: int) -> None:
        assert self.journal is not None
        try:
            self.inner.set_tags({STATUS_TAG: f"degraded: {waiting} calls wait in {self.journal.dir}; "
                                              f"run `fedcore tracking sync {self.journal.run_dir}`"})
        except TrackingUnavailable as err:
            self._degrade(err)

    def _mark(self, metrics: Mapping[str, float], step: int) -> None:
        if self.journal is None or not self.state:
            return
        logged = self.state.setdefault("logged", {})
        for k in metrics:
            logged[k] = max(step, logged.get(k, -1))
        self._save()

    def _set_status(self, status: str) -> None:
        if self.journal is not None and self.state:
            self.state["status"] = status
            self._save()

    def _save(self) -> None:
        assert self.journal is not None
        self.journal.write_state(self.state)

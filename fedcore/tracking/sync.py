"""`fedcore tracking sync RUN_DIR`: replay a run dir's tracking journal into its MLflow run.

After an outage the run dir holds what MLflow missed (`fedcore.tracking.journal`). Syncing
replays it, in order, into the *same* run and gives that run its final status:

- the status the run ended with, when its end had to be journaled;
- FINISHED when the run completed locally (metrics.json is there) but died before ending;
- KILLED when its process died mid-run (nothing holds the run-dir lock, yet it says RUNNING);
- RUNNING again for a pipeline stage that left the run open for its next stage.

It holds the run-dir lock, so it never races a run still writing the folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fedcore.errors import TrackingError
from fedcore.io import run_dir_lock
from fedcore.tracking.journal import OPEN, RUNNING, Journal
from fedcore.tracking.mlflow import MlflowTracker
from fedcore.tracking.resilient import STATUS_TAG, TERMINAL, ResilientTracker


@dataclass
class SyncResult:
    run_id: str
    uri: str
    delivered: int
    waiting: int
    status: str


def final_status(journal: Journal, state: dict, journaled_end: str | None) -> str:
    """What the run should say once synced (see the module docstring)."""
    if journaled_end:
        return journaled_end
    status = state.get("status", RUNNING)
    if status in TERMINAL or status == OPEN:
        return status
    return "FINISHED" if (journal.run_dir / "metrics.json").is_file() else "KILLED"


def sync(run_dir: str | Path, retry_seconds: float | None = None) -> SyncResult:
    """Replay `run_dir`'s journal into its MLflow run; TrackingError when MLflow still cannot take it."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise TrackingError(f"'{run_dir}' is not a run dir; pass the --out folder of a `fedcore run`")
    with run_dir_lock(run_dir):
        journal = Journal(run_dir)
        state = journal.state()
        if not state.get("run_id") or not state.get("uri"):
            raise TrackingError(f"'{run_dir}' has no tracking journal ({journal.dir}/state.json): it was run "
                                "without tracking.backend mlflow, or by an older fedcore")
        inner = MlflowTracker(state["uri"], state.get("experiment") or "fedcore", state.get("artifact_location"),
                              retry_seconds=retry_seconds)
        # RUNNING while the journal is replayed. First, before the journal changes: refused
        # credentials or a server still down end the sync here with the journal as it was.
        inner.start("", {}, run_id=state["run_id"])
        ops = journal.pending()
        ends = [op for op in ops if op["op"] == "end"]
        journal.replace_pending([op for op in ops if op["op"] != "end"])
        status = final_status(journal, state, ends[-1]["status"] if ends else None)
        end_ms = ends[-1].get("ts") if ends else None
        tracker = ResilientTracker(inner, journal)
        tracker.state = state
        waiting = tracker.flush()
        if waiting:
            # Still down: the run keeps what it had, the journal keeps the rest (and the end).
            if status in TERMINAL:
                journal.append({"op": "end", "status": status, **({"ts": end_ms} if end_ms else {})})
            _close(inner, status, end_ms)
            down = "; ".join(str(e) for e in inner.transport.down.values()) or "see the warnings above"
            raise TrackingError(f"{waiting} journaled tracking calls of '{run_dir}' could not be delivered ({down}); "
                                "run `fedcore tracking sync` again once the server is back")
        inner.set_tags({STATUS_TAG: "synced"})
        _close(inner, status, end_ms)
        tracker.state["status"] = status
        journal.write_state(tracker.state)
        return SyncResult(state["run_id"], state["uri"], len(ops) - len(ends), 0, status if status != OPEN else RUNNING)


def _close(inner, status: str, end_ms: int | None = None) -> None:
    if status in TERMINAL:
        inner.end(status, end_ms=end_ms)  # the time the run ended, not the time of the sync
    else:
        inner.abandon()  # a pipeline stage's open run: it stays RUNNING for the next stage

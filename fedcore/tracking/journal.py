"""The run dir's tracking journal: which MLflow run it logs to, and what has not reached it yet.

    <run dir>/tracking/state.json     uri, experiment, artifact location, run id, status, and the
                                      last step logged for every metric name
    <run dir>/tracking/pending.jsonl  calls not delivered yet, oldest first, one JSON object a line
    <run dir>/tracking/files/         what was logged from memory (figures, state dicts) and files
                                      from outside the run dir, kept until they are uploaded

`fedcore.tracking.resilient` writes it; a resumed run and `fedcore tracking sync` replay it
into the same MLflow run. Appends are fsynced one line at a time, so a kill loses at most the
line being written (a torn last line is ignored); rewrites go through the atomic writer.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from fedcore.io import atomic_write_bytes

FOLDER = "tracking"
STATE, PENDING, FILES = "state.json", "pending.jsonl", "files"
OPEN = "OPEN"  # a pipeline stage left the run RUNNING on purpose: its next stage resumes it
RUNNING = "RUNNING"


class Journal:
    """The journal of one run dir (nothing is written until something needs it)."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.dir = self.run_dir / FOLDER

    # -- state --------------------------------------------------------------------------------

    def state(self) -> dict[str, Any]:
        try:
            data = json.loads((self.dir / STATE).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def write_state(self, state: dict[str, Any]) -> None:
        atomic_write_bytes(self.dir / STATE, json.dumps(state, sort_keys=True).encode())

    # -- pending calls ------------------------------------------------------------------------

    def pending(self) -> list[dict[str, Any]]:
        """Undelivered calls, oldest first; a line torn by a kill is dropped."""
        try:
            lines = (self.dir / PENDING).read_text().splitlines()
        except OSError:
            return []
        ops = []
        for line in lines:
            try:
                op = json.loads(line)
            except ValueError:
                continue
            if isinstance(op, dict) and "op" in op:
                ops.append(op)
        return ops

    def append(self, op: dict[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        line = json.dumps(op, sort_keys=True, default=str) + "\n"
        with open(self.dir / PENDING, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def replace_pending(self, ops: list[dict[str, Any]]) -> None:
        """Keep only `ops` (after some were delivered); their files that are no longer needed go."""
        if not ops and not (self.dir / PENDING).exists():
            return
        text = "".join(json.dumps(op, sort_keys=True, default=str) + "\n" for op in ops)
        atomic_write_bytes(self.dir / PENDING, text.encode())
        keep = {op.get(key) for op in ops for key in ("path", "example")}  # a served model has two files
        files = self.dir / FILES
        for f in sorted(files.rglob("*"), reverse=True) if files.is_dir() else []:
            if f.is_file() and self.rel(f) not in keep:
                f.unlink(missing_ok=True)
            elif f.is_dir() and not any(f.iterdir()):
                f.rmdir()

    # -- files --------------------------------------------------------------------------------

    def rel(self, path: Path) -> str:
        """How the journal names a file: relative to the run dir when inside it, else absolute."""
        path = Path(path).resolve()
        try:
            return path.relative_to(self.run_dir.resolve()).as_posix()
        except ValueError:
            return str(path)

    def keep_file(self, path: Path) -> str:
        """A journal name for `path`; a file outside the run dir is copied in first."""
        name = self.rel(path)
        if not Path(name).is_absolute():
            return name
        dest = self.new_file(Path(path).name)
        shutil.copyfile(path, dest)
        return self.rel(dest)

    def new_file(self, name: str) -> Path:
        folder = self.dir / FILES / uuid.uuid4().hex[:12]
        folder.mkdir(parents=True, exist_ok=True)
        return folder / Path(name).name

    def resolve(self, name: str) -> Path:
        return Path(name) if Path(name).is_absolute() else self.run_dir / name

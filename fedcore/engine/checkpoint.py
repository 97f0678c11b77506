"""Crash-safe checkpoints: server state, per-client state (personal params included), loop state.

All randomness in a run is derived from (seed, round, client), so restoring the round
counter restores the random streams too; torch's global RNG state is saved anyway for
code that draws from it (e.g. default module init), which keeps resume bit-identical.

A checkpoint is one file whose integrity check travels inside it (format 2):

    FEDCORE-CHECKPOINT\\n  <sha256 of the rest, hex>\\n  <header JSON>\\n  <torch.save payload>

It is written through the atomic writer (temp file, fsync, rename, folder fsync), so a kill
at any instant leaves every checkpoint path holding either its old or its new content. A
stage end writes `stage-<name>.pt` and then `latest.pt`; resuming from a run dir takes the
verified checkpoint that got furthest (its header says how far), so a kill between the two
writes loses nothing. Payloads are read with `torch.load(weights_only=True)`: tensors, plain
Python containers and numpy arrays only, so a crafted file cannot run code. A method's dataclasses
(in client state or `ServerState.extra`) are saved as the plain dicts of their fields
(`store.plain_state`); the method rebuilds them (`store.typed_state`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import pickle
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedcore.engine.loop import LoopState
from fedcore.engine.store import ClientStateStore, plain_state
from fedcore.engine.types import ServerState
from fedcore.errors import ArtifactError
from fedcore.io import atomic_write_bytes

FORMAT = 2
MAGIC = b"FEDCORE-CHECKPOINT\n"
LEGACY_FORMAT = 1  # torch.save file + `<name>.sha256` sidecar; still read
log = logging.getLogger(__name__)

# What weights_only may rebuild beyond tensors and plain containers: numpy arrays and scalars,
# which method state holds (per-sample scores, per-client noise matrices). Rebuilding an array
# runs no user code; object arrays would still need their element classes allowed, and are not.
_NUMPY_DTYPES = (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                 np.float16, np.float32, np.float64, np.complex64, np.complex128)
SAFE_GLOBALS: list[Any] = [np.ndarray((0,)).__reduce__()[0], np.float64(0).__reduce__()[0], np.ndarray, np.dtype,
                           *{type(np.dtype(t)) for t in _NUMPY_DTYPES}]


class Checkpointer:
    def __init__(self, directory: Path, config_hash: str, callbacks: list[Any] | None = None,
                 config: dict[str, Any] | None = None) -> None:
        self.dir = Path(directory)
        self.config_hash = config_hash
        self.config = config  # what config_hash digests: a mismatch on resume is then named by key
        self.callbacks = callbacks or []
        self.clients: ClientStateStore | None = None
        self._swept = False

    def save(self, state: ServerState, loop: LoopState, name: str) -> Path:
        payload = {
            "format": FORMAT,
            "config_hash": self.config_hash,
            "config": self.config,
            "state": {"params": state.params, "rnd": state.rnd, "stage": state.stage,
                      "stage_round": state.stage_round, "extra": plain_state(dict(state.extra))},
            "loop": {"stage_index": loop.stage_index, "history": loop.history, "stopped": loop.stopped,
                     "extras": loop.extras},
            "clients": self.clients.state_dict() if self.clients else [],
            "callbacks": [cb.state_dict() if hasattr(cb, "state_dict") else None for cb in self.callbacks],
            "torch_rng": torch.get_rng_state(),
        }
        buf = io.BytesIO()
        torch.save(payload, buf)
        header = {"format": FORMAT, "config_hash": self.config_hash, "rnd": state.rnd, "stage": state.stage,
                  "stage_index": loop.stage_index, "stopped": loop.stopped}
        blob = encode(header, buf.getvalue())
        self._drop_sidecars()
        path = self.dir / f"{name}.pt"
        atomic_write_bytes(path, blob)
        if name != "latest":  # stage-end checkpoints are also the latest state to resume from
            atomic_write_bytes(self.dir / "latest.pt", blob)
        return path

    def sweep(self) -> None:
        """Remove temp files a killed writer left (the run holds the run-dir lock: nobody else writes here)."""
        for junk in self.dir.glob(".*.tmp") if self.dir.is_dir() else []:
            junk.unlink(missing_ok=True)

    def _drop_sidecars(self) -> None:
        """Format-1 sidecars would be stale next to format-2 files; they go at the first save."""
        if not self._swept and self.dir.is_dir():
            self._swept = True
            for sidecar in self.dir.glob("*.sha256"):
                sidecar.unlink(missing_ok=True)


def encode(header: dict[str, Any], payload: bytes) -> bytes:
    """One checkpoint file: magic, sha256 of (header line + payload), header line, payload."""
    body = json.dumps(header, sort_keys=True).encode() + b"\n" + payload
    return MAGIC + hashlib.sha256(body).hexdigest().encode() + b"\n" + body


def _decode(path: Path, data: bytes) -> tuple[dict[str, Any], bytes]:
    """(header, payload) of a format-2 file; ArtifactError when anything does not check out."""
    rest = data[len(MAGIC):]
    digest, _, body = rest.partition(b"\n")
    if hashlib.sha256(body).hexdigest().encode() != digest:
        raise ArtifactError(f"checkpoint '{path}' is corrupt (sha256 mismatch); resume from an earlier one")
    line, _, payload = body.partition(b"\n")
    try:
        header = json.loads(line)
    except ValueError:
        raise ArtifactError(f"checkpoint '{path}' has an unreadable header; resume from an earlier one") from None
    return header, payload


def safe_torch_load(data: bytes, what: str) -> Any:
    """torch.load(weights_only=True) of bytes a user or a store provided, with numpy allowed.

    A file that needs any other global (a pickle that would call a function) is refused with
    a one-line ArtifactError and nothing in it runs.
    """
    try:
        with torch.serialization.safe_globals(SAFE_GLOBALS):
            return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as err:
        # Only a pickle naming a global could run code; any other refusal is a damaged or foreign file.
        found = re.search(r"GLOBAL (\S+)", str(err))
        if found:
            raise ArtifactError(f"{what} holds more than tensors and plain data (it asks for '{found.group(1)}'); "
                                "fedcore refuses to load it, as loading could run code: use a file fedcore "
                                "wrote") from None
        raise ArtifactError(f"{what} cannot be read; it is truncated or not a fedcore checkpoint") from None
    except Exception:
        raise ArtifactError(f"{what} cannot be read; it is truncated or not a fedcore checkpoint") from None


def find_checkpoint(path: Path) -> Path:
    """A checkpoint file, or the checkpoints folder of a run dir (or that folder itself)."""
    path = Path(path)
    if path.is_file():
        return path
    for folder in (path / "checkpoints", path):
        if folder.is_dir() and any(folder.glob("*.pt")):
            return folder
    raise ArtifactError(f"no checkpoint at '{path}'; pass a run dir written by `fedcore run` or a .pt checkpoint")


def saved_round(folder: Path) -> int | None:
    """The furthest round a checkpoint in `folder` claims in its header (unverified: for a message
    only), or None when it holds none that says."""
    rounds = []
    for path in Path(folder).glob("*.pt"):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError), open(path, "rb") as f:
            if f.read(len(MAGIC)) == MAGIC:
                f.readline()  # the digest
                rounds.append(int(json.loads(f.readline())["rnd"]))
    return max(rounds, default=None)


def _verified(path: Path) -> tuple[tuple[int, int] | None, bytes]:
    """(progress from the header, payload bytes) of a checkpoint whose digest checks out.

    Format-1 files carry no header (progress None) and their digest sits in a sidecar.
    """
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        sidecar = path.with_suffix(".sha256")
        if sidecar.is_file() and sidecar.read_text().strip() != hashlib.sha256(data).hexdigest():
            raise ArtifactError(f"checkpoint '{path}' is corrupt (sha256 mismatch); resume from an earlier one")
        return None, data
    header, payload = _decode(path, data)
    if header.get("format") != FORMAT:
        raise ArtifactError(f"checkpoint '{path}' has format {header.get('format')}; this fedcore reads {FORMAT}")
    try:
        return (int(header["rnd"]), int(header["stage_index"])), payload
    except (KeyError, TypeError, ValueError):
        raise ArtifactError(f"checkpoint '{path}' has an unreadable header; resume from an earlier one") from None


def _load(path: Path, data: bytes) -> dict[str, Any]:
    payload = safe_torch_load(data, f"checkpoint '{path}'")
    if not isinstance(payload, dict) or payload.get("format") not in (FORMAT, LEGACY_FORMAT):
        version = payload.get("format") if isinstance(payload, dict) else None
        raise ArtifactError(f"checkpoint '{path}' has format {version}; this fedcore reads {FORMAT}")
    return payload


def _progress(payload: dict[str, Any]) -> tuple[int, int]:
    return int(payload["state"]["rnd"]), int(payload["loop"]["stage_index"])


def _furthest(folder: Path) -> tuple[Path, dict[str, Any]]:
    """The verified checkpoint in `folder` that got furthest; latest.pt wins ties.

    Damaged files are skipped. A damaged latest.pt also gets a warning line naming it: atomic
    writes mean no kill causes one (a disk or a hand did), and the run goes back to an earlier round.
    """
    latest = folder / "latest.pt"
    paths = ([latest] if latest.is_file() else []) + [p for p in sorted(folder.glob("*.pt")) if p != latest]
    intact: list[tuple[tuple[int, int], Path, dict[str, Any] | None, bytes]] = []
    errors: dict[Path, ArtifactError] = {}
    for order, path in enumerate(paths):
        try:
            progress, data = _verified(path)
        except ArtifactError as err:
            errors[path] = err
            continue
        payload = None
        if progress is None:  # format 1: only the payload knows how far it got
            payload = _load(path, data)
            progress = _progress(payload)
        intact.append(((progress[0], progress[1], -order), path, payload, data))
    if not intact:
        # "resume from an earlier one" (each file's own message) points at nothing here.
        first = str(next(iter(errors.values()))).split("; ")[0]
        raise ArtifactError(f"no checkpoint in '{folder}' can be read ({len(errors)} damaged; {first}), so there "
                            f"is no round to resume from: start the run again in another --out, or delete "
                            f"'{folder}' and run it again without --resume")
    (rnd, _, _), path, payload, data = max(intact, key=lambda t: t[0])
    if latest in errors:
        log.warning("warning: %s; resuming from '%s' (round %d), the verified checkpoint that got furthest",
                    str(errors[latest]).split("; ")[0], path, rnd)
    return path, payload if payload is not None else _load(path, data)


def load_checkpoint(path: Path, config_hash: str | None = None,
                    explain: Callable[[dict[str, Any] | None], str] | None = None) -> dict[str, Any]:
    """Read and verify a checkpoint; refuse a corrupt one or one from another config.

    `path` may be a checkpoint file or a run dir (or its checkpoints/ folder); for a folder
    the verified checkpoint that got furthest is taken (see the module docstring). `explain`
    turns the config the checkpoint recorded (None in older ones) into what differs from the
    caller's, for the refusal; the engine knows hashes only.
    """
    path = find_checkpoint(path)
    if path.is_dir():
        path, payload = _furthest(path)
    else:
        payload = _load(path, _verified(path)[1])
    if config_hash is not None and payload["config_hash"] != config_hash:
        stored = payload.get("config")
        why = explain(stored if isinstance(stored, dict) else None) if explain else \
            f"config {payload['config_hash']}, not {config_hash}"
        raise ArtifactError(f"checkpoint '{path}' was written by another config ({why}); resume with the same "
                            "config (only the round budget may grow)")
    return payload


def to_device(obj: Any, device: torch.device) -> Any:
    """`obj` with every tensor inside (nested dicts, lists, tuples, dataclasses) moved to `device`; the rest as is."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_device(v, device) for v in obj]
    if type(obj) is tuple:
        return tuple(to_device(v, device) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):  # e.g. ClientUpdate between ranks
        return dataclasses.replace(obj, **{f.name: to_device(getattr(obj, f.name), device)
                                           for f in dataclasses.fields(obj) if f.init})
    return obj


def restore(
    payload: dict[str, Any], device: torch.device, clients: ClientStateStore | None = None
) -> tuple[ServerState, LoopState]:
    """Server and loop state from a `load_checkpoint` payload; per-client state into `clients`.

    The payload was read with map_location="cpu". Every tensor goes back to the run's device,
    not only the server params: method state (relabeled labels, KD masks, EMA teachers,
    personal params, snapshots) is indexed with and combined with device tensors, and a CPU
    copy would fail on CUDA (e.g. CPU labels indexed by the CUDA batch positions).
    """
    s = payload["state"]
    state = ServerState(params=to_device(s["params"], device), rnd=s["rnd"], stage=s["stage"],
                        stage_round=s["stage_round"], extra=to_device(s["extra"], device))
    if clients is not None:
        clients.load_state_dict(to_device(payload["clients"], device))
    lp = payload["loop"]
    torch.set_rng_state(payload["torch_rng"])
    return state, LoopState(stage_index=lp["stage_index"], history=lp["history"], stopped=lp["stopped"],
                            extras=lp.get("extras", {}))

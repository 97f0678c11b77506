"""Atomic checkpoints: server state, per-client state (personal params included), loop state.

All randomness in a run is derived from (seed, round, client), so restoring the round
counter restores the random streams too; torch's global RNG state is saved anyway for
code that draws from it (e.g. default module init), which keeps resume bit-identical.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
from pathlib import Path
from typing import Any

import torch

from fedcore.engine.loop import LoopState
from fedcore.engine.store import ClientStateStore
from fedcore.engine.types import ServerState
from fedcore.errors import ArtifactError
from fedcore.io import atomic_write_bytes

FORMAT = 1


class Checkpointer:
    def __init__(self, directory: Path, config_hash: str, callbacks: list[Any] | None = None) -> None:
        self.dir = Path(directory)
        self.config_hash = config_hash
        self.callbacks = callbacks or []
        self.clients: ClientStateStore | None = None

    def save(self, state: ServerState, loop: LoopState, name: str) -> Path:
        payload = {
            "format": FORMAT,
            "config_hash": self.config_hash,
            "state": {"params": state.params, "rnd": state.rnd, "stage": state.stage,
                      "stage_round": state.stage_round, "extra": dict(state.extra)},
            "loop": {"stage_index": loop.stage_index, "history": loop.history, "stopped": loop.stopped,
                     "extras": loop.extras},
            "clients": self.clients.state_dict() if self.clients else [],
            "callbacks": [cb.state_dict() if hasattr(cb, "state_dict") else None for cb in self.callbacks],
            "torch_rng": torch.get_rng_state(),
        }
        buf = io.BytesIO()
        torch.save(payload, buf)
        data = buf.getvalue()
        path = self.dir / f"{name}.pt"
        atomic_write_bytes(path, data)
        atomic_write_bytes(path.with_suffix(".sha256"), hashlib.sha256(data).hexdigest().encode())
        if name != "latest":  # stage-end checkpoints are also the latest state to resume from
            atomic_write_bytes(self.dir / "latest.pt", data)
            atomic_write_bytes(self.dir / "latest.sha256", hashlib.sha256(data).hexdigest().encode())
        return path


def find_checkpoint(path: Path) -> Path:
    """A checkpoint file, or the latest one in a run dir / checkpoints dir."""
    path = Path(path)
    for cand in (path, path / "latest.pt", path / "checkpoints" / "latest.pt"):
        if cand.is_file():
            return cand
    raise ArtifactError(f"no checkpoint at '{path}'; pass a run dir written by `fedcore run` or a .pt checkpoint")


def load_checkpoint(path: Path, config_hash: str | None = None) -> dict[str, Any]:
    """Read and verify a checkpoint; refuse a corrupt one or one from another config."""
    path = find_checkpoint(path)
    data = path.read_bytes()
    sidecar = path.with_suffix(".sha256")
    if sidecar.is_file() and sidecar.read_text().strip() != hashlib.sha256(data).hexdigest():
        raise ArtifactError(f"checkpoint '{path}' is corrupt (sha256 mismatch); resume from an earlier one")
    try:
        # Our own files, verified above: they hold numpy arrays and plain Python in method state.
        payload = torch.load(io.BytesIO(data), weights_only=False, map_location="cpu")
    except Exception:
        raise ArtifactError(
            f"checkpoint '{path}' cannot be read; it is truncated or not a fedcore checkpoint"
        ) from None
    if payload.get("format") != FORMAT:
        raise ArtifactError(f"checkpoint '{path}' has format {payload.get('format')}; this fedcore reads {FORMAT}")
    if config_hash is not None and payload["config_hash"] != config_hash:
        raise ArtifactError(
            f"checkpoint '{path}' was written by config {payload['config_hash']}, not {config_hash}; "
            "resume with the same config (only train.rounds may grow)"
        )
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


"""One experiment over several processes: the round's cohort sharded over torch.distributed ranks.

A thin layer over another executor (sequential today, batched later). Every rank builds the
same tasks, trains its deterministic share of them through the inner executor, and all ranks
then exchange the resulting updates, so each one holds every update in cohort order. The loop
then runs the method's `server_update` on every rank with the same inputs, and the ranks
compare digests of the new params, so a divergence fails loudly instead of silently.

Why all-gather and not "rank 0 aggregates, then broadcasts": methods keep per-client state and
identify clients from uploads; with every update on every rank, the state each rank holds
(server and per-client) is exactly what a one-process run holds, whichever rank trains which
client next round, and a checkpoint from rank 0 resumes at any world size. The price is that
each rank receives every update (cohort x model size per round), which is what an averaging
server receives anyway.

Results equal the one-process run because a client's update depends only on (global params,
its own state, its own generators seeded by (seed, round, client)), never on which process
trained the clients before it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from fedcore.engine.checkpoint import to_device
from fedcore.errors import ConfigError

T = TypeVar("T")
R = TypeVar("R")

BACKEND_ENV = "FEDCORE_DIST_BACKEND"  # force gloo or nccl; default: nccl on CUDA, gloo on CPU
TIMEOUT_ENV = "FEDCORE_DIST_TIMEOUT_S"


@dataclass(frozen=True)
class DistInfo:
    rank: int
    world: int
    local_rank: int
    backend: str
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_world() -> int:
    """WORLD_SIZE set by torchrun (or a Kubeflow TrainJob); 1 when not launched distributed."""
    raw = os.environ.get("WORLD_SIZE", "1")
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"WORLD_SIZE is '{raw}'; launch with `torchrun --nproc-per-node N -m fedcore run ...`")
    return int(raw)


def pick_backend(device: torch.device, forced: str | None = None) -> str:
    """nccl for CUDA, gloo for CPU; `forced` (FEDCORE_DIST_BACKEND) must fit the device."""
    if forced in (None, ""):
        return "nccl" if device.type == "cuda" else "gloo"
    if forced not in ("gloo", "nccl"):
        raise ConfigError(f"{BACKEND_ENV} is '{forced}'; use gloo or nccl (or leave it unset)")
    if forced == "nccl" and device.type != "cuda":
        raise ConfigError(f"{BACKEND_ENV}=nccl needs train.device=cuda; use gloo for a CPU run")
    return forced


def rank_device(device: torch.device, local_rank: int, visible_gpus: int) -> torch.device:
    """The device of one rank: its own GPU (cuda:local_rank) on CUDA, the CPU otherwise."""
    if device.type != "cuda":
        return device
    if local_rank >= visible_gpus:
        raise ConfigError(
            f"{local_rank + 1}+ ranks on this node but only {visible_gpus} GPU(s) visible; "
            f"launch at most {visible_gpus} processes per node, or set train.device=cpu"
        )
    return torch.device("cuda", local_rank)


def init_distributed(device: torch.device) -> DistInfo | None:
    """Join the process group torchrun set up; None when this is a one-process run.

    device: the run's device as the config resolves it (cpu or cuda).
    """
    world = launched_world()
    if world == 1:
        return None
    if not dist.is_available():
        raise ConfigError("this torch build has no torch.distributed; run with one process")
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    dev = rank_device(device, local_rank, torch.cuda.device_count() if device.type == "cuda" else 0)
    backend = pick_backend(dev, os.environ.get(BACKEND_ENV))
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        timeout = timedelta(seconds=float(os.environ.get(TIMEOUT_ENV, "1800")))
        dist.init_process_group(backend, timeout=timeout)
    return DistInfo(rank=rank, world=world, local_rank=local_rank, backend=backend, device=dev)


def torchrun_argv(nproc: int, module: str, args: Sequence[str]) -> list[str]:
    """`torchrun --standalone --nproc-per-node N -m module args...` through this interpreter.

    --standalone: one node, a free rendezvous port. Several nodes are torchrun's (or a
    Kubeflow TrainJob's) business, with the same `-m fedcore run` command on each.
    """
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", module, *args]


STOP_GRACE_S = 30.0  # what Kubernetes gives a pod between SIGTERM and SIGKILL by default


def launch(nproc: int, module: str, args: Sequence[str], grace: float = STOP_GRACE_S) -> int:
    """Run `nproc` local ranks of `python -m module args` and wait: torchrun's exit code
    (non-zero when any rank failed; torchrun then stops the others).

    When the wait is interrupted (Ctrl-C, or SIGTERM raised as `Terminated` by the caller's
    handler), torchrun gets SIGTERM, which it passes to the ranks, and up to `grace` seconds to
    end (then SIGKILL); the interruption is raised again. Ctrl-C reaches torchrun through the
    terminal's process group, but a SIGTERM sent to the launcher alone does not: without this
    the ranks trained on, holding the run dir's lock, after the launcher had gone.

    torchrun's and the ranks' stderr is relayed line by line until the stop: what they print while
    stopping (torchrun's traceback of the signal, each rank's own "terminated" line) is dropped, so
    that the caller's one line says what happened, as a stopped one-process run's does."""
    proc = subprocess.Popen(torchrun_argv(nproc, module, args), stderr=subprocess.PIPE, text=True,
                            errors="replace")
    stopping = threading.Event()
    relay = threading.Thread(target=_relay, args=(proc.stderr, stopping), daemon=True)
    relay.start()
    try:
        code = proc.wait()
        relay.join()
        return code
    except BaseException:
        stopping.set()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        raise


def _relay(stream: Any, stopping: threading.Event) -> None:
    for line in iter(stream.readline, ""):
        if not stopping.is_set():
            sys.stderr.write(line)
            sys.stderr.flush()


def shutdown(info: DistInfo | None) -> None:
    if info is not None and dist.is_initialized():
        dist.destroy_process_group()


def shard(costs: Sequence[float], world: int) -> list[list[int]]:
    """Deterministic balanced shares: positions of `costs` per rank, longest job first.

    Each task goes, in order of decreasing cost (ties: lower position first), to the rank
    with the least work so far (ties: lower rank). Each share is returned in position order.
    """
    load = [0.0] * world
    shares: list[list[int]] = [[] for _ in range(world)]
    for i in sorted(range(len(costs)), key=lambda j: (-costs[j], j)):
        r = min(range(world), key=lambda k: (load[k], k))
        shares[r].append(i)
        load[r] += costs[i]
    return [sorted(s) for s in shares]


def _task_cost(task: Any) -> float:
    """A client's training cost: its number of examples (every task has a data view)."""
    data = getattr(task, "data", None)
    return float(len(data)) if data is not None else 1.0


class DistributedExecutor:
    """Trains this rank's share of the tasks with `inner`, then gathers every rank's results."""

    name = "distributed"

    def __init__(self, info: DistInfo, inner: Any, cost: Callable[[Any], float] = _task_cost) -> None:
        self.info, self.inner, self.cost = info, inner, cost

    def map(self, fn: Callable[[T], R], tasks: Sequence[T]) -> list[R]:
        return self._gather(tasks, lambda share: self.inner.map(fn, share))

    def run_clients(self, method: Any, tasks: Sequence[Any]) -> list[Any]:
        """This rank's share through the inner executor's local training, then every rank's updates."""
        return self._gather(tasks, lambda share: self.inner.run_clients(method, share))

    def _gather(self, tasks: Sequence[Any], run: Callable[[list[Any]], list[Any]]) -> list[Any]:
        shares = shard([self.cost(t) for t in tasks], self.info.world)
        mine = run([tasks[i] for i in shares[self.info.rank]])
        # Objects travel pickled; tensors go through the CPU so no rank receives another's GPU.
        gathered: list[Any] = [None] * self.info.world
        dist.all_gather_object(gathered, to_device(list(mine), torch.device("cpu")))
        out: list[Any] = [None] * len(tasks)
        for positions, results in zip(shares, gathered, strict=True):
            for i, res in zip(positions, results, strict=True):
                out[i] = to_device(res, self.info.device)
        return out

    def agree(self, params: dict[str, torch.Tensor], rnd: int) -> None:
        """Fail when the ranks' server params differ after a round (a nondeterministic server step)."""
        digests: list[Any] = [None] * self.info.world
        dist.all_gather_object(digests, params_digest(params))
        if len(set(digests)) > 1:
            raise RuntimeError(
                f"ranks hold different server params after round {rnd}: the method's server step is not "
                "deterministic across processes, so it cannot run distributed as is"
            )


def params_digest(params: dict[str, torch.Tensor]) -> str:
    """sha256 of every tensor's bytes, in key order."""
    h = hashlib.sha256()
    for k, v in params.items():
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def main_first(info: DistInfo | None, fn: Callable[[], R]) -> R:
    """Run `fn` on rank 0, then on the other ranks (e.g. building a dataset cache once).

    When rank 0's call fails, every other rank raises the same error instead of waiting.
    """
    if info is None:
        return fn()
    result, err = None, None
    if info.is_main:
        try:
            result = fn()
        except Exception as e:  # shared below, then raised here too
            err = e
    box = [_portable(err)]
    dist.broadcast_object_list(box, src=0)
    if box[0] is not None:
        raise err if info.is_main else box[0]
    return result if info.is_main else fn()


def from_main(info: DistInfo | None, fn: Callable[[], R]) -> R:
    """`fn()` computed on rank 0 alone and sent to every rank (e.g. reading its checkpoint)."""
    if info is None:
        return fn()
    box: list[Any] = [None]
    if info.is_main:
        try:
            box = [("ok", fn())]
        except Exception as e:
            box = [("err", _portable(e))]
            dist.broadcast_object_list(box, src=0)
            raise
    dist.broadcast_object_list(box, src=0)
    kind, value = box[0]
    if kind == "err":
        raise value
    return value


def _portable(err: Exception | None) -> Exception | None:
    """The error itself when it survives pickling; a RuntimeError with its text otherwise."""
    if err is None:
        return None
    try:
        pickle.loads(pickle.dumps(err))
        return err
    except Exception:
        return RuntimeError(f"rank 0 failed: {type(err).__name__}: {err}")

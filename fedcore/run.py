"""Run one experiment in-process: data -> method -> round loop -> outputs.

Writes to the run directory: history.csv, metrics.json, model.pt, confusion.json,
scene.json, beliefs.json (+ labels.npz when the method relabels) and checkpoints/ (stage
ends and every `train.checkpoint_every` rounds).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from threadpoolctl import threadpool_limits

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.data.federated import FederatedDataset, scene_report
from fedcore.engine.batched import make_executor
from fedcore.engine.beliefs import BeliefLog
from fedcore.engine.callbacks import Callback
from fedcore.engine.checkpoint import Checkpointer, load_checkpoint, restore
from fedcore.engine.distributed import DistInfo, DistributedExecutor, from_main, main_first
from fedcore.engine.executor import SequentialExecutor
from fedcore.engine.hostmem import keep_freed_memory
from fedcore.engine.interrupt import terminate_as_interrupt
from fedcore.engine.loop import LoopState, RoundLoop
from fedcore.engine.sampler import ClientSampler
from fedcore.engine.store import ClientData, ClientStateStore, TensorStore
from fedcore.engine.types import RunContext, ServerState
from fedcore.errors import ConfigError
from fedcore.io import atomic_write_bytes, run_dir_lock
from fedcore.methods.registry import build_method
from fedcore.metrics.classification import at_val_best, summarize_history
from fedcore.metrics.scoring import Evaluator, LocalMemorization, Scorer
from fedcore.models import resolve_device
from fedcore.reporting.config_diff import resume_mismatch
from fedcore.reporting.report import run_figures


@dataclass
class RunResult:
    out_dir: Path
    summary: dict[str, float]
    history: list[dict[str, Any]]
    state: ServerState


def load_or_build_data(cfg: ExperimentConfig, data: str | Path | FederatedDataset | None) -> FederatedDataset:
    """The run's dataset: an existing artifact (checked against the config) or a fresh build."""
    if data is None:
        return build_federated_dataset(cfg)
    fed = data if isinstance(data, FederatedDataset) else FederatedDataset.load(data)
    if fed.meta.get("data_hash") != cfg.data_hash():
        what = f"--data '{data}'" if isinstance(data, str | Path) else "the dataset artifact"
        raise ConfigError(f"{what} was prepared for another federation than this config's "
                          f"({artifact_mismatch(fed.meta, cfg)}); prepare one from this config (`fedcore data "
                          "prepare CONFIG --out DIR`, with the same --set), or run without --data to build it")
    return fed


def artifact_mismatch(meta: dict[str, Any], cfg: ExperimentConfig) -> str:
    """The keys of data, partition, noise and data seed in which an artifact's recorded config differs
    from `cfg`; only the two hashes when the artifact's config no longer reads (an older schema)."""
    hashes = f"data_hash {meta.get('data_hash')} (artifact) vs {cfg.data_hash()}"
    try:
        recorded = ExperimentConfig.model_validate(meta["config"]).data_identity()
    except (KeyError, TypeError, ValueError):  # pydantic's ValidationError is a ValueError
        return hashes
    diff = resume_mismatch(recorded, cfg.data_identity(), was="artifact")  # a key left at its default is none
    return hashes if diff == "no key differs" else diff


def make_context(cfg: ExperimentConfig, fed: FederatedDataset, device: torch.device) -> RunContext:
    store = TensorStore(fed.x_train, fed.meta["mean"], fed.meta["std"], device)
    clients = [
        ClientData(cid, store, idx, fed.y_train[torch.as_tensor(idx)]) for cid, idx in enumerate(fed.client_indices)
    ]
    return RunContext(cfg=cfg, view=fed.view(), store=store, clients=clients, device=device, seed=cfg.seed)


def run_experiment(
    cfg: ExperimentConfig,
    out_dir: str | Path,
    data: str | Path | FederatedDataset | None = None,
    resume: str | Path | None = None,
    stages: Sequence[str] | None = None,
    callbacks: Sequence[Callback] = (),
    dist: DistInfo | None = None,
) -> RunResult:
    """Run `cfg` (all stages, or only `stages`) and write outputs to `out_dir`.

    dist: this process's rank when launched by torchrun (`engine.distributed.init_distributed`).
    Every rank runs this with the same arguments; each trains its share of every round and all
    end with the same state; rank 0 alone writes the run dir. Give rank 0 the progress and
    tracking callbacks, and the others placeholders in their positions (checkpoints keep
    callback state by position).

    The writing rank holds `out_dir`'s run-dir lock throughout (a second writer is refused with
    the holder's pid), and SIGTERM ends the run as an interruption, like Ctrl-C.
    """
    main = dist is None or dist.is_main
    keep_freed_memory()
    with run_dir_lock(out_dir) if main else contextlib.nullcontext(), terminate_as_interrupt(), \
            cpu_threads(cfg.train.threads):
        return _run_locked(cfg, Path(out_dir), data, resume, stages, callbacks, dist)


@contextlib.contextmanager
def cpu_threads(n: int | None) -> Iterator[None]:
    """train.threads for the whole run: torch's pool and the BLAS/OpenMP pools that numpy, scipy
    and scikit-learn use (GMMs, eigendecompositions). Limiting torch alone left the run's result
    depending on OMP_NUM_THREADS: a multi-threaded BLAS sums in another order, and FedSIR's
    relabeling then differed between `fedcore run` and the same config run in-process."""
    if not n:
        yield
        return

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        torch.set_num_threads(before)  # an in-process caller (a test, a pipeline task) gets its pool back


def _run_locked(cfg, out, data, resume, stages, callbacks, dist) -> RunResult:
    device = dist.device if dist else resolve_device(cfg.train.device)
    fed = main_first(dist, lambda: load_or_build_data(cfg, data))  # a dataset cache is written once
    ctx = make_context(cfg, fed, device)
    method = build_method(cfg)
    _check_stages(method, stages)
    state = method.init(ctx)
    # Ranks train their shares sequentially: that keeps an N-process run bit-identical to a
    # sequential one-process run (batched stacks would round differently per share).
    executor = (DistributedExecutor(dist, SequentialExecutor()) if dist
                else make_executor(cfg.train.executor, method, cfg.train.cohort_chunk))
    clients_state = ClientStateStore(fed.num_clients)
    cbs = list(callbacks)
    ckpt = Checkpointer(out / "checkpoints", cfg.resume_hash(), cbs, config=cfg.resume_dict())
    ckpt.clients = clients_state
    ckpt.sweep()
    loop_state = LoopState()
    if resume is not None:
        explain = partial(resume_mismatch, current=cfg.resume_dict())
        payload = from_main(dist, lambda: load_checkpoint(Path(resume), cfg.resume_hash(), explain))
        state, loop_state = restore(payload, device, clients_state)
        for cb, st in zip(cbs, payload["callbacks"], strict=False):
            cb.load_state_dict(st)
    evaluator = Evaluator(fed, device, ctx.store, memorization=cfg.train.memorization,
                          loss_probe=cfg.train.loss_probe, seed=cfg.seed)
    # run_dir_lock (rank 0's) created `out`, and removes it again if bad input leaves it empty.
    info = {"config": cfg, "out_dir": out, "stages": [s.name for s in method.stages], "resumed": resume is not None,
            "resumed_from": Path(resume) if resume is not None else None, "data_sha256": fed.sha256, "fed": fed,
            "executor": executor.name, "data_source": str(data) if isinstance(data, str | Path) else None,
            "figures": partial(run_figures, fed=fed)}  # tracking logs them; it sits below reporting
    if dist is None or dist.is_main:
        print(f"fedcore run: {cfg.method.name} on {device}, executor {executor_label(executor, cfg, dist)}",
              file=sys.stderr, flush=True)
    try:
        # Inside the try: a tracking run opened here and then failing (e.g. its artifact store
        # is unreachable) is ended FAILED by on_failure instead of staying RUNNING; so is one
        # whose run-end logging fails.
        for cb in cbs:
            cb.on_run_start(info)
        state, summary = _drive(cfg, fed, ctx, method, state, clients_state, cbs, ckpt, loop_state, evaluator, stages,
                                out, dist, executor)
        info["final_model"] = method.eval_model(state)  # what tracking serves; set before on_run_end
        for cb in cbs:
            cb.on_run_end(summary, out)
    except BaseException as err:
        for cb in cbs:
            cb.on_failure(err)
        raise
    return RunResult(out, summary, loop_state.history, state)


def _drive(cfg, fed, ctx, method, state, clients_state, cbs, ckpt, loop_state, evaluator, stages, out, dist,
           executor):
    beliefs = BeliefLog(Scorer(fed))  # what this process's stages decided, for the pipeline's stage outputs
    local = cfg.train.local_memorization and fed.task == "single"
    main = dist is None or dist.is_main
    loop = RoundLoop(
        method, ctx, ClientSampler(fed.num_clients, cfg.train.client_fraction, cfg.seed, cfg.train.warmup_rounds),
        clients_state, cbs, evaluator=evaluator, scorer=beliefs, eval_every=cfg.train.eval_every,
        checkpoint=ckpt.save if main else None, checkpoint_every=cfg.train.checkpoint_every, executor=executor,
        client_scorer=LocalMemorization(fed, ctx.device, ctx.store) if local else None,
    )
    state = loop.run(state, loop_state, only=stages)
    if not main:
        return state, summarize(loop_state.history, fed.task)
    beliefs.write(out, [fed.y_train[torch.as_tensor(idx)].numpy() for idx in fed.client_indices])
    return state, write_outputs(out, cfg, fed, method, state, loop_state.history, evaluator, loop_state.extras,
                                executor.name)


def executor_label(executor: Any, cfg: ExperimentConfig, dist: DistInfo | None = None) -> str:
    """e.g. 'batched (train.executor=auto, cohort_chunk=64)'."""
    if dist is not None:
        return f"distributed over {dist.world} processes, sequential on each (train.executor={cfg.train.executor})"
    chunk = f", cohort_chunk={cfg.train.cohort_chunk or 'auto'}" if executor.name == "batched" else ""
    return f"{executor.name} (train.executor={cfg.train.executor}{chunk})"


def _check_stages(method: Any, stages: Sequence[str] | None) -> None:
    names = [s.name for s in method.stages]
    unknown = [s for s in stages or [] if s not in names]
    if unknown:
        raise ConfigError(f"method '{method.name}' has stages {names}; unknown {unknown}")


_PER_CLIENT = re.compile(r"/client_\d+$")  # e.g. noise/rate_est/client_07; detect/client_f1 stays


def summarize(history: list[dict[str, Any]], task: str) -> dict[str, float]:
    key = "test/mAP" if task == "multi" else "test/acc"
    summary = summarize_history(history, key)
    short = key.split("/", 1)[1]
    for where in ("val", "val_server"):
        summary.update(at_val_best(history, key, f"{where}/{short}"))
    # The latest value of every scalar that is not per-client, so run tables can show e.g. rate Pearson.
    latest: dict[str, float] = {}
    for row in history:
        for k, v in row.items():
            if k not in ("stage", "round") and not _PER_CLIENT.search(k) and isinstance(v, float | int):
                latest[k] = float(v)
    summary.update({f"last/{k}": v for k, v in latest.items()})
    return summary


def write_outputs(out: Path, cfg: ExperimentConfig, fed: FederatedDataset, method: Any, state: ServerState,
                  history: list[dict[str, Any]], evaluator: Evaluator,
                  extras: dict[str, Any] | None = None, executor: str | None = None) -> dict[str, float]:
    """Final artifacts; `extras` are the method's latest `Estimates.extra` (e.g. descriptor scatter)."""
    summary = summarize(history, fed.task)
    buf = io.BytesIO()
    torch.save({k: v.detach().cpu() for k, v in method.eval_model(state).state_dict().items()}, buf)
    atomic_write_bytes(out / "model.pt", buf.getvalue())
    atomic_write_bytes(out / "history.csv", history_csv(history).encode())
    atomic_write_bytes(out / "config.yaml", cfg.to_yaml().encode())
    if "confusion" in evaluator.last:
        atomic_write_bytes(out / "confusion.json", json.dumps(evaluator.last["confusion"].tolist()).encode())

    atomic_write_bytes(out / "scene.json", json.dumps(scene_report(fed), indent=2).encode())
    if extras:
        atomic_write_bytes(out / "estimates.json", json.dumps(_finite(_plain(extras)), indent=2).encode())
    # Last: its presence is what marks the run finished (`fedcore run` refuses to overwrite it).
    record = {"method": cfg.method.name, "seed": cfg.seed, "config_hash": cfg.config_hash(),
              "data_sha256": fed.sha256, "rounds": state.rnd, "executor": executor, "summary": summary}
    atomic_write_bytes(out / "metrics.json", json.dumps(_finite(record), indent=2).encode())
    return summary


def history_csv(history: list[dict[str, Any]]) -> str:
    cols: list[str] = []
    for row in history:
        cols.extend(k for k in row if k not in cols)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=cols)
    writer.writeheader()
    writer.writerows(history)
    return buf.getvalue()


def _plain(obj: Any) -> Any:
    """numpy/torch values -> JSON-able Python."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray | torch.Tensor):
        return _plain(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def _finite(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj

"""Running a bench grid's jobs: in this process (--jobs 1) or in N worker processes.

Jobs are handed out in the grid's order, no more than the workers at once, and a tune's tuned runs
go to the front of the queue when it ends: the grid finishes row by row and scene by scene, so a
stopped grid (or `fedcore bench --so-far`) holds whole rows. Each job writes
its output to a log beside its dir (appended: a resumed job keeps its first attempt's log), so
the one progress bar over the whole grid stays readable. Worker processes are spawned, not
forked: a forked child inherits torch's thread pools in whatever state the parent left them.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from fedcore.bench.plan import RUN_THREADS, Job, diverged_marker, is_done
from fedcore.bench.stale import refuse_stale
from fedcore.data.build import build_federated_dataset
from fedcore.data.federated import FederatedDataset
from fedcore.engine.interrupt import EXIT_CODES, stop_signal, stopped_line, terminate_as_interrupt
from fedcore.errors import DivergedError, Interrupted
from fedcore.io import atomic_write_bytes
from fedcore.registries import load_config
from fedcore.run import cpu_threads, run_experiment
from fedcore.tracking.callback import run_callbacks
from fedcore.tuning.study import TuneRequest, run_tune


def prepare_data(jobs: list[tuple[Path, str, list[str]]], say: Callable[[str], None],
                 built: dict[Path, FederatedDataset] | None = None) -> None:
    """Each seed's shared artifact, as `fedcore data prepare` writes it; kept when already there.
    built: artifacts check_data already built in memory, saved as they are rather than built again."""
    built = built or {}
    for path, config, overrides in jobs:
        if (path / "manifest.json").is_file():
            continue
        say(f"bench: preparing {path}")
        (built.get(path) or build_federated_dataset(load_config(config, overrides))).save(path)


def check_data(jobs: list[tuple[Path, str, list[str]]]) -> dict[Path, FederatedDataset]:
    """What preparing the data would refuse (files under data.root, the partition, the noise scene the
    dataset can give), before anything is written (a dry run too): each scene's first artifact still to
    prepare is built in memory, and returned for prepare_data to save. One per scene, since these checks
    do not depend on the seed."""
    built: dict[Path, FederatedDataset] = {}
    for path, config, overrides in jobs:
        if path.parent in {p.parent for p in built} or (path / "manifest.json").is_file():
            continue
        built[path] = build_federated_dataset(load_config(config, overrides))
    return built


def execute(job: Job) -> str:
    """Run one job to its end: 'done' or 'diverged'. One thread, as the tuning page's runs had (OMP_NUM_THREADS=1)
    (a config's train.threads still wins inside the run)."""
    job.out.parent.mkdir(parents=True, exist_ok=True)
    log = job.out.parent / f"{job.out.name}.log"
    with open(log, "a") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f), cpu_threads(RUN_THREADS):
        return _tune(job) if job.kind == "tune" else _run(job)


def timed(job: Job) -> tuple[str, float]:
    """execute(job) and the seconds it took in its worker (what the grid's time left is paced on)."""
    start = time.monotonic()
    status = execute(job)
    return status, time.monotonic() - start


def _tune(job: Job) -> str:
    req = TuneRequest(config=job.config, overrides=list(job.overrides), trials=job.trials, out=job.out,
                      data=str(job.data), progress=False, start_at_default=job.start_at_default)
    run_tune(req, say=print)
    return "done"


def _run(job: Job) -> str:
    """`fedcore run CONFIG --set ... --data DATA --out RUN` (with --resume RUN when it has checkpoints)."""
    cfg = load_config(job.config, list(job.overrides))
    resume = job.out if any((job.out / "checkpoints").glob("*.pt")) else None
    try:
        run_experiment(cfg, job.out, data=str(job.data), resume=resume,
                       callbacks=run_callbacks(cfg))
    except DivergedError as err:
        print(f"training diverged: {err}")
        atomic_write_bytes(diverged_marker(job.out), f"{err}\n".encode())
        return "diverged"
    return "done"


class InProcess(cf.Executor):
    """--jobs 1: each job runs when submitted, in this process (no spawn, tracebacks stay whole)."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        fut: cf.Future = cf.Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as err:  # noqa: BLE001 - handed to the caller through the future
            if isinstance(err, KeyboardInterrupt):
                raise
            fut.set_exception(err)
        return fut


@contextlib.contextmanager
def executor(jobs: int) -> Iterator[cf.Executor]:
    if jobs <= 1:
        yield InProcess()
        return

    # SIGTERM to this process must end the grid through the except below, not kill it outright
    # (the default): the workers would be orphaned, running on with their run dirs locked.
    spawn = multiprocessing.get_context("spawn")
    with terminate_as_interrupt(), cf.ProcessPoolExecutor(jobs, mp_context=spawn) as pool:
        try:
            yield pool
        except BaseException:
            # Ctrl-C reaches the workers through the terminal's process group, a SIGTERM sent to this
            # process alone (`kill`, a scheduler) does not; either way each worker must end, so that
            # none goes on holding a core and its run dir's lock.
            stop_workers(list((getattr(pool, "_processes", None) or {}).values()), pool)
            raise


STOP_GRACE_S = 10.0


def stop_workers(procs: list, pool: cf.Executor, grace: float = STOP_GRACE_S) -> None:
    """SIGTERM each worker, then SIGKILL the ones still alive after `grace` seconds.

    A job turns SIGTERM into an exception (a run or a tune ends as `fedcore run` does on it), but the
    pool's worker loop catches that exception and goes on to the next job it was handed, so SIGTERM
    alone left the workers training and the bench waiting on them. No more jobs are handed out
    first; a killed job loses no more than a terminated one (a run checkpoints at stage ends or every
    train.checkpoint_every rounds, and a tune marks a trial it finds still running as failed)."""
    pool.shutdown(wait=False, cancel_futures=True)
    alive = [p for p in procs if p.is_alive()]
    for p in alive:
        p.terminate()
    deadline = time.monotonic() + grace
    for p in alive:
        p.join(max(deadline - time.monotonic(), 0.0))
    for p in alive:
        if p.is_alive():
            p.kill()
            p.join(5.0)


class GridQueue:
    """The jobs left, in the grid's order; a finished job's followers (a tune's tuned runs) go to
    the front. Handing out every job at once, as the pool's own queue would, ran all the grid's tunes
    and default runs before any tuned run: no row was whole until the grid's last hour."""

    def __init__(self, first: list[Job], after: dict[Job, list[Job]]) -> None:
        self.pending, self.after = deque(first), after

    def pop(self) -> Job | None:
        return self.pending.popleft() if self.pending else None

    def finished(self, job: Job) -> None:
        self.pending.extendleft(reversed(self.after.get(job, [])))


def run_jobs(first: list[Job], after: dict[Job, list[Job]], jobs: int,
             done: Callable[[Job, str, float], None]) -> None:
    """Every job not yet done, dependencies first, at most `jobs` at once (GridQueue's order);
    `done(job, status, seconds)` after each (status 'done', 'diverged' or 'skipped'; the seconds it
    ran). A failing job's error is raised once the running ones are stopped; Ctrl-C or SIGTERM as an
    `Interrupted` that says what is kept and how to go on."""
    try:
        _run_jobs(GridQueue(first, after), jobs, done)
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM as fedcore.errors.Terminated
        raise grid_interrupted(err, [*first, *(j for js in after.values() for j in js)]) from None


def grid_interrupted(err: KeyboardInterrupt, all_jobs: list[Job]) -> Interrupted:
    """The one line of a grid stopped by a signal: how much of it is done and kept, and how to go on."""
    sig = stop_signal(err)
    finished = [j for j in all_jobs if is_done(j)]
    out = all_jobs[0].data.parent.parent if all_jobs else None  # OUT/SCENE/data-sN
    runs = sum(j.kind == "run" for j in finished)
    so_far = f", or add --so-far to write results from the {runs} finished runs" if runs else ""
    return Interrupted(f"{stopped_line(sig)} before the grid finished; {len(finished)} of {len(all_jobs)} tunes "
                       f"and runs are done and kept in '{out}': the same `fedcore bench` command again does the "
                       f"rest (a stopped run goes on from its checkpoints, a stopped tune from its finished "
                       f"trials){so_far}", EXIT_CODES[sig])


def _run_jobs(queue: GridQueue, jobs: int, done: Callable[[Job, str, float], None]) -> None:
    with executor(jobs) as pool:
        running: dict[cf.Future, Job] = {}

        def end(job: Job, status: str, seconds: float) -> None:
            done(job, status, seconds)  # a job's UserError ends the grid here, in one line
            queue.finished(job)

        def fill() -> None:
            while len(running) < jobs and (job := queue.pop()) is not None:
                if is_done(job):
                    if job.setting == "tuned":  # its tune may have ended here with another best.yaml
                        refuse_stale([job])
                    end(job, "skipped", 0.0)
                    continue
                fut = pool.submit(timed, job)
                if fut.done():  # in-process: it ran already, and the bar should say so now
                    end(job, *fut.result())
                else:
                    running[fut] = job

        fill()
        while running:
            finished, _ = cf.wait(list(running), return_when=cf.FIRST_COMPLETED)
            for fut in finished:
                end(running.pop(fut), *fut.result())
            fill()

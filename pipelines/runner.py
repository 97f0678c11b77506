"""Compile, run locally, submit and schedule a pipeline object; kfp errors become one-line UserErrors."""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from fedcore.engine.interrupt import EXIT_CODES, stop_signal, stopped_line
from fedcore.errors import ArtifactError, Interrupted, UserError
from fedcore.io import publish
from pipelines.progress import Echo, TaskPlan, task_plan

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The one-line message of a fedcore error raised inside a task, as its traceback ends in the log.
_TASK_ERROR = re.compile(r"^\s*fedcore\.errors\.\w+: (.+)$", re.M)


# -- compile ------------------------------------------------------------------------------------


def compile_pipeline(pipeline: Any, out: str | Path) -> Path:
    """Compile to YAML via a temp file in the same folder, so `out` is never half-written."""
    from kfp import compiler

    out = Path(out)
    if out.is_dir():  # os.replace onto a folder would fail after compiling, with a traceback
        raise UserError(f"--out '{out}' is a folder; pass a file path such as {out / 'pipeline.yaml'}")
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".yaml", dir=out.parent)
    os.close(fd)
    try:
        compiler.Compiler().compile(pipeline, tmp)
        publish(tmp, out)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return out


def load_specs(path: str | Path) -> tuple[Any, Any]:
    """(PipelineSpec, PlatformSpec or None) parsed from a compiled package, as the KFP backend parses it."""
    from google.protobuf import json_format
    from kfp.pipeline_spec import pipeline_spec_pb2

    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d]
    except (OSError, yaml.YAMLError) as err:
        raise ArtifactError(f"cannot read pipeline package '{path}': {type(err).__name__}") from None
    spec = json_format.ParseDict(docs[0], pipeline_spec_pb2.PipelineSpec())
    platform = json_format.ParseDict(docs[1], pipeline_spec_pb2.PlatformSpec()) if len(docs) > 1 else None
    return spec, platform


# -- local ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def _one_thread_per_task() -> Iterator[None]:
    """Tasks (and loop iterations, which run in parallel) inherit OMP_NUM_THREADS=1 unless set.

    Small federated models gain nothing from intra-op threads, and on a busy laptop the
    threads' spin-waits cost several times the work itself (measured: 6.5 s vs 44 s CPU).
    """
    old = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = old or "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("OMP_NUM_THREADS", None)


@contextlib.contextmanager
def _root_logger_kept() -> Iterator[None]:
    """Give the root logger's handlers and level, and `print`, back as they were before the pipeline ran.

    kfp.local runs a loop's tasks on threads, and each task swaps process globals in and out
    without a lock, so two tasks that overlap leave one task's version installed for good:
    - the root logger's handlers (logging_utils.local_logger_context): the leftover StreamHandler
      writes to this run's log sink, closed once the run ends, so every later log record in the
      process failed with "--- Logging error ---" (tests after a sweep lost their output);
    - builtins.print (logging_utils.indented_print): the leftover wrapper writes four spaces to
      stdout before every later print, even a print to stderr, so the next printed line starts
      indented (tests that parse a script's printed table lost rows, now and then, in the full suite).
    """
    root = logging.getLogger()
    handlers, level, printer = root.handlers[:], root.level, builtins.print
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        builtins.print = printer


@contextlib.contextmanager
def _quiet(log_path: Path, plan: TaskPlan, echo: bool) -> Iterator[None]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "a", encoding="utf-8") as log, warnings.catch_warnings():
        # Resources, accelerators and kfp-kubernetes settings only matter on a cluster.
        warnings.filterwarnings("ignore", message=".*no effect in the current local runner.*")
        # The project image is the one this environment was installed from; kfp cannot know that.
        warnings.filterwarnings("ignore", message=".*custom or non-Python base image.*")
        sink = Echo(log, sys.stdout if echo else None, plan)
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                yield
        finally:
            sink.drain()  # a last line without its newline still counts


@dataclass
class LocalRun:
    """A finished local pipeline run: its folder under `<root>/kfp`, the records of its
    evaluate tasks (what `compare` gets), and the pipeline's output, if it has one."""

    run_dir: Path | None
    records: list[dict[str, Any]] = field(default_factory=list)
    output: Any = None


def _records(run_dir: Path | None) -> list[dict[str, Any]]:
    # Each evaluate task writes its run's record next to its figures.
    if run_dir is None:
        return []
    return [json.loads(f.read_text()) for f in sorted(run_dir.glob("**/figures/record.json"))]


def run_local(pipeline: Any, root: str | Path, echo: bool = True, docker: Any = None, **arguments: Any) -> LocalRun:
    """Run the pipeline object itself (or a compiled package loaded with kfp) under kfp.local's
    SubprocessRunner, in this Python environment, or with `docker` (a `pipelines.docker.DockerTasks`)
    each task in the project image; `arguments` are its run-time inputs.

    Artifacts land under `<root>/kfp`, the full task log in `<root>/kfp-local.log`; with
    `echo`, one numbered line per finished task is printed (`pipelines.progress`). Subprocess
    tasks start from a fork server that has imported their libraries once (`pipelines.forkserver`;
    FEDCORE_FORKSERVER=0 turns it off).
    """
    from kfp import local

    from pipelines import docker as in_docker
    from pipelines import forkserver

    root = Path(root).resolve()
    if root.exists() and not root.is_dir():  # caught here, not as a traceback from the log's mkdir
        raise UserError(f"--out '{root}' is a file; pass a folder for the pipeline's run dir")
    if docker is not None:
        in_docker.check(docker)
        in_docker.prepare_root(root / "kfp")
        task_runner = in_docker.runner(docker)
    else:
        task_runner = local.SubprocessRunner(use_venv=False)
    local.init(runner=task_runner, pipeline_root=str(root / "kfp"), raise_on_error=True)
    log = root / "kfp-local.log"
    start = log.stat().st_size if log.is_file() else 0  # the log is appended to across runs
    before = set((root / "kfp").glob("*")) if (root / "kfp").is_dir() else set()
    try:
        # The fork server starts inside _one_thread_per_task: its torch reads OMP_NUM_THREADS on import.
        serving = forkserver.serving() if docker is None else contextlib.nullcontext()
        with _one_thread_per_task(), serving, _root_logger_kept(), _quiet(log, task_plan(pipeline, arguments), echo):
            task = pipeline(**arguments)
        # The embedded MLflow store of docker tasks sits in the pipeline root too (pipelines.docker).
        new = sorted(p for p in set((root / "kfp").glob("*")) - before if p.name != "mlruns")
        run_dir = new[-1] if new else None
        outputs = getattr(task, "outputs", None) or {}
        return LocalRun(run_dir, _records(run_dir), outputs.get("Output"))
    except RuntimeError as err:
        text = _ANSI.sub("", " ".join(str(err).split()))
        cause = task_error(log, start)
        where = f"Cause: {cause}; see {log}" if cause else f"See {log}"
        raise UserError(f"{text} {where} for the task's traceback") from None
    except KeyboardInterrupt as err:  # Ctrl-C (SIGTERM as fedcore.errors.Terminated, where a handler set it)
        sig = stop_signal(err)
        raise Interrupted(f"{stopped_line(sig)} before the pipeline finished; the finished tasks' artifacts are "
                          f"kept under {root / 'kfp'} and their logs in {log}, but a local run does not resume: the "
                          "same command again runs the pipeline from its start", EXIT_CODES[sig]) from None


def task_error(log: Path, start: int = 0) -> str | None:
    """The last fedcore error a task raised (bad input, missing files, ...), read from the task log
    past byte `start`: that line says what to fix, which kfp's own "Inner task failed" does not."""
    try:
        with open(log, "rb") as f:
            f.seek(start)
            text = f.read().decode("utf-8", errors="replace")
        found = _TASK_ERROR.findall(_ANSI.sub("", text))
    except OSError:
        return None
    return found[-1].strip() if found else None


# -- cluster --------------------------------------------------------------------------------------


def check_host(host: str) -> str:
    url = urlparse(host or "")
    if url.scheme not in ("http", "https") or not url.netloc:
        raise UserError(f"bad --host '{host}'; pass the KFP API URL, e.g. http://localhost:8080")
    return host.rstrip("/")


@contextlib.contextmanager
def _kfp_errors(host: str, what: str) -> Iterator[None]:
    import urllib3
    from kfp_server_api.exceptions import ApiException

    try:
        with contextlib.redirect_stdout(io.StringIO()):  # kfp prints its own links; the CLI prints one line
            yield
    except urllib3.exceptions.HTTPError as err:
        reason = getattr(err, "reason", None) or err
        raise UserError(f"cannot reach the KFP API at {host} ({_short(reason)}); check --host and the port-forward")\
            from None
    except ApiException as err:
        raise UserError(f"KFP API at {host} refused to {what}: HTTP {err.status} {_short(err.body or err.reason)}")\
            from None


def _short(obj: Any, limit: int = 200) -> str:
    text = " ".join(str(obj).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def client(host: str) -> Any:
    import kfp

    host = check_host(host)
    with _kfp_errors(host, "answer"), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "only works with KFP v2.0.0-beta.2 and later"
        return kfp.Client(host=host)


def submit(host: str, package: str | Path, experiment: str, run_name: str, service_account: str,
           arguments: dict[str, Any] | None = None) -> str:
    """Start one run of a compiled package; returns the run id."""
    kfp_client = client(host)
    with _kfp_errors(host, "create the run"):
        result = kfp_client.create_run_from_pipeline_package(
            str(package), arguments=arguments or {}, run_name=run_name, experiment_name=experiment,
            service_account=service_account,
        )
    return str(result.run_id)


def schedule(host: str, package: str | Path, experiment: str, job_name: str, cron: str, service_account: str,
             params: dict[str, Any] | None = None) -> str:
    """A recurring run on `cron` (6 fields, seconds first): one run at a time, no catch-up; returns its id."""
    check_cron(cron)
    kfp_client = client(host)
    with _kfp_errors(host, "create the recurring run"):
        exp = kfp_client.create_experiment(experiment).experiment_id  # gets it when it exists
        job = kfp_client.create_recurring_run(
            experiment_id=exp, job_name=job_name, cron_expression=cron, max_concurrency=1, no_catchup=True,
            pipeline_package_path=str(package), params=params or {}, service_account=service_account,
        )
    return str(job.recurring_run_id)


def check_cron(cron: str) -> str:
    # KFP's scheduler takes 6 fields (seconds first); a 5-field crontab line would silently shift.
    if len(cron.split()) != 6:
        raise UserError(f"--cron '{cron}' must have 6 fields (second minute hour day month weekday), "
                        "e.g. '0 0 2 * * *' for 02:00 daily")
    return cron

"""One pipeline stage as a Kubeflow Trainer TrainJob: stage the inputs, submit, wait, collect.

A stage task compiled with `resources.workers > 1` does not train itself. It

1. uploads the stage's inputs (the FederatedDataset artifact, the previous stage's run dir)
   and a spec (config, hash, stage, tracking run) under `<trainjob_prefix>/<job name>/`,
   because the TrainJob's nodes share no disk with the task's pod;
2. creates a TrainJob (`trainjob.stage_trainjob`) whose ranks run `fedcore.pipeline.ranks` on
   that spec; rank 0 writes the run dir locally and uploads it to `<...>/out/` at the end;
3. polls the TrainJob's conditions until `Complete` (then downloads `out/` into the task's
   checkpoint artifact, so the next task sees the same run dir as a one-pod stage writes) or
   `Failed` / the timeout (then `TrainJobFailed`, one line naming the job and the `kubectl`
   command that shows why). A timed-out job, and the job of a task that is stopped (SIGTERM,
   Ctrl-C), is deleted so it frees its nodes.

The Kubernetes API is injected (`api`: anything with CustomObjectsApi's
create/get/delete_namespaced_custom_object), so all of this runs in tests against a fake.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from fedcore.config import ExperimentConfig
from fedcore.engine.interrupt import terminate_as_interrupt
from fedcore.errors import UserError
from fedcore.io import download_dir, upload_dir, write_bytes
from fedcore.pipeline.resources import PipelineResources
from fedcore.pipeline.trainjob import API_VERSION, stage_trainjob

GROUP, VERSION = API_VERSION.split("/")
PLURAL = "trainjobs"
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
POLL_S = 30.0


class TrainJobFailed(UserError):
    """A TrainJob fedcore submitted failed, timed out or could not be submitted."""


class CustomObjects(Protocol):
    """The part of kubernetes.client.CustomObjectsApi this module uses."""

    def create_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                        body: Any) -> Any: ...

    def get_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                     name: str) -> Any: ...

    def delete_namespaced_custom_object(self, group: str, version: str, namespace: str, plural: str,
                                        name: str) -> Any: ...


def in_cluster_api() -> tuple[CustomObjects, str]:
    """The CustomObjectsApi of the pod's service account and the pod's namespace."""
    from kubernetes import client, config  # lazy: the cluster client, for a TrainJob stage only

    try:
        config.load_incluster_config()
        namespace = NAMESPACE_FILE.read_text().strip()
    except (config.ConfigException, OSError) as err:
        raise TrainJobFailed(f"resources.workers > 1 submits a TrainJob, which needs the Kubernetes API of a "
                             f"cluster pod ({err}); run the pipeline on the cluster, or compile it with "
                             "--workers 1") from None
    return client.CustomObjectsApi(), namespace


def job_name(label: str) -> str:
    """A fresh RFC 1035 name (<= 63 chars) from the task label: a retry must not meet its predecessor."""
    stem = re.sub(r"[^a-z0-9-]+", "-", label.lower()).strip("-")[:48].strip("-") or "stage"
    return f"fc-{stem}-{uuid.uuid4().hex[:8]}"


def job_state(obj: Mapping[str, Any]) -> tuple[str | None, str]:
    """("Complete" | "Failed" | None, message) from a TrainJob's status conditions."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            # Condition messages may span lines; the error that quotes one must not.
            return cond["type"], " ".join((cond.get("message") or cond.get("reason") or "").split())
    return None, ""


def api_failure(err: BaseException) -> bool:
    """An error of the API or of reaching it (kubernetes' ApiException carries an HTTP status,
    urllib3's errors a dead connection), as opposed to a bug, which stays loud."""
    return isinstance(getattr(err, "status", None), int) or type(err).__module__.startswith("urllib3")


def describe(err: BaseException) -> str:
    """`Forbidden (403): <the API server's message>` from an ApiException, else the error's text."""
    status, reason = getattr(err, "status", None), getattr(err, "reason", None)
    try:
        message = json.loads(getattr(err, "body", None) or "{}").get("message", "")
    except (TypeError, ValueError, AttributeError):
        message = ""
    head = f"{reason} ({status})" if status is not None else f"{type(err).__name__}: {err}"
    return " ".join(f"{head}: {message}".split()) if message else head


def get_job(api: CustomObjects, namespace: str, name: str, log: Callable[[str], None]) -> dict[str, Any]:
    """The TrainJob, or {} when the API cannot be reached this time (the caller polls again)."""
    try:
        return api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    except Exception as err:
        if not api_failure(err):
            raise
        if getattr(err, "status", None) == 404:
            raise TrainJobFailed(f"TrainJob {namespace}/{name} is gone (deleted while the stage waited for "
                                 "it); run the stage again") from None
        log(f"TrainJob {name}: status unavailable ({describe(err)}); polling again")
        return {}


def progress(line: str) -> None:
    print(line, flush=True)  # a pod's log is read while it runs


def inspect_hint(name: str, namespace: str) -> str:
    return f"kubectl -n {namespace} describe trainjob {name}; kubectl -n {namespace} logs -l " \
           f"jobset.sigs.k8s.io/jobset-name={name} --prefix"


def wait_for(api: CustomObjects, namespace: str, name: str, timeout_s: float, poll_s: float = POLL_S,
             sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
             log: Callable[[str], None] = progress) -> dict[str, Any]:
    """Poll the TrainJob until it completes (returns it) or fails or times out (TrainJobFailed)."""
    start = clock()
    while True:
        obj = get_job(api, namespace, name, log)
        state, message = job_state(obj)
        if state == "Complete":
            log(f"TrainJob {name}: Complete after {clock() - start:.0f} s")
            return obj
        if state == "Failed":
            raise TrainJobFailed(f"TrainJob {namespace}/{name} failed: {message or 'no message'}; "
                                 f"inspect it with `{inspect_hint(name, namespace)}`")
        waited = clock() - start
        if waited >= timeout_s:
            api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            raise TrainJobFailed(f"TrainJob {namespace}/{name} did not finish within {timeout_s:.0f} s "
                                 f"(deleted); raise resources.trainjob_timeout_s, or inspect it with "
                                 f"`{inspect_hint(name, namespace)}` before it is gone")
        jobs = (obj.get("status") or {}).get("jobsStatus") or []
        counts = ", ".join(f"{j.get('name')}: {j.get('active', 0)} active, {j.get('succeeded', 0)} succeeded"
                           for j in jobs) or "no pods yet"
        log(f"TrainJob {name}: running for {waited:.0f} s ({counts})")
        sleep(min(poll_s, max(timeout_s - waited, 0.0)))


def owner_reference(env: Mapping[str, str] = os.environ) -> dict[str, Any] | None:
    """The stage's own pod as the TrainJob's owner, from the KFP launcher's KFP_POD_NAME/KFP_POD_UID:
    deleting the run's pods then deletes the job instead of leaving its nodes busy."""
    name, uid = env.get("KFP_POD_NAME"), env.get("KFP_POD_UID")
    if not (name and uid):
        return None
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid, "blockOwnerDeletion": False}


def stage_inputs(prefix: str, data_dir: str | Path, resume: str | Path | None) -> tuple[str, str | None]:
    """Upload the dataset artifact and the previous run dir under `prefix`; their s3:// URIs."""
    data_uri = f"{prefix}/data"
    upload_dir(data_dir, data_uri)
    resume_uri = None
    if resume is not None:
        resume_uri = f"{prefix}/resume"
        upload_dir(resume, resume_uri)
    return data_uri, resume_uri


def run_on_trainjob(cfg: ExperimentConfig, spec: dict[str, Any], res: PipelineResources, out_dir: str | Path,
                    api: CustomObjects | None = None, namespace: str | None = None, label: str = "stage",
                    **wait: Any) -> str:
    """Run the stage `spec` (ranks.py's fields, with local data_dir/resume) as a TrainJob of
    `res.workers` nodes and download its run dir into `out_dir`; returns the job's name."""
    if api is None:
        api, namespace = in_cluster_api()
    namespace = namespace or "default"
    name = job_name(label)
    prefix = f"{res.trainjob_prefix.rstrip('/')}/{name}"
    data_uri, resume_uri = stage_inputs(prefix, spec["data_dir"], spec["resume"])
    # out_dir is the task's own folder: the ranks write to a temp dir and upload to `upload`.
    remote = {**{k: v for k, v in spec.items() if k != "out_dir"}, "data_dir": data_uri, "resume": resume_uri,
              "upload": f"{prefix}/out", "config": cfg.to_yaml(), "config_hash": cfg.config_hash()}
    write_bytes(f"{prefix}/spec.json", json.dumps(remote).encode())
    # The API server checks the manifest against the installed CRD (the tests check it against
    # the vendored schema, which needs jsonschema, a dev dependency).
    manifest = stage_trainjob(name, f"{prefix}/spec.json", res, owner_reference())
    try:
        api.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, manifest)
    except Exception as err:
        if not api_failure(err):
            raise
        raise TrainJobFailed(f"cannot create TrainJob {namespace}/{name}: {describe(err)}; is Kubeflow Trainer "
                             "installed and does the runner's Role allow trainjobs (docs/deploy.md, "
                             "'Multi-node stages')?") from None
    print(f"TrainJob {namespace}/{name}: {res.workers} nodes x {max(res.gpus(), 1)} ranks, "
          f"run dir to {prefix}/out", flush=True)
    with terminate_as_interrupt():
        try:
            wait_for(api, namespace, name, res.trainjob_timeout_s, **wait)
        except KeyboardInterrupt:
            # A stopped task (Ctrl-C, SIGTERM from a cancelled run) must not leave its nodes training.
            api.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            raise
    download_dir(f"{prefix}/out", out_dir)
    return name

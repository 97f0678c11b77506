"""A stage as a Kubeflow Trainer TrainJob without a cluster: a fake CustomObjectsApi that
answers create/get/delete from a script of statuses, and a real S3 server (moto) between the
stage task and the ranks."""

from __future__ import annotations

import json
import re

import pytest
import torch

from fedcore.data.build import build
from fedcore.io import read_bytes
from fedcore.pipeline import ops, ranks
from fedcore.pipeline.inputs import RunInputs
from fedcore.pipeline.plan import stage_names
from fedcore.pipeline.resources import PipelineResources
from fedcore.pipeline.trainjob import validate_trainjob
from fedcore.pipeline.trainjob_stage import TrainJobFailed, in_cluster_api, job_name, job_state, wait_for
from fedcore.registries import load_config

RUNNING = {"status": {"jobsStatus": [{"name": "node", "active": 2, "succeeded": 0}]}}
COMPLETE = {"status": {"conditions": [{"type": "Created", "status": "True", "message": "jobs created"},
                                      {"type": "Complete", "status": "True", "message": "done"}]}}
FAILED = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "JobFailed",
                                     "message": "jobset node-0 failed:\n  BackoffLimitExceeded"}]}}


class FakeApi:
    """CustomObjectsApi's create/get/delete: `get` answers `statuses` in turn (the last repeats);
    `on_create(body)` plays the TrainJob's pods."""

    def __init__(self, statuses, on_create=None):
        self.statuses, self.on_create = list(statuses), on_create
        self.created, self.deleted, self.gets = [], [], 0

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        assert (group, version, plural) == ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
        self.created.append((namespace, body))
        if self.on_create:
            self.on_create(body)
        return body

    def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        assert name == self.created[-1][1]["metadata"]["name"]  # polls the job it created
        self.gets += 1
        answer = self.statuses[min(self.gets - 1, len(self.statuses) - 1)]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name):
        self.deleted.append(name)


class ApiError(Exception):
    """What kubernetes.client.ApiException carries: an HTTP status, a reason, a JSON body."""

    def __init__(self, status, reason, message=""):
        super().__init__(reason)
        self.status, self.reason, self.body = status, reason, json.dumps({"message": message})


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.now += s


def _wait(api, timeout=100.0, poll=30.0):
    clock, lines = Clock(), []
    api.created.append(("ns", {"metadata": {"name": "fc-job"}}))
    out = wait_for(api, "ns", "fc-job", timeout, poll, sleep=clock.sleep, clock=clock, log=lines.append)
    return out, lines, clock


def test_job_state_reads_the_terminal_condition():
    assert job_state({}) == (None, "") and job_state(RUNNING) == (None, "")
    assert job_state(COMPLETE) == ("Complete", "done")
    assert job_state(FAILED) == ("Failed", "jobset node-0 failed: BackoffLimitExceeded")
    assert job_state({"status": {"conditions": [{"type": "Failed", "status": "False", "message": "x"}]}}) == (None, "")


def test_wait_polls_until_complete_and_logs_progress():
    api = FakeApi([{}, RUNNING, RUNNING, COMPLETE])
    out, lines, clock = _wait(api)
    assert out is COMPLETE and api.gets == 4 and clock.now == 90.0 and not api.deleted
    assert lines[0] == "TrainJob fc-job: running for 0 s (no pods yet)"
    assert lines[1] == "TrainJob fc-job: running for 30 s (node: 2 active, 0 succeeded)"
    assert lines[-1] == "TrainJob fc-job: Complete after 90 s"


def test_a_failed_job_is_one_line_naming_it_its_message_and_kubectl():
    with pytest.raises(TrainJobFailed) as err:
        _wait(FakeApi([RUNNING, FAILED]))
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("TrainJob ns/fc-job failed: jobset node-0 failed: BackoffLimitExceeded")
    assert "kubectl -n ns describe trainjob fc-job" in msg


def test_a_job_past_the_timeout_is_deleted_and_reported():
    api = FakeApi([RUNNING])
    with pytest.raises(TrainJobFailed, match=r"did not finish within 100 s \(deleted\); raise "
                                             r"resources.trainjob_timeout_s"):
        _wait(api, timeout=100.0, poll=30.0)
    assert api.deleted == ["fc-job"] and api.gets == 5  # at 0, 30, 60, 90 and 100 s


def test_an_unreachable_api_is_polled_again_and_a_deleted_job_is_reported():
    out, lines, _ = _wait(FakeApi([ApiError(503, "Service Unavailable", "etcd leader changed"), COMPLETE]))
    assert out is COMPLETE
    assert lines[0] == "TrainJob fc-job: status unavailable (Service Unavailable (503): etcd leader changed); " \
                       "polling again"
    with pytest.raises(TrainJobFailed, match=r"^TrainJob ns/fc-job is gone \(deleted while the stage waited"):
        _wait(FakeApi([RUNNING, ApiError(404, "Not Found")]))
    with pytest.raises(TypeError):  # a bug is not an API failure: it stays loud
        _wait(FakeApi([TypeError("bad argument")]))


def test_job_names_are_fresh_rfc1035_labels():
    names = {job_name("FedSIR_digits · identify"), job_name("FedSIR_digits · identify"), job_name("9" * 80)}
    assert len(names) == 3
    for name in names:
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name) and len(name) <= 63, name


def test_outside_a_cluster_the_submission_is_refused_in_one_line(monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(TrainJobFailed, match="needs the Kubernetes API of a cluster pod .*--workers 1"):
        in_cluster_api()


# -- the whole stage, with the ranks played in-process --------------------------------------------

CONFIG = "configs/fedrg_digits_sym_localized.yaml"  # pretrain -> train: the second stage resumes
TINY = ["train.device=cpu", "train.executor=sequential", "train.local_epochs=1", "train.client_fraction=0.5",
        "train.threads=1", "train.rounds=2", "train.stage_rounds.pretrain=1", "partition.num_clients=6"]


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tj")
    cfg = load_config(CONFIG, TINY)
    data = build(cfg).save(tmp / "data")
    inp, stages = RunInputs(cfg.to_dict()), list(stage_names(cfg))
    ops.run_stage(inp, "pretrain", stages, data, None, tmp / "pretrain", nproc=1)
    ops.run_stage(inp, "train", stages, data, tmp / "pretrain", tmp / "local", nproc=1)
    return inp, stages, data, tmp


def _play_ranks(body):
    """What every TrainJob node runs, as one process: `torchrun -m fedcore.pipeline.ranks SPEC`."""
    assert validate_trainjob(body) == []
    trainer = body["spec"]["trainer"]
    assert trainer["command"] == ["torchrun", "-m", "fedcore.pipeline.ranks"] and trainer["numNodes"] == 2
    ranks.main(trainer["args"][0])


def test_a_trainjob_stage_collects_the_run_dir_rank_0_uploaded(pretrained, s3_bucket, tmp_path, monkeypatch):
    inp, stages, data, tmp = pretrained
    monkeypatch.setenv("KFP_POD_NAME", "exp-abc-train")
    monkeypatch.setenv("KFP_POD_UID", "1234-5678")
    res = PipelineResources(workers=2, accelerators=0, trainjob_prefix=f"s3://{s3_bucket}/tj")
    api = FakeApi([RUNNING, COMPLETE], on_create=_play_ranks)
    ops.run_stage(inp, "train", stages, data, tmp / "pretrain", tmp_path / "out", label="fedrg-train",
                  trainjob=res.model_dump(mode="json", exclude_none=True), api=api, namespace="team-a",
                  poll_s=0.0, log=lambda _: None)

    ((namespace, body),) = api.created
    assert namespace == "team-a" and body["metadata"]["name"].startswith("fc-fedrg-train-")
    assert body["metadata"]["ownerReferences"][0] == {"apiVersion": "v1", "kind": "Pod", "name": "exp-abc-train",
                                                      "uid": "1234-5678", "blockOwnerDeletion": False}
    spec = json.loads(read_bytes(body["spec"]["trainer"]["args"][0]))
    assert spec["stage"] == "train" and spec["resume"].endswith("/resume") and spec["data_dir"].endswith("/data")
    local, remote = torch.load(tmp / "local" / "model.pt"), torch.load(tmp_path / "out" / "model.pt")
    assert local.keys() == remote.keys() and all(torch.equal(local[k], remote[k]) for k in local)
    assert json.loads((tmp / "local" / "metrics.json").read_text()) == \
        json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert (tmp / "local" / "history.csv").read_text() == (tmp_path / "out" / "history.csv").read_text()


def test_failed_stopped_and_refused_trainjobs(pretrained, s3_bucket, tmp_path):
    """A failed job fails the stage in one line, a stopped task deletes its job, a refused create says why."""
    inp, stages, data, tmp = pretrained
    res = PipelineResources(workers=2, accelerators=0, trainjob_prefix=f"s3://{s3_bucket}/tj").model_dump(
        mode="json", exclude_none=True)
    with pytest.raises(TrainJobFailed, match=r"^TrainJob team-a/fc-fedrg-train-[0-9a-f]{8} failed: jobset"):
        ops.run_stage(inp, "train", stages, data, tmp / "pretrain", tmp_path / "a", label="fedrg-train",
                      trainjob=res, api=FakeApi([FAILED]), namespace="team-a", poll_s=0.0, log=lambda _: None)

    class Stopped(FakeApi):  # the task's pod gets SIGTERM (the run was cancelled) while it waits
        def get_namespaced_custom_object(self, *args, **kwargs):
            raise KeyboardInterrupt

    stopped = Stopped([])
    with pytest.raises(KeyboardInterrupt):
        ops.run_stage(inp, "train", stages, data, tmp / "pretrain", tmp_path / "c", label="fedrg-train",
                      trainjob=res, api=stopped, namespace="team-a")
    assert stopped.deleted == [stopped.created[0][1]["metadata"]["name"]]

    class Forbidden(FakeApi):
        def create_namespaced_custom_object(self, *args, **kwargs):
            raise ApiError(403, "Forbidden", 'trainjobs.trainer.kubeflow.org is forbidden: User '
                           '"system:serviceaccount:team-a:default" cannot create resource "trainjobs"')

    with pytest.raises(TrainJobFailed, match=r"cannot create TrainJob team-a/fc-fedrg-train-\w+: Forbidden \(403\): "
                                             r"trainjobs.trainer.kubeflow.org is forbidden: .*; is Kubeflow Trainer"):
        ops.run_stage(inp, "train", stages, data, tmp / "pretrain", tmp_path / "b", label="fedrg-train",
                      trainjob=res, api=Forbidden([]), namespace="team-a")

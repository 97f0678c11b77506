"""Runs of one experiment logging the same dataset at once (a bench's parallel tunes on one
artifact): MLflow's store looks the dataset up and then inserts it, so all but one used to fail on
its unique key ("UNIQUE constraint failed: datasets.experiment_id, datasets.name, datasets.digest")
and took their task down. Both now log it."""

from __future__ import annotations

import multiprocessing as mp

import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from fedcore.errors import TrackingError
from fedcore.tracking.base import DatasetInfo
from fedcore.tracking.mlflow import MlflowTracker

DATASET = DatasetInfo(name="digits", digest="0123456789abcdef", source="/data/fed", source_type="local",
                      schema={}, profile={"clients": 10})


def _log_at_once(uri: str, barrier, out) -> None:
    tracker = MlflowTracker(uri, "race")
    rid = tracker.start("r", {})
    barrier.wait()  # both processes reach MLflow's lookup before either inserts
    try:
        tracker.log_dataset(DATASET)
        out.put((rid, "ok"))
    except Exception as err:  # the parent asserts on what came back
        out.put((rid, f"{type(err).__name__}: {err}"))
    tracker.end()


def test_two_runs_logging_one_dataset_at_once_both_log_it(tmp_path):
    """Without the second call this failed in 3 of 3 tries here: the barrier lines the two lookups up."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowTracker(uri, "race")  # the schema and the experiment, before the race
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_log_at_once, args=(uri, barrier, out)) for _ in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=60)
    assert list(results.values()) == ["ok", "ok"], results
    client = MlflowClient(uri)
    for rid in results:
        inputs = client.get_run(rid).inputs.dataset_inputs
        assert [(i.dataset.name, i.dataset.digest) for i in inputs] == [("digits", DATASET.digest)]


def _tracker(tmp_path, monkeypatch, failures: int) -> tuple[MlflowTracker, list[int]]:
    tracker = MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "once")
    real, calls = tracker.client.log_inputs, []

    def log_inputs(*args, **kwargs):
        calls.append(1)
        if len(calls) <= failures:
            raise MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: datasets.digest")
        return real(*args, **kwargs)

    monkeypatch.setattr(tracker.client, "log_inputs", log_inputs)
    return tracker, calls


def test_a_collision_is_logged_on_the_second_call(tmp_path, monkeypatch):
    tracker, calls = _tracker(tmp_path, monkeypatch, failures=1)
    rid = tracker.start("r", {})
    tracker.log_dataset(DATASET)
    assert len(calls) == 2
    assert len(MlflowClient(tracker.uri).get_run(rid).inputs.dataset_inputs) == 1


def test_a_refusal_that_stays_is_raised_after_one_more_call(tmp_path, monkeypatch):
    tracker, calls = _tracker(tmp_path, monkeypatch, failures=5)
    tracker.start("r", {})
    with pytest.raises(TrackingError, match="log_inputs failed"):
        tracker.log_dataset(DATASET)
    assert len(calls) == 2

"""NullTracker's checks, make_tracker, and TrackingCallback's logic against a recording tracker."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from fedcore.config import ExperimentConfig, TrackingConfig
from fedcore.reporting.report import run_figures
from fedcore.tracking import NullTracker, Tracker, make_tracker, run_params
from fedcore.tracking.callback import TrackingCallback
from fedcore.tracking.null import NULL_RUN_ID


class RecordingTracker(NullTracker):
    """NullTracker (so inputs are still checked) that remembers what it was asked to log."""

    def __init__(self, known_params: dict[str, str] | None = None) -> None:
        super().__init__()
        self.calls: list[tuple] = []
        self._known = known_params or {}

    def start(self, run_name, tags, parent_run_id=None, run_id=None, nested=False):
        rid = super().start(run_name, tags, parent_run_id, run_id, nested)
        self._params[rid].update(self._known)
        self.calls.append(("start", run_name, parent_run_id, run_id, nested))
        self.calls.append(("start_tags", dict(tags)))
        return rid

    def log_params(self, params):
        super().log_params(params)
        self.calls.append(("params", dict(params)))

    def log_metrics(self, metrics, step):
        super().log_metrics(metrics, step)
        self.calls.append(("metrics", step, dict(metrics)))

    def set_tags(self, tags):
        super().set_tags(tags)
        self.calls.append(("tags", dict(tags)))

    def log_artifact(self, local_path, artifact_path=None):
        super().log_artifact(local_path, artifact_path)
        self.calls.append(("artifact", Path(local_path).name, artifact_path))

    def log_state_dict(self, state_dict, artifact_path):
        super().log_state_dict(state_dict, artifact_path)
        self.calls.append(("state_dict", sorted(state_dict), artifact_path))

    def log_model(self, model, example, name="model", step=0):
        super().log_model(model, example, name, step)
        with torch.no_grad():
            out = model(torch.from_numpy(example))
        self.calls.append(("model", name, step, tuple(out.shape), out.sum(1).tolist()))
        return "m-1"

    def log_dataset(self, dataset):
        super().log_dataset(dataset)
        self.calls.append(("dataset", dataset))

    def start_system_metrics(self, interval_s):
        super().start_system_metrics(interval_s)
        self.calls.append(("system", interval_s))

    def end(self, status="FINISHED"):
        super().end(status)
        self.calls.append(("end", status))

    def of(self, kind: str) -> list[tuple]:
        return [c[1:] for c in self.calls if c[0] == kind]


def make_cfg(**tracking) -> ExperimentConfig:
    return ExperimentConfig.model_validate({"method": {"name": "fedgr"}, "tracking": tracking})


def test_null_tracker_lifecycle_and_checks(tmp_path):
    t = NullTracker()
    assert isinstance(t, Tracker)
    with pytest.raises(RuntimeError, match="start"):
        t.log_metrics({"a": 1.0}, step=0)

    assert t.start("r", {"k": "v"}) == NULL_RUN_ID
    assert t.start("again", {}, run_id="abc") == "abc"
    t.log_params({"lr": 0.1})
    assert t.logged_params() == {"lr": "0.1"}
    with pytest.raises(TypeError, match="step"):
        t.log_metrics({"a": 1.0}, step=-1)
    with pytest.raises(ValueError):
        t.log_metrics({"a": "high"}, step=0)
    with pytest.raises(FileNotFoundError):
        t.log_artifact(tmp_path / "missing.txt")
    with pytest.raises(TypeError, match="state_dict"):
        t.log_state_dict(torch.nn.Linear(2, 2), "model")
    with pytest.raises(ValueError, match="status"):
        t.end("DONE")
    t.end()
    assert t.run_id == NULL_RUN_ID
    t.end("FAILED")
    assert t.run_id is None


def test_null_tracker_nested_needs_a_parent():
    with pytest.raises(RuntimeError, match="parent"):
        NullTracker().start("child", {}, nested=True)


def test_make_tracker_none_backend(tmp_path):
    assert isinstance(make_tracker(TrackingConfig(backend="none"), tmp_path), NullTracker)


def _write_outputs(out: Path) -> None:
    torch.save({"w": torch.ones(2)}, out / "model.pt")
    (out / "history.csv").write_text("round,test/acc\n1,0.5\n")
    (out / "metrics.json").write_text(json.dumps({"final/acc": 0.5}))
    (out / "noise_report.json").write_text("{}")
    (out / "noise_scene.png").write_bytes(b"\x89PNG")


def test_callback_logs_a_whole_run(tmp_path):
    tracker, cfg = RecordingTracker(), make_cfg(backend="mlflow")
    cb = TrackingCallback(tracker, cfg, data_sha256="ab" * 32)
    ckpt = tmp_path / "stage-train.pt"
    ckpt.write_bytes(b"ckpt")
    _write_outputs(tmp_path)

    cb.on_run_start({"config": cfg, "out_dir": tmp_path, "stages": ["train"], "resumed": False,
                     "figures": run_figures})
    cb.after_round(1, "train", {"round": 1.0, "test/acc": 0.5, "train/loss": 1.0})
    cb.after_round(2, "train", {"round": 2.0, "test/acc": 0.6, "train/loss": 0.9})
    cb.on_stage_end("train", 2, ckpt)
    cb.on_run_end({"final/acc": 0.6, "last/test/acc": 0.6}, tmp_path)

    assert tracker.of("start") == [("fedgr · sym 0.4 · seed 0", None, None, False)]
    assert tracker.of("params") == [(run_params(cfg, "ab" * 32),)]
    # `round` is the step and `last/*` repeats each series' last point: neither is a metric.
    assert tracker.of("metrics") == [(1, {"test/acc": 0.5, "train/loss": 1.0}),
                                     (2, {"test/acc": 0.6, "train/loss": 0.9}), (2, {"final/acc": 0.6})]
    assert tracker.of("state_dict") == [(["w"], "state_dict")]
    assert tracker.of("system") == [(cfg.tracking.system_metrics_every,)]
    assert tracker.of("artifact") == [
        ("stage-train.pt", "checkpoints/train"),
        ("history.csv", None),
        ("metrics.json", None),
        ("noise_report.json", "reports"),
        ("noise_scene.png", "reports"),
        ("curves.png", "figures"),  # the run's curves as an image the MLflow UI shows (no rate estimates here)
    ]
    assert tracker.calls[-1] == ("end", "FINISHED")
    assert tracker.run_id is None


def test_callback_logs_the_figures_the_run_supplies_and_draws_none_itself(tmp_path):
    # Tracking sits below reporting: without info["figures"] there is nothing to draw them with.
    _write_outputs(tmp_path)
    figures = []

    def supplied(run_dir, title):
        figures.append((run_dir, title))
        return run_figures(run_dir, title)

    for info, logged in (({}, []), ({"figures": supplied}, [("curves.png", "figures")])):
        tracker = RecordingTracker()
        cb = TrackingCallback(tracker, make_cfg())
        cb.on_run_start({"out_dir": tmp_path, **info})
        cb.on_run_end({}, tmp_path)
        assert [a for a in tracker.of("artifact") if a[1] == "figures"] == logged
    assert figures == [(tmp_path, "fedgr · sym 0.4 · seed 0")]


def test_callback_skips_nonfinite_metrics_and_counts_them(tmp_path):
    tracker = RecordingTracker()
    cb = TrackingCallback(tracker, make_cfg())
    cb.on_run_start({})

    cb.after_round(1, "identify", {"a": 1.0, "b": math.nan})
    cb.after_round(2, "identify", {"a": math.inf, "b": -math.inf, "c": 3.0})

    assert tracker.of("metrics") == [(1, {"a": 1.0}), (2, {"c": 3.0})]
    assert tracker.of("tags")[-1] == (
        {"nonfinite_metrics.identify": "3", "nonfinite_metrics.last": "round 2: a, b"},
    )


def test_callback_resume_skips_known_params_and_tags_changed_ones(tmp_path):
    cfg = make_cfg(run_id="run-1")
    params = run_params(cfg, "sha")
    known = {**params, "train.rounds": "10"}
    tracker = RecordingTracker(known_params=known)
    cb = TrackingCallback(tracker, cfg, data_sha256="sha", keep_open=True)

    cb.on_run_start({})
    cb.on_run_end({}, tmp_path)

    assert tracker.of("start")[0][2] == "run-1"
    assert tracker.of("params") == [({},)]
    assert ({"changed_param.train.rounds": params["train.rounds"]},) in tracker.of("tags")
    assert tracker.of("end") == []
    assert tracker.run_id == "run-1"


def test_callback_nests_under_an_open_parent_and_fail_marks_only_its_run():
    tracker = RecordingTracker()
    parent = tracker.start_parent("sweep", {})
    cb = TrackingCallback(tracker, make_cfg())

    cb.on_run_start({})
    cb.fail(ValueError("loss\nexploded"))
    cb.fail("again")

    assert tracker.of("start")[1][3] is True
    assert ({"error": "loss exploded"},) in tracker.of("tags")
    assert tracker.of("end") == [("FAILED",)]
    assert tracker.run_id == parent


def test_callback_tags_the_source_only_on_runs_it_creates(tmp_path):
    fresh, resumed = RecordingTracker(), RecordingTracker()
    TrackingCallback(fresh, make_cfg(), source="fedcore run x.yaml").on_run_start({})
    TrackingCallback(resumed, make_cfg(run_id="run-1"), source="ignored").on_run_start({})

    ((created,),), ((continued,),) = fresh.of("start_tags"), resumed.of("start_tags")
    assert created["mlflow.source.name"] == "fedcore run x.yaml"
    assert created["mlflow.source.type"] == "LOCAL" and created["mlflow.user"]
    assert created["method"] == "fedgr"
    # A resumed run (a later pipeline stage) keeps the Source it was created with.
    assert not any(k.startswith("mlflow.") for k in continued) and continued["method"] == "fedgr"


def test_callback_logs_the_dataset_and_a_served_model(tmp_path):
    from fedcore.data.build import build_federated_dataset
    from fedcore.models import build_model

    cfg = ExperimentConfig.model_validate({"data": {"name": "digits", "max_train": 200},
                                           "partition": {"kind": "iid", "num_clients": 2},
                                           "tracking": {"backend": "mlflow", "system_metrics_every": 0}})
    fed = build_federated_dataset(cfg)
    model = build_model(cfg.model, tuple(fed.x_train.shape[1:]), fed.num_classes)
    tracker = RecordingTracker()
    cb = TrackingCallback(tracker, cfg)
    info = {"fed": fed, "data_source": "s3://bucket/fed/"}
    cb.on_run_start(info)
    cb.after_round(3, "train", {"test/acc": 0.1})
    info["final_model"] = model
    cb.on_run_end({}, tmp_path)

    ((ds,),) = tracker.of("dataset")
    assert (ds.source, ds.source_type, ds.context) == ("s3://bucket/fed/", "s3", "train")
    assert ds.profile["num_clients"] == 2 and ds.profile["num_rows"] == 200
    assert ds.schema["features"]["shape"] == [-1, *fed.x_train.shape[1:]]
    ((name, step, shape, sums),) = tracker.of("model")
    assert (name, step, shape) == ("model", 3, (4, fed.num_classes))
    assert sums == pytest.approx([1.0] * 4)  # the served model outputs class probabilities
    assert ({"model.id": "m-1", "model.uri": "models:/m-1"},) in tracker.of("tags")
    assert tracker.of("system") == []  # system_metrics_every: 0


def test_callback_skips_the_served_model_when_told_but_keeps_the_rest(tmp_path):
    from fedcore.data.build import build_federated_dataset
    from fedcore.models import build_model

    cfg = ExperimentConfig.model_validate({"data": {"name": "digits", "max_train": 100},
                                           "partition": {"kind": "iid", "num_clients": 2},
                                           "tracking": {"backend": "mlflow", "system_metrics_every": 0,
                                                        "log_model": False}})
    fed = build_federated_dataset(cfg)
    tracker = RecordingTracker()
    cb = TrackingCallback(tracker, cfg)
    info = {"fed": fed}
    cb.on_run_start(info)
    cb.after_round(1, "train", {"test/acc": 0.1})
    info["final_model"] = build_model(cfg.model, tuple(fed.x_train.shape[1:]), fed.num_classes)
    cb.on_run_end({}, tmp_path)
    assert tracker.of("model") == [] and len(tracker.of("dataset")) == 1
    assert not any("model.uri" in tags for (tags,) in tracker.of("tags"))


def test_the_null_tracker_refuses_a_ragged_table():
    t = NullTracker()
    t.start("r", {})
    t.log_table({"a": [1, 2], "b": [3, 4]}, "t.json")
    with pytest.raises(ValueError, match="one length"):
        t.log_table({"a": [1, 2], "b": [3]}, "t.json")
    with pytest.raises(TypeError):
        t.log_table({}, "t.json")


def test_compare_table_turns_rows_into_columns():
    from fedcore.pipeline.runs import compare_table

    got = compare_table({"header": ["method · setting", "last-10"], "rows": [["fedavg · noisy", "84.9"],
                                                                         ["fedsir · noisy", "92.5"]]})
    assert got == {"method · setting": ["fedavg · noisy", "fedsir · noisy"], "last-10": ["84.9", "92.5"]}

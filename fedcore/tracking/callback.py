"""Engine callback that records a run through a Tracker: params, per-round metrics, artifacts."""

from __future__ import annotations

import logging
import pickle
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedcore.engine.callbacks import Callback, EarlyStopping
from fedcore.errors import TrackingError
from fedcore.tracking import make_tracker
from fedcore.tracking.base import (
    check_metrics,
    run_name_for,
    run_params,
    source_tags,
    split_finite,
    standard_tags,
)
from fedcore.tracking.resilient import attach

if TYPE_CHECKING:
    from fedcore.config import ExperimentConfig
    from fedcore.tracking.base import Tracker

log = logging.getLogger(__name__)
ROOT_OUTPUTS = ("history.csv", "metrics.json")
REPORT_PATTERNS = ("*.png", "*.json")
STATE_DICT_PATH = "state_dict"  # the raw weights; the MLflow model itself is the run's LoggedModel "model"
# The loop's round counter is every metric's step; as a metric of its own it only adds a chart.
NOT_METRICS = ("round",)
# The summary's `last/<name>` values repeat each series' last point, which MLflow already
# shows as the metric's value; logged again they would double every chart.
REPEATED_PREFIX = "last/"


def command_line() -> str:
    """The command this process runs, as MLflow's Source (e.g. `fedcore run configs/x.yaml`)."""
    return shlex.join(["fedcore", *sys.argv[1:]])[:500]


class TrackingCallback(Callback):
    """Logs one engine run to `tracker`.

    keep_open: leave the run RUNNING at the end, for pipeline stage components whose
    successor resumes it by id (cfg.tracking.run_id); the last stage passes False and
    logs the MLflow model. Call `fail()` when the run dies so it ends FAILED instead of
    staying RUNNING. source: MLflow's Source of a run this callback creates (default: the
    command line). tags: added to the run's tags (e.g. the pipeline task working on it).
    data_source: where the dataset came from, for its Datasets entry (default: the path
    `fedcore.run` loaded it from; a pipeline task passes the artifact's URI).
    """

    def __init__(
        self,
        tracker: Tracker,
        cfg: ExperimentConfig,
        data_sha256: str | None = None,
        keep_open: bool = False,
        source: str | None = None,
        tags: dict[str, str] | None = None,
        data_source: str | None = None,
    ) -> None:
        self.tracker = tracker
        self.cfg = cfg
        self.data_sha256 = data_sha256
        self.keep_open = keep_open
        self.source = source
        self.tags = dict(tags or {})
        self.data_source = data_source
        self.run_id: str | None = None
        self._info: dict[str, Any] = {}
        self._open = False  # run ids alone cannot tell: NullTracker gives every run the same id
        self._last_round = 0
        self._stage: str | None = None
        self._nonfinite: dict[str, int] = {}

    # -- hooks ---------------------------------------------------------------------------

    def on_run_start(self, info: dict[str, Any]) -> None:
        # Outage-proof from here on: MLflow's retries, then a journal in the run dir (fedcore.tracking.resilient).
        self.tracker = attach(self.tracker, info)
        self.data_sha256 = self.data_sha256 or info.get("data_sha256")
        t = self.cfg.tracking
        # Inside an open (parent) run with nothing configured, become its child: the local sweep case.
        nested = t.run_id is None and t.parent_run_id is None and self.tracker.run_id is not None
        # A resumed run keeps the Source it was created with (a pipeline's child keeps its parent's).
        tags = {**standard_tags(self.cfg), **self.tags}
        if not t.run_id:
            tags = {**source_tags(self.source or command_line()), **tags}
        self.run_id = self.tracker.start(
            t.run_name or run_name_for(self.cfg),
            tags,
            parent_run_id=t.parent_run_id,
            run_id=t.run_id,
            nested=nested,
        )
        self._open = True
        self._info = info
        self._log_params(info.get("executor"))
        self.tracker.log_dict(self.cfg.to_dict(), "config.yaml")
        if info.get("fed") is not None:
            from fedcore.tracking.inputs import dataset_info  # lazy: loads torch, only to log a model or dataset

            source = self.data_source or info.get("data_source")
            self.tracker.log_dataset(dataset_info(info["fed"], self.cfg, source))
        if t.system_metrics_every > 0:
            self.tracker.start_system_metrics(t.system_metrics_every)

    def after_round(self, rnd: int, stage: str, metrics: dict[str, float]) -> None:
        self._last_round = rnd
        if stage != self._stage:
            self._stage = stage
            self.tracker.set_tags({"stage": stage})
        metrics = {k: v for k, v in metrics.items() if k not in NOT_METRICS}
        finite, bad = split_finite(check_metrics(metrics, rnd))
        if finite:
            self.tracker.log_metrics(finite, step=rnd)
        if bad:
            self._record_nonfinite(stage, rnd, bad)

    def on_stage_end(self, stage: str, rnd: int, checkpoint: Path | None) -> None:
        self._last_round = max(self._last_round, rnd)
        if checkpoint is not None:
            self.tracker.log_artifact(checkpoint, f"checkpoints/{stage}")

    def on_run_end(self, summary: dict[str, float], out_dir: Path) -> None:
        summary = {k: v for k, v in summary.items() if not k.startswith(REPEATED_PREFIX)}
        finite, bad = split_finite(check_metrics(summary, self._last_round))
        if finite:
            self.tracker.log_metrics(finite, step=self._last_round)
        if bad:
            self._record_nonfinite("summary", self._last_round, bad)
        self._log_outputs(Path(out_dir))
        self.tracker.flush(leave_open=self.keep_open)  # the uploads waited for the local outputs
        if self.keep_open:
            self.tracker.stop_system_metrics()
        else:
            self._log_served_model()
            self._end("FINISHED")

    def on_failure(self, error: BaseException) -> None:
        self.fail(error)

    def fail(self, error: BaseException | str | None = None) -> None:
        """End the run as FAILED (KILLED when interrupted: Ctrl-C, SIGTERM), recording the error;
        never raises over the original failure. One attempt per call: the process is going down."""
        if not self._open:
            return
        try:
            self.tracker.impatient()
            if error is not None:
                text = " ".join(str(error).split()) or type(error).__name__
                self.tracker.set_tags({"error": text[:1000]})
            self.tracker.flush()
            self._end("KILLED" if isinstance(error, KeyboardInterrupt) else "FAILED")
        except TrackingError as exc:
            log.warning("could not mark run %s as failed: %s", self.run_id, exc)

    # -- helpers -------------------------------------------------------------------------

    def _end(self, status: str) -> None:
        if self._open and self.tracker.run_id == self.run_id:
            self.tracker.end(status)
            self._open = False

    def _log_params(self, executor: str | None = None) -> None:
        """Log params, skipping ones a resumed run already holds; changed values become tags.

        MLflow refuses to change a logged param, yet resuming with an edited config (say, more
        rounds) is legitimate, so the new value is kept visible as `changed_param.<key>`.
        """
        params = run_params(self.cfg, self.data_sha256)
        if executor:  # what train.executor resolved to (auto picks per method)
            params["executor"] = executor
        known = self.tracker.logged_params()
        self.tracker.log_params({k: v for k, v in params.items() if k not in known})
        changed = {k: v for k, v in params.items() if k in known and known[k] != v}
        if changed:
            log.warning("resumed run %s: params changed since it started: %s", self.run_id, sorted(changed))
            self.tracker.set_tags({f"changed_param.{k}": v for k, v in changed.items()})

    def _record_nonfinite(self, stage: str, rnd: int, names: list[str]) -> None:
        # MLflow would store NaN/inf and wreck the plot axes; keep a count to show they happened.
        self._nonfinite[stage] = self._nonfinite.get(stage, 0) + len(names)
        last = f"round {rnd}: {', '.join(sorted(names))}"
        self.tracker.set_tags(
            {f"nonfinite_metrics.{stage}": str(self._nonfinite[stage]), "nonfinite_metrics.last": last[:1000]}
        )

    def _log_outputs(self, out_dir: Path) -> None:
        model = out_dir / "model.pt"
        if model.is_file():
            self._log_model(model)
        for name in ROOT_OUTPUTS:
            if (out_dir / name).is_file():
                self.tracker.log_artifact(out_dir / name)
        reports = {p for pattern in REPORT_PATTERNS for p in out_dir.glob(pattern)}
        for path in sorted(p for p in reports if p.name not in ROOT_OUTPUTS and p.is_file()):
            self.tracker.log_artifact(path, "reports")
        self._log_figures(out_dir)

    def _log_figures(self, out_dir: Path) -> None:
        """The run's figures as images the MLflow UI shows without a download. Tracking sits below
        reporting, so it draws nothing itself: the run supplies `info["figures"]`, a function
        (run dir, title) -> {artifact path: Figure} (`fedcore.run` passes reporting's run_figures)."""
        draw = self._info.get("figures")
        if draw is None:
            return
        import matplotlib.pyplot as plt  # lazy: matplotlib, only to log a figure

        for path, fig in draw(out_dir, run_name_for(self.cfg)).items():
            try:
                self.tracker.log_figure(fig, path)
            finally:
                plt.close(fig)  # a tune runs many trials in one process

    def _log_model(self, path: Path) -> None:
        import torch  # lazy: torch, only to log a model or tensor

        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except (pickle.UnpicklingError, RuntimeError) as exc:
            # Not a plain tensor dict (custom objects inside): upload the file as it is.
            log.warning("model.pt is not a plain state_dict (%s); uploading the raw file", exc)
            state = None
        if isinstance(state, dict):
            self.tracker.log_state_dict(state, STATE_DICT_PATH)
        else:
            self.tracker.log_artifact(path, STATE_DICT_PATH)

    def _log_served_model(self) -> None:
        """The final model as an MLflow model that `mlflow.pyfunc.load_model` serves.

        Export can fail for architectures torch.export cannot trace; the run then keeps its
        state_dict and says why it has no model, rather than failing after training.
        """
        model, fed = self._info.get("final_model"), self._info.get("fed")
        if model is None or fed is None or not self.cfg.tracking.log_model:
            return
        from fedcore.tracking.inputs import (  # lazy: loads torch, only to log a model or dataset
            describe,
            input_example,
            served,
        )

        try:
            model_id = self.tracker.log_model(served(model, fed), input_example(fed), step=self._last_round)
        except TrackingError:
            raise
        except Exception as exc:  # torch.export's failures have no common base class
            log.warning("run %s: could not log the MLflow model: %s", self.run_id, exc)
            self.tracker.set_tags(describe(None, exc))
            return
        if model_id:
            self.tracker.set_tags(describe(model_id))


def run_callbacks(cfg: Any, progress: Callback | None = None, main: bool = True) -> list[Callback]:
    """What every run of a config gets: `progress` (if any), early stopping, tracking, in that order.

    main=False (ranks 1.. of a distributed run): early stopping only, which every rank needs to
    stop together; the others become no-op placeholders in the same positions, since
    checkpoints keep callback state by position.
    """
    cbs: list[Callback] = []
    if progress is not None:
        cbs.append(progress if main else Callback())
    if cfg.train.early_stop_patience:
        cbs.append(EarlyStopping(cfg.train.early_stop_patience))
    if cfg.tracking.backend != "none":
        cbs.append(TrackingCallback(make_tracker(cfg.tracking, Path.cwd()), cfg, None) if main else Callback())
    return cbs

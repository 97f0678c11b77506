"""`fedcore tune`: an Optuna study whose trials are fedcore runs, judged on validation only.

A tune is a run dir of run dirs:

    OUT/study.db        the Optuna storage (sqlite): a killed tune resumes from it
    OUT/data/           the FederatedDataset every trial trains on (unless --data names one)
    OUT/trials/NNNN/    one fedcore run dir per trial
    OUT/tune.json       best_params, best_value, objective, n_trials, n_pruned, ...
    OUT/best.yaml       the config with the best params applied, on the tuning seed: report it on
                        others (`fedcore run OUT/best.yaml --set seed=0`)
    OUT/*.png           Optuna's optimization-history and param-importance figures

The objective is a validation score (`final/val_acc_last10` by default: the mean of the last
10 val/acc evaluations; `best` picks `final/val_acc_best`); the test split is never read for it.
The pruner stops a trial whose per-round val/acc falls below the median of earlier trials at the
same round, once a fifth of the run has passed after any stage whose scores predict nothing
(`prune_warmup`). A trial that diverges counts as pruned (its setting is too aggressive), so a tune of N
trials spends the same budget whatever diverges; a trial a killed tune left RUNNING is marked
failed and does not count. Each counted trial keeps the sampler's state after its draw, so a
resumed or extended tune draws exactly the points the same tune run in one go would have drawn.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from fedcore.config import ExperimentConfig
from fedcore.data.federated import FederatedDataset
from fedcore.engine.callbacks import Callback
from fedcore.errors import ConfigError, DivergedError, UserError
from fedcore.io import atomic_write, atomic_write_bytes, run_dir_lock
from fedcore.methods.registry import build_method
from fedcore.registries import load_config
from fedcore.reporting.config_diff import describe_diff
from fedcore.reporting.progress import trial_progress
from fedcore.run import load_or_build_data, run_experiment
from fedcore.tuning.sampler import SAMPLER_STATE, new_sampler, resume_sampler, sampler_state
from fedcore.tuning.space import Dim, as_overrides, default_point, search_space, suggest
from fedcore.tuning.tracking import Parent

OBJECTIVES = {"last10": "final/val_{m}_last10", "best": "final/val_{m}_best"}
DEFAULT_VALIDATION = 0.1
STUDY = "fedcore"


@dataclass
class TuneRequest:
    config: str
    overrides: list[str] = field(default_factory=list)
    trials: int = 8
    out: Path = Path("runs/tune")
    data: str | None = None
    objective: str = "last10"
    only: list[str] | None = None
    prune: bool = True
    progress: bool = True
    start_at_default: bool = False  # trial 0 is the config's own setting (default_point)


class TrialPruning(Callback):
    """Reports each round's validation score to the trial and ends the run when Optuna prunes it."""

    def __init__(self, trial: Any, key: str) -> None:
        self.trial, self.key, self.pruned = trial, key, False

    def after_round(self, rnd: int, stage: str, metrics: dict[str, float]) -> None:
        if self.key in metrics:
            self.trial.report(float(metrics[self.key]), rnd)
            self.pruned = self.pruned or self.trial.should_prune()

    def should_stop(self) -> bool:
        return self.pruned


def base_overrides(req: TuneRequest, cfg: ExperimentConfig, say) -> list[str]:
    """The request's overrides, plus a validation split when the config has none."""
    v = cfg.data.validation
    if v.fraction > 0 or v.server_clean > 0:
        return list(req.overrides)
    say(f"no data.validation in the config: each client holds out {DEFAULT_VALIDATION:.0%} of its samples "
        f"(data.validation.fraction={DEFAULT_VALIDATION}); the objective reads only those")
    return [*req.overrides, f"data.validation.fraction={DEFAULT_VALIDATION}"]


def open_study(out: Path, cfg: ExperimentConfig, dims: list[Dim], objective: str, prune: bool, warmup: int,
               start_at_default: bool = False):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=warmup) if prune \
        else optuna.pruners.NopPruner()
    study = optuna.create_study(
        study_name=STUDY, storage=f"sqlite:///{(out / 'study.db').resolve()}", direction="maximize",
        sampler=new_sampler(cfg.seed), pruner=pruner,
        load_if_exists=True)
    identity = {"config_hash": cfg.config_hash(), "space": [d.path for d in dims], "objective": objective}
    if start_at_default:  # only when set, so that tune dirs from before it keep comparing equal
        identity["start"] = "default"
    # What config_hash digests, so that a mismatch names the keys (stored beside the identity:
    # tune dirs from before it keep comparing equal).
    config = cfg.digested()
    stored = study.user_attrs.get("identity")
    if stored is None:
        study.set_user_attr("identity", identity)
        study.set_user_attr("config", config)
    elif stored != identity:
        raise ConfigError(f"'{out}' holds a tune of another config, space or objective "
                          f"({_identity_diff(stored, study.user_attrs.get('config'), identity, config)}); "
                          "continue it with the same arguments, or choose another --out")
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        # Only this process may hold the tune dir (run-dir lock), so a RUNNING trial is one a
        # killed tune left behind: it does not count, and its run dir stays as it was.
        study.tell(t.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    resume_sampler(study, cfg.seed)
    return study


def _identity_diff(stored: dict, stored_config: dict | None, identity: dict, config: dict) -> str:
    """'train.rounds: 3 (tune) vs 4; --param: [...] (tune) vs [...]': what differs, by key."""
    if stored_config is None:  # a tune dir from before configs were stored: only whether they differ is known
        same = stored["config_hash"] == identity["config_hash"]
        stored_config, config = ({}, {}) if same else ({"config": "another, not recorded"}, {"config": "this one"})
    def flags(ident: dict) -> dict:
        return {"--param": ident["space"], "--objective": ident["objective"],
                "--start-at-default": ident.get("start") == "default"}

    return describe_diff({**stored_config, **flags(stored)}, {**config, **flags(identity)}, "tune")


def counted(study) -> tuple[int, int]:
    """(finished trials, of which pruned): what counts towards --trials."""
    states = [t.state for t in study.get_trials(deepcopy=False)]
    pruned = states.count(optuna.trial.TrialState.PRUNED)
    return states.count(optuna.trial.TrialState.COMPLETE) + pruned, pruned


def run_tune(req: TuneRequest, say=print) -> dict[str, Any]:
    """Run (or resume) the tune until `req.trials` trials have finished; returns tune.json's content."""
    if req.objective not in OBJECTIVES:
        raise ConfigError(f"--objective '{req.objective}': choose one of {', '.join(OBJECTIVES)}")
    if req.trials < 1:
        raise ConfigError(f"--trials must be at least 1, got {req.trials}")
    first = load_config(req.config, req.overrides)
    first_dims = search_space(first, req.only)
    if not first_dims:  # bad input is refused before anything is said or written
        raise ConfigError(f"nothing to tune for method '{first.method.name}': no declared ranges")
    start = default_point(first, first_dims) if req.start_at_default else None
    overrides = base_overrides(req, first, say)
    cfg = load_config(req.config, overrides)
    dims = search_space(cfg, req.only)
    out = Path(req.out)
    with run_dir_lock(out):
        fed = trial_data(cfg, out, req.data)
        metric = "mAP" if fed.task == "multi" else "acc"
        study = open_study(out, cfg, dims, req.objective, req.prune, prune_warmup(cfg), req.start_at_default)
        if start is not None and not study.get_trials(deepcopy=False):
            study.enqueue_trial(start, user_attrs={"start": "default"})
        tracking = Parent(cfg, study)
        try:
            run_trials(req, overrides, dims, study, fed, metric, tracking)
            result = finish(req, overrides, dims, study, metric, out)
        except BaseException as err:
            tracking.end("KILLED" if isinstance(err, KeyboardInterrupt) else "FAILED")
            raise
        tracking.finish(result, out)
    return result


def prune_warmup(cfg: ExperimentConfig) -> int:
    """Rounds before the pruner may stop a trial: a fifth of the run, counted from the end of the
    last stage whose scores predict nothing (not evaluated, or not `comparable`: SSL pretraining,
    one client's model), so that no trial is stopped on noise."""
    stages = build_method(cfg).stages
    start = done = 0
    for s in stages:
        done += s.rounds
        if not (s.evaluate and s.comparable):
            start = done
    return start + max(1, done // 5)


def trial_data(cfg: ExperimentConfig, out: Path, data: str | None):
    """The one dataset artifact of every trial: --data, or OUT/data prepared once."""
    if data is not None:
        return load_or_build_data(cfg, data)
    path = out / "data"
    if not (path / "manifest.json").is_file():
        load_or_build_data(cfg, None).save(path)
    return load_or_build_data(cfg, FederatedDataset.load(path))


def run_trials(req, overrides, dims, study, fed, metric, tracking) -> None:
    done, _ = counted(study)
    with trial_progress(req.trials, done, enabled=req.progress) as bar:
        while done < req.trials:
            trial = study.ask()
            values = suggest(trial, dims)
            if (state := sampler_state(study.sampler)) is not None:
                trial.set_user_attr(SAMPLER_STATE, state)
            cfg = load_config(req.config, [*overrides, *as_overrides(values)])
            cfg = tracking.child_config(cfg, trial.number)
            run_dir = req.out / "trials" / f"{trial.number:04d}"
            prune = TrialPruning(trial, f"val/{metric}")
            trial.set_user_attr("run_dir", str(run_dir))
            try:
                result = run_experiment(cfg, run_dir, data=fed, callbacks=[prune, *tracking.callbacks(cfg)])
            except DivergedError as err:
                trial.set_user_attr("diverged", str(err).split(";")[0])
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                value = result.summary.get(OBJECTIVES[req.objective].format(m=metric))
                if prune.pruned or value is None:
                    study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                else:
                    study.tell(trial, float(value))
            done, pruned = counted(study)
            bar(done, pruned, _best_value(study))


def _best_value(study) -> float | None:
    try:
        return float(study.best_value)
    except ValueError:  # no completed trial yet
        return None


def finish(req, overrides, dims, study, metric, out: Path) -> dict[str, Any]:
    """tune.json, best.yaml and the figures from the study."""
    n, pruned = counted(study)
    if _best_value(study) is None:
        raise UserError(f"none of the {n} trials in '{out}' finished: every one was pruned or diverged; narrow "
                        "the ranges (--param) or run more trials with --no-prune")
    best = study.best_trial
    best_cfg = load_config(req.config, [*overrides, *as_overrides(best.params)])
    atomic_write_bytes(out / "best.yaml", best_cfg.to_yaml().encode())
    result = {
        "best_params": best.params, "best_value": best.value,
        "objective": OBJECTIVES[req.objective].format(m=metric), "n_trials": n, "n_pruned": pruned,
        "n_diverged": sum(1 for t in study.get_trials(deepcopy=False) if "diverged" in t.user_attrs),
        "best_trial": best.number, "best_run_dir": best.user_attrs.get("run_dir"),
        "start_at_default": req.start_at_default, "best_is_default": best.user_attrs.get("start") == "default",
        "space": {d.path: d.describe() for d in dims}, "seed": best_cfg.seed, "method": best_cfg.method.name,
        "figures": write_figures(study, out),
    }
    atomic_write_bytes(out / "tune.json", json.dumps(result, indent=2).encode())
    return result


def write_figures(study, out: Path) -> list[str]:
    """Optuna's optimization history and param importances as PNGs (importances need 2 finished trials)."""
    import matplotlib  # lazy: only a tune's end draws; the backend is chosen before pyplot loads

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: after matplotlib.use('Agg')
    import optuna.visualization.matplotlib as ovm  # lazy: it loads matplotlib, after Agg is chosen

    written = []
    for name, plot in (("optimization_history", ovm.plot_optimization_history),
                       ("param_importances", ovm.plot_param_importances)):
        try:
            with warnings.catch_warnings():  # Optuna marks its matplotlib plots experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                ax = plot(study)
        except (ValueError, RuntimeError):  # too few finished trials for importances
            continue
        fig = ax.figure if hasattr(ax, "figure") else ax[0].figure
        fig.set_size_inches(7, 4)
        fig.tight_layout()
        with atomic_write(out / f"{name}.png", "wb") as f:
            fig.savefig(f, format="png", dpi=100)
        plt.close(fig)
        written.append(f"{name}.png")
    return written


"""`fedcore tune`: trials on validation, resumable to the requested count, best.yaml runnable, MLflow nesting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedcore import cli
from fedcore.registries import load_config
from fedcore.tuning.space import Dim, as_overrides, search_space
from fedcore.tuning.study import TrialPruning

CONFIG = "configs/quickstart.yaml"
FAST = ["method.name=fedavg", "train.rounds=3", "train.device=cpu", "train.threads=1", "tracking.backend=none",
        "train.memorization=false"]


def _sets(extra=()):
    return [a for s in [*FAST, *extra] for a in ("--set", s)]


def _trials(out: Path) -> list:
    import optuna

    return optuna.load_study(study_name="fedcore", storage=f"sqlite:///{out / 'study.db'}").get_trials()


def test_search_space_reads_the_declared_ranges():
    cfg = load_config(CONFIG, ["method.name=fedprox"])
    dims = {d.path: d for d in search_space(cfg)}
    assert dims["train.lr"] == Dim("train.lr", 0.005, 0.2, log=True)
    assert dims["method.params.mu"] == Dim("method.params.mu", 1e-3, 1.0, log=True)
    assert [d.path for d in search_space(cfg, ["lr", "mu"])] == ["train.lr", "method.params.mu"]
    with pytest.raises(Exception, match="not tunable"):
        search_space(cfg, ["train.batch_size"])
    back = load_config(CONFIG, as_overrides({"train.lr": 0.0123456789012345, "train.weight_decay": 1e-5}))
    assert back.train.lr == 0.0123456789012345 and back.train.weight_decay == 1e-5


def test_the_train_ranges_follow_the_optimizer(capsys):
    # An SGD learning rate range would send Adam far past its usual 1e-3, and Adam has no momentum.
    adam = {d.path: d for d in search_space(load_config(CONFIG, ["method.name=fedavg", "train.optimizer=adam"]))}
    assert adam["train.lr"] == Dim("train.lr", 1e-4, 1e-2, log=True)
    assert "train.momentum" not in adam
    assert adam["train.weight_decay"] == Dim("train.weight_decay", 1e-5, 1e-2, log=True)
    sgd = {d.path: d for d in search_space(load_config(CONFIG, ["method.name=fedavg", "train.optimizer=sgd"]))}
    assert sgd["train.momentum"] == Dim("train.momentum", 0.0, 0.95)
    with pytest.raises(Exception, match="not tunable"):
        search_space(load_config(CONFIG, ["train.optimizer=adam"]), ["momentum"])
    from rich.console import Console

    from fedcore.cli.config import space_table

    Console(width=200).print(space_table("fedavg"))
    shown = capsys.readouterr().out
    assert "optimizer: adam" in shown and "not searched" in shown and "[0.0001, 0.01]" in shown


def test_pruning_callback_stops_the_run_the_trial_prunes():
    class Trial:
        def __init__(self):
            self.reports = []

        def report(self, value, step):
            self.reports.append((step, value))

        def should_prune(self):
            return len(self.reports) >= 2

    trial = Trial()
    cb = TrialPruning(trial, "val/acc")
    cb.after_round(1, "train", {"test/acc": 0.9})  # never the test split
    cb.after_round(2, "train", {"val/acc": 0.3})
    assert trial.reports == [(2, 0.3)] and not cb.should_stop()
    cb.after_round(3, "train", {"val/acc": 0.2})
    assert cb.should_stop()


def test_tune_writes_its_outputs_and_a_rerun_adds_only_the_missing_trials(tmp_path, capsys):
    out = tmp_path / "tune"
    cli.main(["tune", CONFIG, *_sets(), "--trials", "4", "--out", str(out), "--no-progress"])
    result = json.loads((out / "tune.json").read_text())
    assert result["n_trials"] == 4 and result["objective"] == "final/val_acc_last10"
    assert set(result["best_params"]) == {"train.lr", "train.momentum", "train.weight_decay"}
    assert 0 <= result["n_pruned"] <= 2 and len(_trials(out)) == 4  # the first 2 trials are never pruned
    best = load_config(out / "best.yaml")
    assert best.train.lr == result["best_params"]["train.lr"] and best.data.validation.fraction == 0.1
    run = tmp_path / "best-run"
    cli.main(["run", str(out / "best.yaml"), "--out", str(run), "--no-progress"])
    summary = json.loads((run / "metrics.json").read_text())["summary"]
    assert "final/acc_at_val_best" in summary
    cli.main(["tune", CONFIG, *_sets(), "--trials", "6", "--out", str(out), "--no-progress"])
    assert len(_trials(out)) == 6 and json.loads((out / "tune.json").read_text())["n_trials"] == 6
    _assert_new_points(out)  # the second process did not draw the first one's points again
    one_go = tmp_path / "one-go"  # and it drew the points a tune of 6 run in one go draws
    cli.main(["tune", CONFIG, *_sets(), "--trials", "6", "--out", str(one_go), "--no-progress"])
    assert _points(out) == _points(one_go)
    assert sorted(p.name for p in (out / "trials").iterdir()) == [f"{i:04d}" for i in range(6)]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:  # another config in the same tune dir
        cli.main(["tune", CONFIG, *_sets(["train.rounds=4"]), "--trials", "7", "--out", str(out)])
    assert exit_info.value.code == 2 and "holds a tune of another config" in capsys.readouterr().err


def test_a_tune_killed_mid_trial_resumes_to_the_requested_count(tmp_path):
    out = tmp_path / "tune"
    sets = _sets(["train.rounds=40"])  # trials of a few seconds, so the kill lands inside one
    argv = [sys.executable, "-m", "fedcore", "tune", CONFIG, *sets, "--trials", "3", "--out", str(out),
            "--no-progress", "--no-prune"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not (out / "trials" / "0001").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert proc.poll() is None, "the tune ended before its second trial started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "tune.json").exists()
    import optuna

    states = [t.state for t in _trials(out)]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING]
    subprocess.run([*argv], env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    states = [t.state for t in _trials(out)]
    assert states.count(optuna.trial.TrialState.COMPLETE) == 3 and states[1] == optuna.trial.TrialState.FAIL
    assert json.loads((out / "tune.json").read_text())["n_trials"] == 3
    _assert_new_points(out)
    one_go = tmp_path / "one-go"  # the killed trial was drawn again: the same points as a tune never killed
    subprocess.run([*argv[:argv.index("--out") + 1], str(one_go), "--no-progress", "--no-prune"], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert _points(out) == _points(one_go)


def _points(out) -> list[dict]:
    """The counted trials' points, in order."""
    import optuna

    return [t.params for t in _trials(out)
            if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]


def _assert_new_points(out):
    """Every finished trial of the tune at its own point: a resumed tune spends no trial on a point
    already scored (its sampler restarted from the seed and drew the first trials' points again)."""
    import optuna

    done = [t.params for t in _trials(out)
            if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    assert len({tuple(sorted(p.items())) for p in done}) == len(done), done


def test_a_restored_sampler_draws_what_the_uninterrupted_one_draws_next():
    import optuna

    from fedcore.tuning.sampler import new_sampler, restore_sampler_state, sampler_state

    def objective(t):
        return t.suggest_float("x", 0, 1) + t.suggest_float("y", 1e-3, 1, log=True)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=new_sampler(5))
    study.optimize(objective, n_trials=3)  # inside the random startup trials
    state = sampler_state(study.sampler)
    study.optimize(objective, n_trials=5)  # across into TPE's own draws
    resumed = optuna.create_study(sampler=new_sampler(5))
    for t in study.trials[:3]:
        resumed.add_trial(t)
    assert restore_sampler_state(resumed.sampler, json.loads(json.dumps(state)))  # it survives Optuna's JSON
    resumed.optimize(objective, n_trials=5)
    assert [t.params for t in resumed.trials[3:]] == [t.params for t in study.trials[3:]]
    fresh = optuna.create_study(sampler=new_sampler(5))
    for t in study.trials[:3]:
        fresh.add_trial(t)
    fresh.optimize(objective, n_trials=1)  # without the state: the seed's first point again
    assert fresh.trials[3].params == study.trials[0].params


def test_a_study_without_sampler_states_resumes_seeded_past_its_trials():
    import optuna

    from fedcore.tuning.sampler import new_sampler, resume_sampler, resumed_seed

    study = optuna.create_study(sampler=new_sampler(100))
    study.add_trial(optuna.trial.create_trial(params={"x": 0.5}, distributions={
        "x": optuna.distributions.FloatDistribution(0, 1)}, value=1.0))  # a trial from before states were kept
    resume_sampler(study, 100)
    expected = new_sampler(resumed_seed(100, 1))
    assert (study.sampler._rng.rng.get_state()[1] == expected._rng.rng.get_state()[1]).all()

    assert resumed_seed(100, 0) == 100  # a fresh study: the tune's seed, so a tune run in one go is unchanged
    for seed in (0, 1, 100):
        resumed = {resumed_seed(seed, n) for n in range(1, 50)}
        assert len(resumed) == 49 and seed not in resumed  # a new generator each time a tune resumes


def test_trials_are_mlflow_children_of_one_parent(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    out = tmp_path / "tune"
    cli.main(["tune", CONFIG, *_sets(["tracking.backend=mlflow", f"tracking.uri={uri}", "tracking.experiment=t"]),
              "--trials", "3", "--out", str(out), "--no-progress", "--param", "lr"])
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("t")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("fedcore.role") == "parent"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    parent = parents[0]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert len(children) == 3 == len(runs) - 1
    assert float(parent.data.params["best.train.lr"]) == json.loads((out / "tune.json").read_text())[
        "best_params"]["train.lr"]
    arts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"tune.json", "best.yaml", "optimization_history.png"} <= arts


@pytest.mark.parametrize(("argv", "message"), [
    (["--objective", "median"], "--objective 'median'"),
    (["--param", "train.batch_size"], "is not tunable"),
    (["--trials", "0"], "--trials must be at least 1"),
])
def test_bad_tune_input_is_one_line_and_exit_2(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["tune", CONFIG, *_sets(), "--out", str(tmp_path / "t"), *argv])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and message in err and "\n" not in err
    assert not (tmp_path / "t").exists()  # nothing left behind


def test_the_pruner_waits_a_fifth_of_the_run_after_stages_whose_scores_predict_nothing():
    from fedcore.tuning.study import prune_warmup

    fedavg = load_config("configs/fmnist/fedgr_sym.yaml", ["method.name=fedavg", "method.params={}"])
    assert prune_warmup(fedavg) == 8  # 40 rounds, one stage
    # FedCorr pre-processes 20 rounds of one client each: its global model is that client's model.
    fedcorr = load_config("configs/fmnist/fedgr_sym.yaml", ["method.name=fedcorr", "method.params={}"])
    assert prune_warmup(fedcorr) == 20 + 8
    with_cohorts = load_config("configs/fmnist/fedgr_sym.yaml",
                               ["method.name=fedcorr", "method.params={}", "method.params.preprocess_clients=5"])
    assert prune_warmup(with_cohorts) == 8
    # FedRG's SSL pretraining is not evaluated at all (10 rounds of 50).
    fedrg = load_config("configs/fmnist/fedrg_sym_localized.yaml", ["train.rounds=40"])
    assert prune_warmup(fedrg) == 10 + 10
    # A warm-up stage that trains the task model as FedAvg does is comparable: no extra wait.
    fedgr = load_config("configs/fmnist/fedgr_sym.yaml", [])
    assert prune_warmup(fedgr) == 8

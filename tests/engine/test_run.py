"""Whole runs: resume bit-identity, FedProx(mu=0) == FedAvg, outputs, and the CLI."""

import json
from pathlib import Path

import pytest
import torch

from fedcore.data.build import build
from fedcore.engine.callbacks import Callback
from fedcore.errors import ArtifactError, ConfigError
from fedcore.registries import load_config
from fedcore.run import run_experiment

FAST = ["train.device=cpu", "train.rounds=4", "train.local_epochs=1", "partition.num_clients=6",
        "train.client_fraction=0.5", "train.augment=weak", "train.checkpoint_every=2"]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    cfg = load_config("configs/quickstart.yaml", FAST)
    return build(cfg).save(tmp_path_factory.mktemp("data") / "art")


class Crash(Callback):
    def __init__(self, at: int) -> None:
        self.at = at

    def after_round(self, rnd, stage, metrics):
        if rnd == self.at:
            raise KeyboardInterrupt("preempted")


def model_equal(a, b):
    sa, sb = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("method", ["fedavg", "coteaching", "dividemix"])
def test_interrupted_then_resumed_run_is_bit_identical(tmp_path, artifact, method):
    extra = ["method.params.warmup_rounds=2"] if method == "dividemix" else []  # crash inside its train stage
    cfg = load_config("configs/quickstart.yaml", [*FAST, f"method.name={method}", *extra])
    full = run_experiment(cfg, tmp_path / "full", data=artifact)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path / "cut", data=artifact, callbacks=[Crash(at=3)])
    assert not (tmp_path / "cut" / "metrics.json").exists()
    resumed = run_experiment(cfg, tmp_path / "cut", data=artifact, resume=tmp_path / "cut")
    assert resumed.history == full.history
    assert json.loads((tmp_path / "cut" / "metrics.json").read_text()) == \
        json.loads((tmp_path / "full" / "metrics.json").read_text())
    assert model_equal(tmp_path / "cut", tmp_path / "full")


@pytest.mark.parametrize("method", ["fedavg", "dividemix"])
def test_resuming_a_finished_run_with_more_rounds_trains_them(tmp_path, artifact, method):
    """train.rounds may grow on resume: the closed last stage is re-entered, as if never cut."""
    extra = ["method.params.warmup_rounds=1"] if method == "dividemix" else []  # two stages
    cfg = load_config("configs/quickstart.yaml", [*FAST, f"method.name={method}", *extra])
    full = run_experiment(cfg, tmp_path / "full", data=artifact)
    short = load_config("configs/quickstart.yaml", [*FAST, f"method.name={method}", *extra, "train.rounds=2"])
    run_experiment(short, tmp_path / "grown", data=artifact)
    grown = run_experiment(cfg, tmp_path / "grown", data=artifact, resume=tmp_path / "grown")
    assert [r["round"] for r in grown.history] == [1.0, 2.0, 3.0, 4.0]
    assert grown.history == full.history and model_equal(tmp_path / "grown", tmp_path / "full")
    # Resuming again with the same budget has nothing left to train and changes nothing.
    again = run_experiment(cfg, tmp_path / "grown", data=artifact, resume=tmp_path / "grown")
    assert again.history == full.history


def test_resume_refuses_other_config_and_corrupt_checkpoint(tmp_path, artifact):
    cfg = load_config("configs/quickstart.yaml", FAST)
    run_experiment(cfg, tmp_path / "r", data=artifact)
    other = load_config("configs/quickstart.yaml", [*FAST, "train.lr=0.2"])
    with pytest.raises(ArtifactError, match=r"written by another config \(train.lr: 0.05 \(run\) vs 0.2\)"):
        run_experiment(other, tmp_path / "r2", data=artifact, resume=tmp_path / "r")
    for ck in (tmp_path / "r" / "checkpoints").glob("*.pt"):  # one intact checkpoint would be taken instead
        ck.write_bytes(ck.read_bytes()[:-10])
    with pytest.raises(ArtifactError, match="corrupt") as err:
        run_experiment(cfg, tmp_path / "r3", data=artifact, resume=tmp_path / "r")
    # Issue 71: with every checkpoint damaged there is no earlier one to resume from.
    assert "no round to resume from" in str(err.value) and "earlier one" not in str(err.value)


def test_fedprox_with_mu_zero_equals_fedavg(tmp_path, artifact):
    a = run_experiment(load_config("configs/quickstart.yaml", FAST), tmp_path / "avg", data=artifact)
    b = run_experiment(load_config("configs/quickstart.yaml", [*FAST, "method.name=fedprox", "method.params.mu=0"]),
                       tmp_path / "prox", data=artifact)
    assert a.history == b.history and model_equal(tmp_path / "avg", tmp_path / "prox")
    c = run_experiment(load_config("configs/quickstart.yaml", [*FAST, "method.name=fedprox", "method.params.mu=1"]),
                       tmp_path / "prox1", data=artifact)
    assert not model_equal(tmp_path / "avg", tmp_path / "prox1")
    del c


def test_outputs_and_mismatched_artifact(tmp_path, artifact):
    cfg = load_config("configs/quickstart.yaml", FAST)
    res = run_experiment(cfg, tmp_path / "o", data=artifact)
    for name in ("model.pt", "history.csv", "metrics.json", "config.yaml", "confusion.json", "scene.json",
                 "checkpoints/stage-train.pt", "checkpoints/latest.pt"):
        assert (tmp_path / "o" / name).is_file(), name
    assert len(res.history) == 4 and {"final/acc", "final/acc_best", "final/acc_last10"} <= set(res.summary)
    rows = (tmp_path / "o" / "history.csv").read_text().splitlines()
    assert rows[0].startswith("stage,round") and len(rows) == 5
    wrong = load_config("configs/quickstart.yaml", [*FAST, "seed=1"])
    # Issue 71: the refusal names the keys that differ, not two hashes.
    with pytest.raises(ConfigError, match=r"another federation than this config's \(data.seed: 0 \(artifact\) vs 1\)"):
        run_experiment(wrong, tmp_path / "w", data=artifact)


def test_cli_run_and_compare(tmp_path, artifact, capsys):
    from fedcore.cli import main

    main(["run", "configs/quickstart.yaml", "--out", str(tmp_path / "a"), "--data", str(artifact), "--no-progress",
          *[x for o in FAST for x in ("--set", o)]])
    main(["compare", str(tmp_path / "a"), str(tmp_path / "a")])
    out = capsys.readouterr().out
    assert "fedavg" in out and "acc last10" in out
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(tmp_path / "missing")])
    assert exc.value.code == 2


def _files(root):
    return {p.relative_to(root): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _fails(argv, capsys) -> str:
    from fedcore.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err
    return err


def test_cli_run_refuses_to_overwrite_an_existing_run(tmp_path, artifact, capsys):
    from fedcore.cli import main

    args = ["--data", str(artifact), "--no-progress", *[x for o in FAST for x in ("--set", o)]]
    done = tmp_path / "done"
    main(["run", "configs/quickstart.yaml", "--out", str(done), *args])
    before = _files(done)
    capsys.readouterr()
    # Another method onto a finished run used to replace its model, metrics and checkpoints.
    err = _fails(["run", "configs/quickstart.yaml", "--out", str(done), *args, "--set", "method.name=fedprox"], capsys)
    assert f"'{done}' already holds a finished run; continue it with --resume {done}" in err
    # ... and so did resuming another run into it.
    main(["run", "configs/quickstart.yaml", "--out", str(tmp_path / "other"), *args])
    capsys.readouterr()
    _fails(["run", "configs/quickstart.yaml", "--resume", str(tmp_path / "other"), "--out", str(done), *args], capsys)
    assert _files(done) == before
    main(["run", "configs/quickstart.yaml", "--resume", str(done), *args])  # the way to continue it
    assert json.loads((done / "metrics.json").read_bytes()) == json.loads(before[Path("metrics.json")])


def test_cli_run_refuses_to_restart_an_interrupted_run_over_its_checkpoints(tmp_path, artifact, capsys):
    from fedcore.cli import main

    cfg = load_config("configs/quickstart.yaml", FAST)
    cut = tmp_path / "cut"
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, cut, data=artifact, callbacks=[Crash(at=3)])
    before = _files(cut)
    capsys.readouterr()  # the cut run's own stderr line (which executor it used)
    args = ["--data", str(artifact), "--no-progress", *[x for o in FAST for x in ("--set", o)]]
    err = _fails(["run", "configs/quickstart.yaml", "--out", str(cut), *args], capsys)
    assert f"'{cut}' holds an interrupted run; continue it with --resume {cut}" in err
    assert _files(cut) == before
    main(["run", "configs/quickstart.yaml", "--resume", str(cut), *args])
    assert (cut / "metrics.json").is_file()


def test_cli_run_out_onto_a_file_is_a_user_error(tmp_path, artifact, capsys):
    mine = tmp_path / "notes.txt"
    mine.write_text("keep me")
    err = _fails(["run", "configs/quickstart.yaml", "--out", str(mine), "--data", str(artifact), "--no-progress",
                  *[x for o in FAST for x in ("--set", o)]], capsys)
    assert "is a file; pass a folder" in err and mine.read_text() == "keep me"


def test_bad_input_leaves_no_empty_run_dir(tmp_path, artifact):
    cfg = load_config("configs/quickstart.yaml", FAST)
    with pytest.raises(ArtifactError, match="no checkpoint"):
        run_experiment(cfg, tmp_path / "r", data=artifact, resume=tmp_path / "missing")
    with pytest.raises(ConfigError, match="unknown"):
        run_experiment(cfg, tmp_path / "r", data=artifact, stages=["bogus"])
    assert not (tmp_path / "r").exists()


class FailsAtStart(Callback):
    def __init__(self) -> None:
        self.failure = None

    def on_run_start(self, info):
        raise RuntimeError("tracking store went away")

    def on_failure(self, error):
        self.failure = error


def test_a_failing_on_run_start_still_reaches_on_failure(tmp_path, artifact):
    # A tracking run opened in on_run_start must be ended FAILED, not left RUNNING.
    cb = FailsAtStart()
    with pytest.raises(RuntimeError, match="went away"):
        run_experiment(load_config("configs/quickstart.yaml", FAST), tmp_path / "r", data=artifact, callbacks=[cb])
    assert isinstance(cb.failure, RuntimeError)


@pytest.mark.parametrize("executor", ["sequential", "batched"])
def test_a_diverged_run_stops_with_one_line_and_no_summary(tmp_path, artifact, executor, capsys):
    # lr 10 sends the MLP's parameters to inf within two rounds; the run must stop there, not
    # average the NaN into the global model and report chance accuracy for the rounds left.
    from fedcore.cli import main

    out = tmp_path / "r"
    with pytest.raises(SystemExit) as exc:
        main(["run", "configs/quickstart.yaml", "--out", str(out), "--data", str(artifact), "--no-progress",
              *[x for o in [*FAST, "train.lr=10", f"train.executor={executor}"] for x in ("--set", o)]])
    assert exc.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()  # the run's banner, then the error
    assert lines[0].startswith("fedcore run: fedavg") and len(lines) == 2
    err = lines[1]
    assert err.startswith("error: training diverged in round")
    assert "returned NaN/inf parameters" in err and "train.lr" in err
    assert not (out / "metrics.json").exists() and not (out / "model.pt").exists()


def test_check_finite_names_the_clients_and_ignores_integer_tensors():
    from fedcore.engine.loop import check_finite, nonfinite
    from fedcore.engine.types import ClientUpdate
    from fedcore.errors import DivergedError

    ok = {"w": torch.ones(3), "steps": torch.tensor([1, 2])}
    bad = {"w": torch.tensor([1.0, float("nan")]), "b": torch.tensor([float("inf")])}
    assert nonfinite(ok) == [] and nonfinite(bad) == ["w", "b"] and nonfinite(None) == []
    ups = [ClientUpdate(cid=3, num_examples=1, params=ok), ClientUpdate(cid=7, num_examples=1, params=bad),
           ClientUpdate(cid=9, num_examples=1)]
    check_finite(ok, ups, 4)  # a finite global model passes, whatever a client sent
    with pytest.raises(DivergedError, match=r"round 4: client\(s\) 7 returned"):
        check_finite(bad, ups, 4)
    with pytest.raises(DivergedError, match="the aggregate has NaN/inf in w, b"):
        check_finite(bad, ups[:1], 4)


def test_summary_keeps_aggregate_metrics_and_drops_per_client_ones():
    from fedcore.run import summarize

    hist = [{"stage": "train", "round": 1.0, "detect/client_f1": 1.0, "noise/rate_est/client_07": 0.3,
             "test/acc": 0.5}]
    s = summarize(hist, "single")
    assert s["last/detect/client_f1"] == 1.0 and s["final/acc"] == 0.5
    assert not any("client_07" in k for k in s)


def test_run_outputs_and_data_artifacts_get_the_permissions_of_plain_files(tmp_path, artifact):
    """Outputs land via temp files (created 0600); they must end as readable as a plain open()
    makes them, or a pod or user sharing the volume (MLflow, the next pipeline task) cannot read them."""
    plain_file, plain_dir = tmp_path / "plain", tmp_path / "plain-dir"
    plain_file.write_bytes(b"x")
    plain_dir.mkdir()
    cfg = load_config("configs/quickstart.yaml", [*FAST, "train.rounds=2"])
    run_experiment(cfg, tmp_path / "run", data=artifact)
    written = [*(tmp_path / "run").glob("*.*"), *(tmp_path / "run" / "checkpoints").iterdir()]
    assert {"metrics.json", "model.pt", "latest.pt"} <= {p.name for p in written}
    assert {p.stat().st_mode for p in written} == {plain_file.stat().st_mode}
    saved = build(cfg).save(tmp_path / "art")
    assert saved.stat().st_mode == plain_dir.stat().st_mode
    assert {p.stat().st_mode for p in saved.iterdir()} == {plain_file.stat().st_mode}


class PoolProbe(Callback):
    """Records the CPU thread pools a run trains under."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def after_round(self, rnd, stage, metrics):
        from threadpoolctl import threadpool_info

        pools = {i["internal_api"]: i["num_threads"] for i in threadpool_info()}
        self.seen = pools | {"torch": torch.get_num_threads()}


def test_train_threads_limits_the_blas_pools_too_and_gives_them_back(tmp_path, artifact):
    """train.threads used to set torch's pool only: numpy's and scikit-learn's BLAS kept theirs, so
    an in-process run (threads=1) and `fedcore run` under OMP_NUM_THREADS=1 relabeled differently."""
    from threadpoolctl import threadpool_info, threadpool_limits

    probe = PoolProbe()
    with threadpool_limits(limits=2):
        torch.set_num_threads(2)
        before = {i["filepath"]: i["num_threads"] for i in threadpool_info()}
        run_experiment(load_config("configs/quickstart.yaml", [*FAST, "train.rounds=1", "train.threads=1"]),
                       tmp_path / "run", data=artifact, callbacks=[probe])
        assert {i["filepath"]: i["num_threads"] for i in threadpool_info()} == before
        assert torch.get_num_threads() == 2
    assert "openblas" in probe.seen or "mkl" in probe.seen  # numpy's BLAS is among the pools limited
    assert set(probe.seen.values()) == {1}, probe.seen

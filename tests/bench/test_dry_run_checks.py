"""`fedcore bench --dry-run` refuses what the real bench refuses before anything starts: a noise scene
the dataset cannot give (asymmetric noise on Fashion-MNIST, which has no class map) failed only once
the real bench prepared its data. The message names what the user set (`mixed`), not what it drew."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fedcore import cli
from fedcore.data import mnist
from tests.data.test_mnist_loader import write_flat_gz

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fmnist_grid(tmp_path: Path, monkeypatch) -> Path:
    """A one-scene grid on a tiny Fashion-MNIST (the system copy pointed at a per-test folder)."""
    write_flat_gz(tmp_path / "system", n=(120, 30))
    monkeypatch.setitem(mnist.SYSTEM_COPIES, "fashion_mnist", mnist.SystemCopy(tmp_path / "system", "pkg"))
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / "cache"))
    grid = {"scenes": {"fm": {"config": str(ROOT / "configs/fmnist/fedgr_sym.yaml"),
                              "set": ["data.max_train=null", "partition.num_clients=4", "partition.min_size=2",
                                      "train.rounds=1", "tracking.backend=none"]}},
            "methods": ["fedavg"], "trials": 1, "seeds": [0]}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(grid))
    return tmp_path / "grid.yaml"


@pytest.mark.parametrize(("noise", "says"), [
    (["noise.type=asymmetric"], "noise.type 'asymmetric' needs a dataset class map"),
    (["noise.type=mixed"], "noise.type 'mixed' draws from noise.mixed_types"),
])
def test_a_dry_run_refuses_a_noise_scene_the_dataset_cannot_give(fmnist_grid, tmp_path, capsys, noise, says):
    out = tmp_path / "out"
    for extra in (["--dry-run"], []):  # the dry run says what the run says, and neither starts anything
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["bench", str(fmnist_grid), "--out", str(out), "--no-progress",
                      *(a for s in noise for a in ("--set", s)), *extra])
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and "\n" not in err and says in err, (extra, err)
        assert not list(out.glob("*/data-s*/manifest.json")) and not (out / "bench.json").exists()


def test_a_dry_run_of_a_good_grid_on_the_same_data_passes(fmnist_grid, tmp_path, capsys):
    cli.main(["bench", str(fmnist_grid), "--out", str(tmp_path / "out"), "--dry-run"])
    assert "fm │ fedavg │ 0/1 │ 0/1 │ 0/1" in " ".join(capsys.readouterr().out.split())
    assert not (tmp_path / "out" / "fm").exists()  # it checked the data and kept none of it


def test_the_artifact_the_check_built_is_saved_not_built_again(fmnist_grid, tmp_path, monkeypatch):
    from fedcore.bench import runner
    from fedcore.bench.grid import load_grid
    from fedcore.bench.plan import data_jobs

    builds = []
    real = runner.build_federated_dataset
    monkeypatch.setattr(runner, "build_federated_dataset", lambda cfg: builds.append(cfg.seed) or real(cfg))
    jobs = data_jobs(load_grid(fmnist_grid), tmp_path / "out", [])
    built = runner.check_data(jobs)
    assert list(built) == [jobs[0][0]] and len(builds) == 1  # one artifact per scene, before anything is written
    assert not any(path.exists() for path, _, _ in jobs)
    runner.prepare_data(jobs, say=lambda _: None, built=built)
    assert len(builds) == len(jobs) == 2 and all((path / "manifest.json").is_file() for path, _, _ in jobs)

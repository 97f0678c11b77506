"""Where the MNIST-family loader finds its files and where it unpacks them.

Fixtures are the four official IDX files (tiny, random), written by tests/data/test_loaders.py's
writers: torchvision's IDX parser reads them, nothing is mocked. The system copy
(/usr/share/datasets/fashion-mnist) is pointed at a per-test folder.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from fedcore.config import DataConfig
from fedcore.data import mnist
from fedcore.data.datasets import data_cache_dir, load_dataset
from fedcore.errors import DataError
from tests.data.test_loaders import write_mnist


@pytest.fixture
def system(tmp_path: Path, monkeypatch) -> Path:
    folder = tmp_path / "system"
    monkeypatch.setitem(mnist.SYSTEM_COPIES, "fashion_mnist", mnist.SystemCopy(folder, "dataset-fashion-mnist"))
    monkeypatch.delenv("FEDCORE_CACHE", raising=False)
    return folder


def write_flat_gz(folder: Path, n=(12, 5)) -> dict:
    """The Debian package's layout: the four *-ubyte.gz files directly in one folder."""
    files = write_mnist(folder / "tmp", folder="x", gz=True, n=n)
    for f in (folder / "tmp/x/raw").iterdir():
        f.rename(folder / f.name)
    for d in (folder / "tmp/x/raw", folder / "tmp/x", folder / "tmp"):
        d.rmdir()
    return files


def snapshot(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


def fmnist(cache: Path, root: Path | None = None) -> object:
    return load_dataset(DataConfig(name="fashion_mnist", root=None if root is None else str(root),
                                   cache_dir=str(cache)))


def test_system_copy_is_used_without_data_root(tmp_path: Path, system: Path):
    files = write_flat_gz(system)
    ds = fmnist(tmp_path / "cache")
    np.testing.assert_array_equal(ds.x_train[:, 0], files["train"][0])
    np.testing.assert_array_equal(ds.y_test, files["t10k"][1].astype(np.int64))
    unpacked = sorted(p.name for p in (tmp_path / "cache" / "unpacked").rglob("*-ubyte"))
    assert unpacked == sorted(mnist.MNIST_FILES)


def test_data_root_comes_first_and_an_empty_root_is_refused(tmp_path: Path, system: Path):
    """A data.root the user set is where the data must be: an empty one fell back to the system copy
    with no word, and the run recorded the empty folder as its root. The system copy is for an unset root."""
    write_flat_gz(system)
    own = write_mnist(tmp_path / "own", folder="FashionMNIST")
    ds = fmnist(tmp_path / "cache", tmp_path / "own")
    np.testing.assert_array_equal(ds.x_train[:, 0], own["train"][0])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError) as err:
        fmnist(tmp_path / "cache", tmp_path / "empty")
    msg = str(err.value)
    assert "\n" not in msg and f"data.root '{tmp_path / 'empty'}'" in msg
    assert "train-images-idx3-ubyte.gz" in msg and "FashionMNIST/raw/" in msg and "unset data.root" in msg


def test_a_partial_copy_under_data_root_is_an_error(tmp_path: Path, system: Path):
    write_flat_gz(system)
    write_mnist(tmp_path / "own", folder="FashionMNIST")
    (tmp_path / "own/FashionMNIST/raw/t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte \(or .gz\) not found in '.*FashionMNIST/raw'"):
        fmnist(tmp_path / "cache", tmp_path / "own")


def test_flat_gz_under_data_root(tmp_path: Path, system: Path):
    files = write_flat_gz(tmp_path / "flat")
    ds = load_dataset(DataConfig(name="mnist", root=str(tmp_path / "flat"), cache_dir=str(tmp_path / "cache")))
    np.testing.assert_array_equal(ds.x_test[:, 0], files["t10k"][0])


def test_gz_only_read_only_folder_is_left_untouched(tmp_path: Path, system: Path):
    files = write_mnist(tmp_path / "ro", folder="FashionMNIST", gz=True)
    folder = tmp_path / "ro/FashionMNIST/raw"
    before = snapshot(tmp_path / "ro")
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)  # as root this does not stop writes: the snapshot does
    try:
        ds = fmnist(tmp_path / "cache", tmp_path / "ro")
    finally:
        folder.chmod(0o755)
    np.testing.assert_array_equal(ds.x_train[:, 0], files["train"][0])
    assert snapshot(tmp_path / "ro") == before


def test_raw_files_are_read_in_place(tmp_path: Path, system: Path):
    write_mnist(tmp_path / "raw", folder="FashionMNIST")
    fmnist(tmp_path / "cache", tmp_path / "raw")
    assert not (tmp_path / "cache").exists()


def test_the_cached_copy_is_reused_until_its_archive_changes(tmp_path: Path, system: Path):
    write_flat_gz(system)
    fmnist(tmp_path / "cache")
    cached = next((tmp_path / "cache/unpacked").rglob("train-images-idx3-ubyte"))
    first = cached.stat().st_mtime_ns
    fmnist(tmp_path / "cache")
    assert cached.stat().st_mtime_ns == first
    newer = write_flat_gz(system)
    later = cached.stat().st_mtime_ns + 10**9
    os.utime(system / "train-images-idx3-ubyte.gz", ns=(later, later))
    ds = fmnist(tmp_path / "cache")
    np.testing.assert_array_equal(ds.x_train[:, 0], newer["train"][0])


def test_unwritable_cache_is_one_line_naming_the_setting(tmp_path: Path, system: Path):
    write_flat_gz(system)
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(DataError, match=r"cannot unpack .* set data.cache_dir \(or FEDCORE_CACHE\) to a writable"):
        fmnist(tmp_path / "file" / "cache")


def test_missing_system_copy_names_the_package_and_files(tmp_path: Path, system: Path):
    with pytest.raises(DataError) as err:
        fmnist(tmp_path / "cache")
    msg = str(err.value)
    assert "\n" not in msg and "apt-get install -y dataset-fashion-mnist" in msg and str(system) in msg
    assert all(f"{f}.gz" in msg for f in mnist.MNIST_FILES)


def test_cache_dir_default_gives_way_to_fedcore_cache(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / "pvc"))
    assert data_cache_dir(DataConfig()) == tmp_path / "pvc"
    assert data_cache_dir(DataConfig(cache_dir=str(tmp_path / "mine"))) == tmp_path / "mine"
    monkeypatch.delenv("FEDCORE_CACHE")
    assert data_cache_dir(DataConfig()) == Path(".fedcore-cache")


def test_fedcore_run_on_an_empty_data_root_is_one_line_and_exit_2(tmp_path: Path, system: Path, capsys):
    from fedcore import cli

    write_flat_gz(system)  # a system copy the run must not fall back to
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["run", "configs/fmnist/fedgr_sym.yaml", "--out", str(tmp_path / "run"), "--no-progress",
                  "--set", f"data.root={tmp_path / 'empty'}", "--set", "tracking.backend=none"])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and "\n" not in err and "put the official files there" in err
    assert not (tmp_path / "run" / "metrics.json").exists()

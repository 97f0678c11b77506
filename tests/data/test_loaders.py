"""On-disk loaders, fed tiny files that the tests write in each dataset's official format.

Nothing is mocked: torchvision's own dataset classes read these files.
"""

from __future__ import annotations

import gzip
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.io
from PIL import Image

from fedcore.config import DataConfig
from fedcore.data import clothing, mnist, vision
from fedcore.data.datasets import load_dataset
from fedcore.data.vision import superclass_map
from fedcore.errors import ConfigError, DataError
from fedcore.io import storage

RNG = np.random.default_rng(7)
CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch):
    """Unpacked files go to a per-test cache, and no test sees this machine's system copy."""
    monkeypatch.setenv("FEDCORE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(mnist.SYSTEM_COPIES, "fashion_mnist",
                        mnist.SystemCopy(tmp_path / "system", "dataset-fashion-mnist"))


def _load(name: str, root: Path | str, **kw) -> object:
    return load_dataset(DataConfig(name=name, root=str(root), **kw))


# -- writers for the official formats -----------------------------------------------------


def write_idx(path: Path, arr: np.ndarray, gz: bool = False) -> None:
    """IDX: magic 0x0000 0x08 (ubyte) <ndim>, big-endian int32 dims, then the raw bytes."""
    blob = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape) + arr.tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if gz:
        path.with_name(path.name + ".gz").write_bytes(gzip.compress(blob))
    else:
        path.write_bytes(blob)


def write_mnist(root: Path, folder: str = "MNIST", gz: bool = False, n=(12, 5)) -> dict[str, np.ndarray]:
    out = {}
    for split, count in zip(("train", "t10k"), n, strict=True):
        x = RNG.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        y = (np.arange(count) % 10).astype(np.uint8)
        write_idx(root / folder / "raw" / f"{split}-images-idx3-ubyte", x, gz)
        write_idx(root / folder / "raw" / f"{split}-labels-idx1-ubyte", y, gz)
        out[split] = (x, y)
    return out


def _pickle(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(obj, protocol=2))


def write_cifar10(root: Path, per_batch: int = 3) -> np.ndarray:
    """Five data batches, a test batch and batches.meta; returns all train images (N, 3, 32, 32)."""
    folder, images = root / "cifar-10-batches-py", []
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        x = RNG.integers(0, 256, (per_batch, 3, 32, 32), dtype=np.uint8)
        labels = [int(v) for v in RNG.integers(0, 10, per_batch)]
        _pickle(folder / name, {"batch_label": name, "labels": labels, "data": x.reshape(per_batch, 3072),
                                "filenames": [f"{name}_{i}.png" for i in range(per_batch)]})
        images.append(x) if name != "test_batch" else None
    _pickle(folder / "batches.meta", {"label_names": CIFAR10_NAMES, "num_cases_per_batch": per_batch,
                                      "num_vis": 3072})
    return np.concatenate(images)


def write_cifar100(root: Path) -> None:
    folder = root / "cifar-100-python"
    for name, n in (("train", 4), ("test", 100)):
        fine = np.arange(n) % 100
        _pickle(folder / name, {"filenames": [f"{i}.png" for i in range(n)], "batch_label": name,
                                "fine_labels": fine.tolist(), "coarse_labels": (fine % 20).tolist(),
                                "data": RNG.integers(0, 256, (n, 3072), dtype=np.uint8)})
    _pickle(folder / "meta", {"fine_label_names": [f"fine{i}" for i in range(100)],
                              "coarse_label_names": [f"coarse{i}" for i in range(20)]})


def write_svhn(root: Path) -> dict[str, np.ndarray]:
    out = {}
    for split, n in (("train", 6), ("test", 4)):
        x = RNG.integers(0, 256, (32, 32, 3, n), dtype=np.uint8)
        y = np.array([[10], [1], [2], [3], [9], [10]][:n], dtype=np.uint8)  # SVHN writes digit 0 as 10
        root.mkdir(parents=True, exist_ok=True)
        scipy.io.savemat(str(root / f"{split}_32x32.mat"), {"X": x, "y": y})
        out[split] = x
    return out


def write_clothing(root: Path, ann: str = "") -> None:
    """Eight train and three test images, JPEG and PNG of assorted sizes, plus the kv and key files."""
    colours = {f"images/0/0{i}/{i}.jpg": (20 * i, 100, 200) for i in range(8)}
    colours |= {f"images/9/9{i}/t{i}.png": (250, 10 * i, 0) for i in range(3)}
    for rel, rgb in colours.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (40 + len(rel), 30), rgb).save(root / rel)
    train, test = list(colours)[:8], list(colours)[8:]
    a = root / ann
    a.mkdir(parents=True, exist_ok=True)
    (a / "noisy_label_kv.txt").write_text("".join(f"{k} {i % 14}\n" for i, k in enumerate(train)))
    # Clean labels for train images 0, 2 and 5 (5 disagrees with its noisy label) and all test images.
    clean = {train[0]: 0, train[2]: 2, train[5]: 13, test[0]: 11, test[1]: 12, test[2]: 3}
    (a / "clean_label_kv.txt").write_text("".join(f"{k} {v}\n" for k, v in clean.items()))
    (a / "noisy_train_key_list.txt").write_text("\n".join(train) + "\n")
    (a / "clean_test_key_list.txt").write_text("\n".join(test) + "\n")


# -- loading each dataset -----------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
def test_mnist_raw_and_gz(tmp_path: Path, gz: bool):
    files = write_mnist(tmp_path, gz=gz)
    ds = _load("mnist", tmp_path)
    assert ds.x_train.shape == (12, 1, 28, 28) and ds.x_train.dtype == np.uint8
    np.testing.assert_array_equal(ds.x_train[:, 0], files["train"][0])
    np.testing.assert_array_equal(ds.y_test, files["t10k"][1].astype(np.int64))
    assert ds.y_train.dtype == np.int64 and ds.num_classes == 10 and ds.class_names[3] == "3 - three"
    assert ds.asym_map == {2: 7, 3: 8, 5: 6, 6: 5, 7: 1}
    px = files["train"][0] / 255.0
    assert ds.mean == pytest.approx((px.mean(),)) and ds.std == pytest.approx((px.std(),))


def test_mnist_gz_is_unpacked_again_when_newer(tmp_path: Path):
    write_mnist(tmp_path, gz=True)
    first = _load("mnist", tmp_path).x_test
    write_mnist(tmp_path, gz=True)  # new random images, as after re-staging a changed upload
    gz = tmp_path / "MNIST/raw/t10k-images-idx3-ubyte.gz"
    unpacked = next((tmp_path / "cache").rglob("t10k-images-idx3-ubyte"))  # the autouse fixture's FEDCORE_CACHE
    later = unpacked.stat().st_mtime_ns + 10**9
    os.utime(gz, ns=(later, later))
    second = _load("mnist", tmp_path).x_test
    assert not np.array_equal(first, second)


def test_mnist_root_may_point_into_the_raw_folder(tmp_path: Path):
    write_mnist(tmp_path)
    assert _load("mnist", tmp_path / "MNIST" / "raw").x_test.shape == (5, 1, 28, 28)


def test_fashion_mnist(tmp_path: Path):
    files = write_mnist(tmp_path, folder="FashionMNIST")
    ds = _load("fashion_mnist", tmp_path)
    np.testing.assert_array_equal(ds.x_test[:, 0], files["t10k"][0])
    assert ds.class_names[0] == "T-shirt/top" and ds.asym_map is None


def test_cifar10_layout_and_asym_map(tmp_path: Path):
    images = write_cifar10(tmp_path)
    ds = _load("cifar10", tmp_path)
    assert ds.x_train.shape == (15, 3, 32, 32) and ds.x_test.shape == (3, 3, 32, 32)
    np.testing.assert_array_equal(ds.x_train, images)  # CHW planes, batches 1..5 in order
    assert ds.class_names == CIFAR10_NAMES
    assert ds.asym_map == {9: 1, 2: 0, 4: 7, 3: 5, 5: 3}
    per_channel = images.transpose(1, 0, 2, 3).reshape(3, -1) / 255.0
    assert ds.mean == pytest.approx(tuple(per_channel.mean(1))) and ds.std == pytest.approx(tuple(per_channel.std(1)))


class _Touch:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))  # unpickling would create the file


def test_a_crafted_cifar_batch_is_refused_and_runs_no_code(tmp_path: Path):
    write_cifar10(tmp_path)
    marker = tmp_path / "pwned"
    _pickle(tmp_path / "cifar-10-batches-py" / "data_batch_3", {"data": _Touch(marker)})
    with pytest.raises(DataError, match=r"data_batch_3' holds more than arrays and plain data \(it asks for "
                                        r"'(io|builtins)\.open'\)"):
        _load("cifar10", tmp_path)
    assert not marker.exists()


def test_cifar_batches_resaved_with_pickle_protocol_5_still_load(tmp_path: Path):
    images = write_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    with open(batch, "rb") as f:
        d = pickle.load(f, encoding="latin1")
    batch.write_bytes(pickle.dumps(d, protocol=5))  # numpy arrays then pickle through _frombuffer
    np.testing.assert_array_equal(_load("cifar10", tmp_path).x_train, images)


def test_cifar100_superclass_map(tmp_path: Path):
    write_cifar100(tmp_path)
    ds = _load("cifar100", tmp_path)
    assert ds.num_classes == 100 and ds.class_names[42] == "fine42" and ds.x_test.shape == (100, 3, 32, 32)
    # Written with coarse = fine % 20, so superclass 3 holds fine 3, 23, 43, 63, 83.
    assert [ds.asym_map[f] for f in (3, 23, 43, 63, 83)] == [23, 43, 63, 83, 3]
    assert len(ds.asym_map) == 100


def test_superclass_map_refuses_inconsistent_labels():
    assert superclass_map({"fine_labels": [0, 0], "coarse_labels": [1, 2]}) is None
    assert superclass_map({"fine_labels": [0, 1]}) is None
    assert superclass_map({"fine_labels": [4, 1, 7], "coarse_labels": [0, 0, 0]}) == {1: 4, 4: 7, 7: 1}


def test_svhn_labels_and_layout(tmp_path: Path):
    x = write_svhn(tmp_path)
    ds = _load("svhn", tmp_path)
    np.testing.assert_array_equal(ds.y_train, [0, 1, 2, 3, 9, 0])
    np.testing.assert_array_equal(ds.x_train[4], x["train"][:, :, :, 4].transpose(2, 0, 1))
    assert ds.x_test.shape == (4, 3, 32, 32)


@pytest.mark.parametrize("ann", ["", "annotations"])
def test_clothing1m_real_noise_and_clean_labels(tmp_path: Path, ann: str):
    write_clothing(tmp_path, ann)
    ds = _load("clothing1m", tmp_path, image_size=16)
    assert ds.x_train.shape == (8, 3, 16, 16) and ds.x_test.shape == (3, 3, 16, 16)
    np.testing.assert_array_equal(ds.y_train_noisy, np.arange(8))
    np.testing.assert_array_equal(ds.y_train_known, [1, 0, 1, 0, 0, 1, 0, 0])
    np.testing.assert_array_equal(ds.y_train, [0, 1, 2, 3, 4, 13, 6, 7])
    np.testing.assert_array_equal(ds.y_test, [11, 12, 3])
    assert ds.num_classes == 14 and ds.class_names[8] == "Down Coat"
    # Solid-colour JPEGs survive resizing within JPEG's rounding.
    assert np.abs(ds.x_train[3, :, 8, 8].astype(int) - [60, 100, 200]).max() <= 3
    np.testing.assert_array_equal(ds.x_test[2, :, 5, 5], [250, 20, 0])


def test_clothing1m_cap_and_default_size(tmp_path: Path):
    write_clothing(tmp_path)
    ds = _load("clothing1m", tmp_path, max_train=3, params={"max_test": 2})
    assert ds.x_train.shape == (3, 3, 64, 64) and len(ds.y_test) == 2
    assert set(ds.y_train_noisy.tolist()) <= set(range(8))


def test_clothing1m_progress_path_gives_the_same_arrays(tmp_path: Path, monkeypatch):
    write_clothing(tmp_path)
    quiet = _load("clothing1m", tmp_path, image_size=8)
    monkeypatch.setattr(clothing, "_PROGRESS_MIN", 2)
    monkeypatch.setattr(vision, "_CHUNK", 3)  # the chunked decode, with a bar step per chunk
    shown = _load("clothing1m", tmp_path, image_size=8)
    np.testing.assert_array_equal(quiet.x_train, shown.x_train)
    np.testing.assert_array_equal(quiet.x_test, shown.x_test)


@pytest.mark.parametrize("bad", [0, "5", True])
def test_clothing1m_max_test_must_be_positive_int(tmp_path: Path, bad):
    write_clothing(tmp_path)
    with pytest.raises(ConfigError, match="data.params.max_test must be a positive integer"):
        _load("clothing1m", tmp_path, params={"max_test": bad})


# -- failures name the files --------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), [
    ("mnist", ["MNIST/raw/", "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
               "t10k-labels-idx1-ubyte.gz", "put the official files there"]),
    ("fashion_mnist", ["FashionMNIST/raw/", "t10k-labels-idx1-ubyte.gz", "apt-get install -y dataset-fashion-mnist"]),
    ("cifar10", ["cifar-10-batches-py/{data_batch_1, data_batch_2, data_batch_3, data_batch_4, data_batch_5, "
                 "test_batch, batches.meta}"]),
    ("cifar100", ["cifar-100-python/{train, test, meta}"]),
    ("svhn", ["train_32x32.mat, test_32x32.mat"]),
    ("clothing1m", ["noisy_label_kv.txt, clean_label_kv.txt, noisy_train_key_list.txt, clean_test_key_list.txt"]),
])
def test_missing_files_are_named(tmp_path: Path, name: str, expected: list[str]):
    with pytest.raises(DataError) as err:
        _load(name, tmp_path)
    msg = str(err.value)
    assert str(tmp_path) in msg and "\n" not in msg
    for part in expected:
        assert part in msg
    # Without data.root: the one dataset with a system package names it, the others ask for data.root.
    unset = "data.root is not set; .*system.* install them with `apt-get" if name == "fashion_mnist" \
        else "needs data.root"
    with pytest.raises(DataError, match=unset):
        load_dataset(DataConfig(name=name))


def test_only_the_missing_file_is_reported(tmp_path: Path):
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_4").unlink()
    with pytest.raises(DataError, match=r"cifar10: data_batch_4 not found; put the official files at"):
        _load("cifar10", tmp_path)


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize(("name", "write", "victim"), [
    ("mnist", write_mnist, "MNIST/raw/t10k-images-idx3-ubyte"),
    ("mnist", write_mnist, "MNIST/raw/train-labels-idx1-ubyte"),
    ("cifar10", write_cifar10, "cifar-10-batches-py/data_batch_3"),
    ("cifar10", write_cifar10, "cifar-10-batches-py/batches.meta"),
    ("cifar100", write_cifar100, "cifar-100-python/test"),
    ("svhn", write_svhn, "test_32x32.mat"),
    ("clothing1m", write_clothing, "images/0/05/5.jpg"),
])
def test_truncated_file_is_named(tmp_path: Path, name: str, write, victim: str):
    write(tmp_path)
    _truncate(tmp_path / victim)
    with pytest.raises(DataError, match=f"'{tmp_path / victim}' is truncated"):
        _load(name, tmp_path)


def test_corrupt_gz_is_named(tmp_path: Path):
    write_mnist(tmp_path, gz=True)
    _truncate(tmp_path / "MNIST/raw/train-images-idx3-ubyte.gz")
    with pytest.raises(DataError, match="train-images-idx3-ubyte.gz' is truncated or not gzip"):
        _load("mnist", tmp_path)
    assert not (tmp_path / "MNIST/raw/train-images-idx3-ubyte").exists()


def test_labels_out_of_range_are_refused(tmp_path: Path):
    write_mnist(tmp_path)
    write_idx(tmp_path / "MNIST/raw/t10k-labels-idx1-ubyte", np.array([0, 1, 2, 3, 12], dtype=np.uint8))
    with pytest.raises(DataError, match=r"test labels .* fall outside 0\.\.9"):
        _load("mnist", tmp_path)


def test_official_md5_can_be_required(tmp_path: Path):
    write_svhn(tmp_path)
    with pytest.raises(DataError, match="do not match the official md5 checksums; .*verify_md5=false"):
        _load("svhn", tmp_path, params={"verify_md5": True})


@pytest.mark.parametrize(("content", "match"), [
    ("images/0/00/0.jpg\n", "line 1 .* should be '<image path> <label>'"),
    ("images/0/00/0.jpg 14\n", "line 1 .* has label 14, outside 0..13"),
])
def test_clothing1m_bad_annotation_lines(tmp_path: Path, content: str, match: str):
    write_clothing(tmp_path)
    (tmp_path / "noisy_label_kv.txt").write_text(content)
    with pytest.raises(DataError, match=match):
        _load("clothing1m", tmp_path)


def test_clothing1m_missing_image_and_unlabelled_key(tmp_path: Path):
    write_clothing(tmp_path)
    (tmp_path / "images/0/03/3.jpg").unlink()
    with pytest.raises(DataError, match="image '.*images/0/03/3.jpg' is missing"):
        _load("clothing1m", tmp_path)
    with open(tmp_path / "noisy_train_key_list.txt", "a") as f:
        f.write("images/5/55/unlabelled.jpg\n")
    with pytest.raises(DataError, match="1 keys of .* have no label .*first: 'images/5/55/unlabelled.jpg'"):
        _load("clothing1m", tmp_path)


# -- an s3:// root, staged through the real S3 server -------------------------------------


@pytest.mark.parametrize(("name", "write"), [("cifar10", write_cifar10), ("clothing1m", write_clothing),
                                             ("mnist", write_mnist)])
def test_s3_root_is_staged_and_loads_like_local(s3_bucket: str, tmp_path: Path, name: str, write):
    write(tmp_path / "src")
    storage.upload_dir(tmp_path / "src", f"s3://{s3_bucket}/datasets/{name}")
    remote = _load(name, f"s3://{s3_bucket}/datasets/{name}", cache_dir=str(tmp_path / "cache"))
    local = _load(name, tmp_path / "src")
    np.testing.assert_array_equal(remote.x_train, local.x_train)
    np.testing.assert_array_equal(remote.y_test, local.y_test)
    assert (tmp_path / "cache" / s3_bucket / "datasets" / name).is_dir()

"""MNIST and Fashion-MNIST from the four official IDX files (`*-ubyte`, or `*-ubyte.gz`).

Where the files are looked for, in order:
1. data.root (a local folder or an s3:// prefix staged into the data cache), laid out as
   torchvision does (`<root>/FashionMNIST/raw/`, data.root may also point into that folder)
   or flat (`<root>/*-ubyte.gz`, as Debian ships them);
2. only when data.root is unset, the operating system's copy, where a package provides one: Debian's
   `dataset-fashion-mnist` puts the Fashion-MNIST files flat under /usr/share/datasets/fashion-mnist.
   A data.root that is set but holds none of the files is refused, never passed over.

A folder counts only when it holds all four files. `.gz` files are unpacked into the data
cache (`data_cache_dir`), never beside themselves, so a read-only data folder or a system
package works as it is; an unpacked copy is reused until its archive is newer. Files already
unpacked in the data folder are read in place. torchvision's IDX parser reads every file.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedcore.config import DataConfig
from fedcore.data.datasets import RawDataset, data_cache_dir, register_dataset, resolve_root
from fedcore.data.vision import _assemble, _base
from fedcore.errors import DataError
from fedcore.io import atomic_write

MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte")
MNIST_ASYM = {2: 7, 3: 8, 5: 6, 6: 5, 7: 1}


@dataclass(frozen=True)
class SystemCopy:
    """A dataset's files as an OS package installs them."""

    folder: Path
    package: str  # e.g. the Debian package name, for `apt-get install`


# Module-level so tests (and unusual installs) can point it elsewhere.
SYSTEM_COPIES: dict[str, SystemCopy] = {
    "fashion_mnist": SystemCopy(Path("/usr/share/datasets/fashion-mnist"), "dataset-fashion-mnist"),
}


def _present(folder: Path) -> list[str]:
    return [f for f in MNIST_FILES if (folder / f).is_file() or (folder / f"{f}.gz").is_file()]


def _root_folder(cfg: DataConfig, torch_folder: str) -> Path | None:
    """The folder under data.root holding all four files, None when it holds none of them."""
    root = resolve_root(cfg, expected=f"<data.root>/{torch_folder}/{{{', '.join(MNIST_FILES)}}}[.gz]")
    for folder in (_base(root, torch_folder) / torch_folder, root):
        found = _present(folder)
        if len(found) == len(MNIST_FILES):
            return folder
        if found:  # a partial copy is a mistake to report, not a reason to look elsewhere
            missing = [f for f in MNIST_FILES if f not in found]
            raise DataError(f"{cfg.name}: {', '.join(missing)} (or .gz) not found in '{folder}', which holds "
                            f"{', '.join(found)}; copy the missing official files there")
    return None


def find_files(cfg: DataConfig, torch_folder: str) -> Path:
    """The folder holding the four IDX files: data.root first, then the system copy."""
    system = SYSTEM_COPIES.get(cfg.name)
    names = ", ".join(f"{f}.gz" for f in MNIST_FILES)
    if cfg.root or system is None:  # without a system copy, an unset data.root is the error to report
        folder = _root_folder(cfg, torch_folder)
        if folder is not None:
            return folder
        # A root the user set is where they meant the data to be: the system copy would train on
        # other files than the ones named, while the run records the root as its source.
        unset = (f", or unset data.root to read the system copy in {system.folder} (`apt-get install -y "
                 f"{system.package}`)" if system is not None else "")
        raise DataError(f"{cfg.name}: {names} not found in data.root '{cfg.root}' (nor in its {torch_folder}/); "
                        f"put the official files there (flat, or under {torch_folder}/){unset}")
    if len(_present(system.folder)) == len(MNIST_FILES):
        return system.folder
    raise DataError(f"{cfg.name}: {names} not found: data.root is not set; nor in {system.folder}; install them with "
                    f"`apt-get install -y {system.package}`, or put them in a folder and set data.root")


def _stale(raw: Path, gz: Path) -> bool:
    return not raw.is_file() or raw.stat().st_mtime_ns < gz.stat().st_mtime_ns


def unpacked_paths(cfg: DataConfig, folder: Path) -> dict[str, Path]:
    """file name -> a readable uncompressed path: in place, or unpacked into the data cache."""
    # One cache folder per source folder, so two copies of a dataset never overwrite each other.
    key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:12]
    cache = data_cache_dir(cfg) / "unpacked" / f"{cfg.name}-{key}"
    paths = {}
    for f in MNIST_FILES:
        raw, gz = folder / f, folder / f"{f}.gz"
        if not gz.is_file() or not _stale(raw, gz):
            paths[f] = raw  # no archive, or the unpacked file beside it is current
            continue
        target = cache / f
        if _stale(target, gz):  # unpack again when the archive is newer, e.g. a re-staged s3:// copy
            _gunzip(cfg.name, gz, target)
        paths[f] = target
    return paths


def _gunzip(name: str, gz: Path, target: Path) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(gz, "rb") as fin, atomic_write(target) as fout:
            shutil.copyfileobj(fin, fout, 1 << 20)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise DataError(f"{name}: '{gz}' is truncated or not gzip ({type(err).__name__}); "
                        "replace it with the official file") from None
    except OSError as err:  # the cache, not the archive: read errors of gz itself are rare and say so too
        raise DataError(f"{name}: cannot unpack '{gz}' into '{target.parent}' ({type(err).__name__}: "
                        f"{err.strerror or err}); set data.cache_dir (or FEDCORE_CACHE) to a writable folder") from None


def _parse(name: str, path: Path, shown: Path) -> np.ndarray:
    """One IDX file as a numpy array; `shown` is the file to blame (the .gz a user has)."""
    from torchvision.datasets.mnist import (  # lazy: naming models and datasets loads no torchvision
        read_image_file,
        read_label_file,
    )

    try:
        return (read_label_file if "labels" in path.name else read_image_file)(str(path)).numpy()
    except Exception as bad:  # torchvision raises AssertionError/RuntimeError/ValueError on a bad file
        raise DataError(f"{name}: '{shown}' is truncated or malformed ({type(bad).__name__}); "
                        "replace it with the official file") from None


def _load_mnist_like(cfg: DataConfig, torch_folder: str, class_names: list[str],
                     asym_map: dict[int, int] | None) -> RawDataset:
    folder = find_files(cfg, torch_folder)
    paths = unpacked_paths(cfg, folder)
    arr = {f: _parse(cfg.name, p, p if p.parent == folder else folder / f"{f}.gz") for f, p in paths.items()}
    splits = (arr[MNIST_FILES[0]][:, None], arr[MNIST_FILES[1]], arr[MNIST_FILES[2]][:, None], arr[MNIST_FILES[3]])
    return _assemble(cfg, str(folder), splits, class_names, asym_map)


@register_dataset("mnist", params=())
def load_mnist(cfg: DataConfig) -> RawDataset:
    """MNIST, 60k/10k grey 28x28, from data.root (<root>/MNIST/raw/ or flat; raw or .gz)."""
    from torchvision.datasets import MNIST  # lazy: naming models and datasets loads no torchvision

    return _load_mnist_like(cfg, "MNIST/raw", list(MNIST.classes), MNIST_ASYM)


@register_dataset("fashion_mnist", params=())
def load_fashion_mnist(cfg: DataConfig) -> RawDataset:
    """Fashion-MNIST, 60k/10k grey 28x28, from data.root (<root>/FashionMNIST/raw/ or flat), else
    from Debian's dataset-fashion-mnist package (/usr/share/datasets/fashion-mnist)."""
    from torchvision.datasets import FashionMNIST  # lazy: naming models and datasets loads no torchvision

    return _load_mnist_like(cfg, "FashionMNIST/raw", list(FashionMNIST.classes), None)

"""Image datasets in torchvision's on-disk formats: cifar10, cifar100, svhn (mnist and
fashion_mnist: fedcore/data/mnist.py), plus helpers the other image loaders share.

Files are read by torchvision's own dataset classes with download=False, from data.root
(a local folder or an s3:// prefix staged into data.cache_dir). Official train/test
splits. A missing, truncated or malformed file raises a DataError naming it. torchvision's
md5 checks are off by default (so re-packed files load, and truncation is caught while
parsing); set data.params.verify_md5=true to insist on the official checksums.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, UnidentifiedImageError

from fedcore.config import DataConfig
from fedcore.data.datasets import RawDataset, register_dataset, resolve_root
from fedcore.errors import DataError

CIFAR10_ASYM = {9: 1, 2: 0, 4: 7, 3: 5, 5: 3}  # truck->automobile, bird->airplane, deer->horse, cat<->dog


@dataclass(frozen=True)
class Layout:
    """Where a dataset's files sit under data.root, and how to parse one of them."""

    folder: str
    files: tuple[str, ...]
    check: Callable[[Path], object]  # raises on a truncated or malformed file

    def describe(self, root: str | Path) -> str:
        return f"{Path(root) / self.folder}/{{{', '.join(self.files)}}}"


def channel_stats(x: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel mean and std of uint8 images x (N, C, H, W), on the [0, 1] scale."""
    levels = np.arange(256, dtype=np.float64) / 255.0
    means, stds = [], []
    for c in range(x.shape[1]):
        # A 256-bin histogram is exact for uint8 and never materialises a float copy of x.
        p = np.bincount(x[:, c].ravel(), minlength=256).astype(np.float64)
        p /= max(p.sum(), 1.0)
        mean = float(p @ levels)
        means.append(mean)
        # A constant channel would make normalisation divide by zero.
        stds.append(max(float(np.sqrt(p @ (levels - mean) ** 2)), 1.0 / 255.0))
    return tuple(means), tuple(stds)


OFFICIAL_MISSING = "copy the dataset's full image folder"
OFFICIAL_BROKEN = "replace it with the official file"


def read_rgb(name: str, path: Path, size: int, missing: str = OFFICIAL_MISSING,
             broken: str = OFFICIAL_BROKEN) -> np.ndarray:
    """Decode one image file as uint8 RGB (3, size, size), whatever its size and mode; a missing or
    unreadable file is a DataError naming it, ending with `missing` or `broken` (what to do)."""
    try:
        with Image.open(path) as im:
            im.draft("RGB", (size, size))  # JPEG decodes at a reduced scale directly: much faster
            arr = np.asarray(im.convert("RGB").resize((size, size), Image.Resampling.BILINEAR))
    except FileNotFoundError:
        raise DataError(f"{name}: image '{path}' is missing; {missing}") from None
    except (OSError, SyntaxError, ValueError, UnidentifiedImageError) as err:
        raise DataError(f"{name}: image '{path}' is truncated or not an image ({type(err).__name__}); {broken}") \
            from None
    return arr.transpose(2, 0, 1)


_CHUNK = 2048  # images queued at a time: a million paths must not queue a million futures at once


def read_images(name: str, paths: Sequence[Path], size: int, missing: str = OFFICIAL_MISSING,
                broken: str = OFFICIAL_BROKEN, step: Callable[[int], None] | None = None) -> np.ndarray:
    """uint8 (N, 3, size, size), decoded in threads (Pillow releases the GIL while decoding);
    `step(n)` after each chunk of n images (a progress bar)."""
    out = np.empty((len(paths), 3, size, size), dtype=np.uint8)

    def one(i: int) -> None:
        out[i] = read_rgb(name, paths[i], size, missing, broken)

    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
        for start in range(0, len(paths), _CHUNK):
            chunk = range(start, min(start + _CHUNK, len(paths)))
            for _ in pool.map(one, chunk):
                pass
            if step:
                step(len(chunk))
    return out


def _base(root: Path, folder: str) -> Path:
    # Accept data.root pointing into the dataset's own folder (…/MNIST/raw, …/cifar-10-batches-py).
    parts = Path(folder).parts
    for k in range(len(parts), 0, -1):
        if root.parts[-k:] == parts[:k]:
            return root.parents[k - 1]
    return root


def _open(cfg: DataConfig, layout: Layout) -> Path:
    """Resolve data.root, check every expected file is there, and return the torchvision root."""
    root = _base(resolve_root(cfg, expected=layout.describe("<data.root>")), layout.folder)
    folder = root / layout.folder
    missing = [f for f in layout.files if not (folder / f).is_file()]
    if missing:
        raise DataError(f"{cfg.name}: {', '.join(missing)} not found; put the official files at "
                        f"{layout.describe(root)}")
    return root


def _read(cfg: DataConfig, layout: Layout, root: Path, build: Callable[[bool], Any]) -> tuple[Any, Any]:
    """Build the (train, test) torchvision datasets, turning parse failures into a DataError."""
    try:
        return build(True), build(False)
    except Exception as err:  # torchvision raises RuntimeError/ValueError/EOFError/...: all mean a bad file
        folder = root / layout.folder
        for f in layout.files:
            try:
                layout.check(folder / f)
            except Exception as bad:
                raise DataError(f"{cfg.name}: '{folder / f}' is truncated or malformed "
                                f"({type(bad).__name__}); replace it with the official file") from None
        if cfg.params.get("verify_md5", False):
            raise DataError(f"{cfg.name}: {layout.describe(root)} do not match the official md5 checksums; "
                            "replace them, or set data.params.verify_md5=false") from None
        raise DataError(f"{cfg.name}: cannot read {layout.describe(root)} ({type(err).__name__}); "
                        "replace them with the official files") from None


# Natural photos survive a mirror; digits and clothing glyphs (MNIST, Fashion, SVHN) read differently.
_MIRRORABLE = frozenset({"cifar10", "cifar100"})


def _assemble(cfg: DataConfig, where: str, splits: tuple[np.ndarray, ...], class_names: list[str],
              asym_map: dict[int, int] | None) -> RawDataset:
    """Check sizes and label ranges, then build the RawDataset from (x_tr, y_tr, x_te, y_te)."""
    x_tr, y_tr, x_te, y_te = splits
    k = len(class_names)
    for split, x, y in (("train", x_tr, y_tr), ("test", x_te, y_te)):
        if len(x) != len(y):
            raise DataError(f"{cfg.name}: the {split} split has {len(x)} images but {len(y)} labels in "
                            f"{where}; replace the files with the official ones")
        if len(y) and (y.min() < 0 or y.max() >= k):
            raise DataError(f"{cfg.name}: {split} labels in {where} fall outside 0..{k - 1}; "
                            "replace the files with the official ones")
    mean, std = channel_stats(x_tr)
    return RawDataset(
        name=cfg.name, x_train=np.ascontiguousarray(x_tr), y_train=y_tr.astype(np.int64),
        x_test=np.ascontiguousarray(x_te), y_test=y_te.astype(np.int64), num_classes=k,
        class_names=class_names, mean=mean, std=std, asym_map=asym_map,
        flip_ok=cfg.name in _MIRRORABLE,
    )


def _unverified(cls: type, **lists: Any) -> type:
    # Same loading code, no md5: official md5s reject re-packed (and test-sized) files.
    return type(cls.__name__, (cls,), lists)


# -- CIFAR-10 and CIFAR-100 -----------------------------------------------------------------


class _PlainUnpickler(pickle.Unpickler):
    """Builds what the official CIFAR batches hold (dicts, lists, strings, numpy arrays) and
    refuses every other global: a crafted batch from data.root (an s3:// store, say) runs no code."""

    # numpy pickles arrays through _reconstruct (protocols 0-4) or _frombuffer (protocol 5),
    # under numpy.core before numpy 2 and numpy._core after it.
    ALLOWED = {(f"numpy.{core}.{mod}", fn) for core in ("core", "_core")
               for mod, fn in (("multiarray", "_reconstruct"), ("multiarray", "scalar"), ("numeric", "_frombuffer"))}
    ALLOWED |= {("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it asks for '{module}.{name}'")


def _unpickle(path: Path) -> dict[str, Any]:
    with open(path, "rb") as f:
        d = _PlainUnpickler(f, encoding="latin1").load()
    if not isinstance(d, dict):
        raise TypeError("not a dict")
    return d


def _refuse_crafted(name: str, folder: Path, files: tuple[str, ...]) -> None:
    """torchvision unpickles the batches without limits: read each one safely first."""
    for f in files:
        try:
            _unpickle(folder / f)
        except pickle.UnpicklingError as err:
            if "it asks for" in str(err):
                raise DataError(f"{name}: '{folder / f}' holds more than arrays and plain data ({err}); it is not "
                                "an official file and loading it could run code: replace it") from None
        except Exception:
            pass  # damaged, not crafted: _read reports it with the file's name


def _check_cifar(path: Path) -> None:
    d = _unpickle(path)
    if "data" not in d:
        if not ({"label_names", "fine_label_names"} & d.keys()):
            raise KeyError("label_names")
        return
    data, labels = np.asarray(d["data"]), d.get("labels", d.get("fine_labels"))
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or labels is None or len(labels) != len(data):
        raise ValueError(f"data {data.shape} with {None if labels is None else len(labels)} labels")


def _load_cifar(cfg: DataConfig, cls: Any, asym_map: dict[int, int] | None) -> tuple[RawDataset, Path]:
    names = [n for n, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    layout = Layout(cls.base_folder, tuple(names), _check_cifar)
    root = _open(cfg, layout)
    _refuse_crafted(cfg.name, root / layout.folder, layout.files)
    if not cfg.params.get("verify_md5", False):
        cls = _unverified(cls, train_list=[[n, None] for n, _ in cls.train_list],
                          test_list=[[n, None] for n, _ in cls.test_list], meta={**cls.meta, "md5": None})
    tr, te = _read(cfg, layout, root, lambda train: cls(str(root), train=train, download=False))
    # torchvision keeps CIFAR as (N, H, W, C); RawDataset wants (N, C, H, W).
    splits = (tr.data.transpose(0, 3, 1, 2), np.asarray(tr.targets), te.data.transpose(0, 3, 1, 2),
              np.asarray(te.targets))
    return _assemble(cfg, layout.describe(root), splits, list(tr.classes), asym_map), root / layout.folder


@register_dataset("cifar10", params=("verify_md5",))
def load_cifar10(cfg: DataConfig) -> RawDataset:
    """CIFAR-10, 50k/10k RGB 32x32, from <root>/cifar-10-batches-py."""
    from torchvision.datasets import CIFAR10  # lazy: naming models and datasets loads no torchvision

    return _load_cifar(cfg, CIFAR10, CIFAR10_ASYM)[0]


@register_dataset("cifar100", params=("verify_md5",))
def load_cifar100(cfg: DataConfig) -> RawDataset:
    """CIFAR-100, 50k/10k RGB 32x32, from <root>/cifar-100-python.

    asym_map flips each class to the next one (by index, cyclically) within its superclass,
    with superclasses read from the coarse labels of the official test file.
    """
    from torchvision.datasets import CIFAR100  # lazy: naming models and datasets loads no torchvision

    ds, folder = _load_cifar(cfg, CIFAR100, None)
    ds.asym_map = superclass_map(_unpickle(folder / "test"))
    return ds


def superclass_map(batch: dict[str, Any]) -> dict[int, int] | None:
    """fine -> next fine class of the same superclass, from a batch with fine and coarse labels."""
    fine, coarse = batch.get("fine_labels"), batch.get("coarse_labels")
    if fine is None or coarse is None:
        return None
    if len(fine) != len(coarse):
        return None
    pairs = set(zip(np.asarray(fine).tolist(), np.asarray(coarse).tolist(), strict=True))
    groups: dict[int, list[int]] = {}
    for f, c in sorted(pairs):
        groups.setdefault(c, []).append(f)
    if len(pairs) != len({f for f, _ in pairs}):
        return None  # a fine class under two superclasses: not the official labelling
    return {f: g[(i + 1) % len(g)] for g in groups.values() if len(g) > 1 for i, f in enumerate(g)}


# -- SVHN --------------------------------------------------------------------------------


def _check_mat(path: Path) -> None:
    import scipy.io as sio  # lazy: scipy.io for SVHN's .mat files only

    mat = sio.loadmat(str(path))
    x, y = mat["X"], mat["y"]
    if x.ndim != 4 or x.shape[:3] != (32, 32, 3) or len(y.ravel()) != x.shape[3]:
        raise ValueError(f"X {x.shape}, y {y.shape}")


@register_dataset("svhn", params=("verify_md5",))
def load_svhn(cfg: DataConfig) -> RawDataset:
    """SVHN cropped digits, 73k/26k RGB 32x32, from <root>/train_32x32.mat and test_32x32.mat."""
    from torchvision.datasets import SVHN  # lazy: naming models and datasets loads no torchvision

    layout = Layout("", ("train_32x32.mat", "test_32x32.mat"), _check_mat)
    root = _open(cfg, layout)
    cls: Any = SVHN
    if not cfg.params.get("verify_md5", False):
        cls = _unverified(SVHN, split_list={k: [u, fn, None] for k, (u, fn, _) in SVHN.split_list.items()})
    split = {True: "train", False: "test"}
    tr, te = _read(cfg, layout, root, lambda train: cls(str(root), split=split[train], download=False))
    splits = (tr.data, tr.labels, te.data, te.labels)
    return _assemble(cfg, layout.describe(root), splits, [str(d) for d in range(10)], None)

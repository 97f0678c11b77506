"""Clothing1M (Xiao et al., CVPR 2015): 14 clothing classes with real label noise.

On-disk format, as released: an image folder plus annotation files, either in data.root
or in data.root/annotations:
  noisy_label_kv.txt, clean_label_kv.txt   lines `<image path relative to root> <label>`
  noisy_train_key_list.txt, clean_test_key_list.txt   one relative image path per line
  (clean_train_key_list.txt and clean_val_key_list.txt are not needed here.)

Train = the noisy_train keys; y_train_noisy holds their labels from the noisy file. Where a
clean label exists, y_train holds it and y_train_known is True; elsewhere y_train repeats
the noisy label (so it stays a valid class for partitioning) and y_train_known is False.
Test = the clean_test keys with clean labels. Images are resized to data.image_size
(default 64). data.max_train caps the training keys before any image is decoded;
data.params.max_test does the same for the test keys.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress

from fedcore.config import DataConfig
from fedcore.data.datasets import RawDataset, register_dataset, resolve_root
from fedcore.data.vision import channel_stats, read_images
from fedcore.errors import ConfigError, DataError

CLASS_NAMES = ["T-Shirt", "Shirt", "Knitwear", "Chiffon", "Sweater", "Hoodie", "Windbreaker", "Jacket",
               "Down Coat", "Suit", "Shawl", "Dress", "Vest", "Underwear"]
NOISY_KV, CLEAN_KV = "noisy_label_kv.txt", "clean_label_kv.txt"
TRAIN_KEYS, TEST_KEYS = "noisy_train_key_list.txt", "clean_test_key_list.txt"
REQUIRED = (NOISY_KV, CLEAN_KV, TRAIN_KEYS, TEST_KEYS)
DEFAULT_SIZE = 64
_PROGRESS_MIN = 4000  # below this many images a progress bar is only noise
_EXPECTED = f"an images/ folder plus {', '.join(REQUIRED)} (in the root or in annotations/)"


def _annotations(name: str, root: Path) -> Path:
    for folder in (root, root / "annotations"):
        if all((folder / f).is_file() for f in REQUIRED):
            return folder
    missing = [f for f in REQUIRED if not (root / f).is_file() and not (root / "annotations" / f).is_file()]
    raise DataError(f"{name}: {', '.join(missing) or 'the annotation files'} not found in {root} or "
                    f"{root / 'annotations'}; data.root must hold {_EXPECTED}")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise DataError(f"clothing1m: '{path}' is not a text file; replace it with the official file") from None
    for no, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield no, line.strip()


def read_kv(path: Path) -> dict[str, int]:
    """Parse a `<relative image path> <label>` file into {path: label}, labels in 0..13."""
    out: dict[str, int] = {}
    for no, line in _lines(path):
        parts = line.rsplit(maxsplit=1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise DataError(f"clothing1m: line {no} of '{path}' should be '<image path> <label>', got "
                            f"'{line[:80]}'; replace the file with the official one")
        label = int(parts[1])
        if not 0 <= label < len(CLASS_NAMES):
            raise DataError(f"clothing1m: line {no} of '{path}' has label {label}, outside 0..13; "
                            "replace the file with the official one")
        out[parts[0]] = label
    return out


def read_keys(path: Path) -> list[str]:
    """Parse a key list: one relative image path per line."""
    return [line for _, line in _lines(path)]


def _labels(keys: list[str], kv: dict[str, int], kv_path: Path, list_path: Path) -> np.ndarray:
    missing = [k for k in keys if k not in kv]
    if missing:
        raise DataError(f"clothing1m: {len(missing)} keys of '{list_path}' have no label in '{kv_path}' "
                        f"(first: '{missing[0]}'); use the official, matching annotation files")
    return np.fromiter((kv[k] for k in keys), dtype=np.int64, count=len(keys))


def cap_indices(n: int, cap: int | None) -> np.ndarray:
    """Indices kept by a cap; the same rule as `load_dataset`, so it does not cap again."""
    if cap is None or cap >= n:
        return np.arange(n)
    return np.sort(np.random.default_rng(0).permutation(n)[:cap])


def load_images(root: Path, keys: list[str], size: int, what: str) -> np.ndarray:
    """Decode `keys` (paths relative to root) into uint8 (N, 3, size, size), in parallel threads."""
    with _progress(len(keys), what) as step:
        return read_images("clothing1m", [root / k for k in keys], size,
                           missing="copy the full images/ folder into data.root", step=step)


@contextlib.contextmanager
def _progress(total: int, what: str) -> Iterator[Callable[[int], None]]:
    if total <= _PROGRESS_MIN:
        yield lambda n: None
        return

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"clothing1m {what} images", total=total)
        yield lambda n: bar.advance(task, n)


def _cap_param(cfg: DataConfig, name: str) -> int | None:
    value = cfg.params.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"data.params.{name} must be a positive integer, got {value!r}")
    return value


@register_dataset("clothing1m", params=("max_test",))
def load_clothing1m(cfg: DataConfig) -> RawDataset:
    """Clothing1M: noisy train (about 1M images) and clean test (10,526), 14 classes."""
    root = resolve_root(cfg, expected=_EXPECTED)
    ann = _annotations(cfg.name, root)
    noisy, clean = read_kv(ann / NOISY_KV), read_kv(ann / CLEAN_KV)
    train_keys, test_keys = read_keys(ann / TRAIN_KEYS), read_keys(ann / TEST_KEYS)
    if not train_keys or not test_keys:
        raise DataError(f"clothing1m: '{ann / (TEST_KEYS if train_keys else TRAIN_KEYS)}' lists no images; "
                        "replace it with the official file")
    train_keys = [train_keys[i] for i in cap_indices(len(train_keys), cfg.max_train)]
    test_keys = [test_keys[i] for i in cap_indices(len(test_keys), _cap_param(cfg, "max_test"))]
    y_noisy = _labels(train_keys, noisy, ann / NOISY_KV, ann / TRAIN_KEYS)
    known = np.fromiter((k in clean for k in train_keys), dtype=bool, count=len(train_keys))
    y_train = np.where(known, [clean.get(k, -1) for k in train_keys], y_noisy).astype(np.int64)
    y_test = _labels(test_keys, clean, ann / CLEAN_KV, ann / TEST_KEYS)
    size = cfg.image_size or DEFAULT_SIZE
    x_train = load_images(root, train_keys, size, "train")
    x_test = load_images(root, test_keys, size, "test")
    mean, std = channel_stats(x_train)
    return RawDataset(
        name=cfg.name, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test,
        num_classes=len(CLASS_NAMES), class_names=list(CLASS_NAMES), mean=mean, std=std,
        y_train_noisy=y_noisy, y_train_known=known,
    )

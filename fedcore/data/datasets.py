"""Dataset registry.

Every loader returns a `RawDataset`: uint8 image tensors (N, C, H, W) plus targets.
Single-label targets are class indices (N,); multi-label targets are 0/1 matrices
(N, C). Loaders read only local files (or an s3:// prefix staged to a local cache);
no code path downloads from the internet. Missing or malformed files raise
`DataError` naming the files expected and where.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from fedcore.config import DataConfig
from fedcore.errors import ConfigError, DataError
from fedcore.io import stage_prefix

Task = Literal["single", "multi"]


@dataclass
class RawDataset:
    """A dataset as loaded from disk, before partitioning and noise.

    x_*: uint8 (N, C, H, W). y_*: int64 (N,) for single-label, uint8 (N, C) for multi-label.
    y_train_noisy: labels from a real-noise file (clothing1m); y_train then holds clean
    labels where `y_train_known` is True. groups: natural user id per training sample, an index
    into group_names when the data names its clients. labels_as_given: synthetic noise is
    injected on y_train_noisy, not y_train, so trusted labels never reach training (the user's
    own files). notes: what the run should say about the data (e.g. a noisy held-out test set).
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    task: Task = "single"
    class_names: list[str] = field(default_factory=list)
    mean: tuple[float, ...] = (0.5,)
    std: tuple[float, ...] = (0.5,)
    y_train_noisy: np.ndarray | None = None
    y_train_known: np.ndarray | None = None
    groups: np.ndarray | None = None
    asym_map: dict[int, int] | None = None
    flip_ok: bool = False  # may augmentation mirror images? False for digits and text
    extras: dict[str, Any] = field(default_factory=dict)
    group_names: list[str] | None = None
    labels_as_given: bool = False
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.class_names:
            self.class_names = [str(c) for c in range(self.num_classes)]
        for name in ("x_train", "x_test"):
            arr = getattr(self, name)
            if arr.dtype != np.uint8 or arr.ndim != 4:
                raise ValueError(f"{self.name}.{name} must be uint8 (N, C, H, W), got {arr.dtype} {arr.shape}")


Loader = Callable[[DataConfig], RawDataset]
_REGISTRY: dict[str, Loader] = {}
_PARAMS: dict[str, frozenset[str] | None] = {}
_READS_ROOT: dict[str, bool | Callable[[DataConfig], bool]] = {}


def register_dataset(name: str, params: Iterable[str] | None = None,
                     reads_root: bool | Callable[[DataConfig], bool] = True) -> Callable[[Loader], Loader]:
    """Register a loader; `params` names the data.params keys it reads (None: it checks its own);
    `reads_root` says whether it reads data.root (False for data bundled with a package), or
    decides it from the config."""
    def deco(fn: Loader) -> Loader:
        if name in _REGISTRY:
            raise ValueError(f"dataset '{name}' registered twice")
        _REGISTRY[name] = fn
        _PARAMS[name] = None if params is None else frozenset(params)
        _READS_ROOT[name] = reads_root
        return fn

    return deco


def reads_root(cfg: DataConfig) -> bool:
    """Whether the dataset `cfg` names reads data.root (True for a name nothing is registered for)."""
    _import_loaders()
    rule = _READS_ROOT.get(cfg.name, True)
    return rule(cfg) if callable(rule) else rule


def dataset_params(name: str) -> frozenset[str] | None:
    """The data.params keys dataset `name` reads, or None when its loader does not say."""
    _import_loaders()
    return _PARAMS.get(name)


def available_datasets() -> list[str]:
    _import_loaders()
    return sorted(_REGISTRY)


def load_dataset(cfg: DataConfig) -> RawDataset:
    """Load the dataset named in `cfg` (after staging an s3:// root locally)."""
    _import_loaders()
    if cfg.name not in _REGISTRY:
        raise ConfigError(f"unknown dataset '{cfg.name}' at 'data.name'; choose one of {available_datasets()}")
    ds = _REGISTRY[cfg.name](cfg)
    if cfg.max_train is not None and cfg.max_train < len(ds.y_train):
        ds = _cap_train(ds, cfg.max_train)
    return ds


def _cap_train(ds: RawDataset, n: int) -> RawDataset:
    # Deterministic prefix after a fixed permutation keeps class balance roughly intact.
    idx = np.sort(np.random.default_rng(0).permutation(len(ds.y_train))[:n])
    ds.x_train, ds.y_train = ds.x_train[idx], ds.y_train[idx]
    for name in ("y_train_noisy", "y_train_known", "groups"):
        arr = getattr(ds, name)
        if arr is not None:
            setattr(ds, name, arr[idx])
    return ds


def data_cache_dir(cfg: DataConfig) -> Path:
    """Where data files are staged (s3:// roots) and unpacked (.gz): data.cache_dir; left at its
    default, FEDCORE_CACHE wins when set (the dataset-cache volume on Kubernetes)."""
    default = DataConfig.model_fields["cache_dir"].default
    if cfg.cache_dir == default and os.environ.get("FEDCORE_CACHE"):
        return Path(os.environ["FEDCORE_CACHE"]).expanduser()
    return Path(cfg.cache_dir).expanduser()


def resolve_root(cfg: DataConfig, expected: str) -> Path:
    """Return a local directory for `cfg.root`, staging an s3:// prefix into the cache first.

    `expected` describes the files the loader wants, for the error message.
    """
    if not cfg.root:
        raise DataError(f"dataset '{cfg.name}' needs data.root: a local dir or s3:// prefix holding {expected}")
    if cfg.root.startswith("s3://"):
        return stage_prefix(cfg.root, data_cache_dir(cfg))
    if "://" in cfg.root:  # e.g. gs://: Path() would turn it into a missing local folder 'gs:/...'
        raise DataError(f"data.root '{cfg.root}' has an unsupported scheme; use a local dir or s3://bucket/prefix")
    root = Path(cfg.root).expanduser()
    if not root.is_dir():
        raise DataError(f"data.root '{root}' is not a directory; it should hold {expected}")
    return root


def stratified_split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic stratified train/test index split."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        k = int(round(len(idx) * test_fraction))
        test.append(idx[:k])
        train.append(idx[k:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


@register_dataset("digits", params=("split_seed",), reads_root=False)
def load_digits_dataset(cfg: DataConfig) -> RawDataset:
    """scikit-learn's bundled 8x8 digits (1797 images); the default for quick runs and tests."""
    from sklearn.datasets import load_digits  # lazy: scikit-learn adds ~2 s to start-up

    bunch = load_digits()
    x = np.clip(np.rint(bunch.images * (255.0 / 16.0)), 0, 255).astype(np.uint8)[:, None]
    y = bunch.target.astype(np.int64)
    # The split is part of the dataset, not of the experiment seed, so every run scores on the same test set.
    tr, te = stratified_split(y, cfg.test_fraction, seed=int(cfg.params.get("split_seed", 0)))
    return RawDataset(
        name="digits", x_train=x[tr], y_train=y[tr], x_test=x[te], y_test=y[te], num_classes=10,
        mean=(0.3,), std=(0.4,),
        asym_map={2: 7, 3: 8, 5: 6, 6: 5, 7: 1},  # the MNIST map applies to digit glyphs too
    )


def _import_loaders() -> None:
    # Loaders for files on disk register themselves on import; importing lazily keeps
    # `fedcore --help` fast and lets a missing optional piece fail only when used.

    for mod in ("fedcore.data.vision", "fedcore.data.mnist", "fedcore.data.clothing", "fedcore.data.multilabel",
                "fedcore.data.files"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as err:
            if err.name != mod:
                raise

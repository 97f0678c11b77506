"""The user's own federation: an image folder tree, a table, or arrays, read from data.root.

imagefolder  ROOT/CLASS/*.png|jpg|... or, with a client level, ROOT/CLIENT/CLASS/*; a test split from
             ROOT/test/CLASS/* when that folder exists. Class names are the folder names.
             data.params: layout (auto | classes | clients), test_dir (default "test"), split_seed.
table        a CSV or Parquet file (data.params.file, default: the only *.csv/*.parquet in the root) with an
             image path column (relative to the table) or a pixels column (space-separated values or a list,
             square images of data.params.channels channels), a label column, and optionally client,
             trusted-label and split (train/test) columns. Labels joined by label_sep ("|") make the task
             multi-label. data.params: file, path_column, pixels_column, label_column, client_column,
             trusted_column, split_column, label_sep, multi_label, classes, channels, split_seed.
arrays       an .npz file (data.params.file, default: the only *.npz in the root) with x (N, H, W[, C]) or
             (N, C, H, W), y (N,) class ids or names, or (N, C) 0/1 for multi-label, and optional client,
             trusted (-1 or "" where none), split ("train"/"test") arrays. data.params: file, classes,
             split_seed.

Labels are used as given: they are `y_train_noisy`, which `noise.type: real` trains on. A trusted label,
where one exists, fills `y_train` and `y_train_known`, which only metrics read; synthetic noise types
are injected on the labels as given (`labels_as_given`), so trusted labels never reach training.
Without a test split in the data, one is held out of the data's own (noisy) labels, and a note says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd  # pandas and pyarrow come pinned with mlflow (docker/requirements.lock)
import torch
import torch.nn.functional as F
from torchvision.datasets.folder import IMG_EXTENSIONS, make_dataset

from fedcore.config import DataConfig
from fedcore.data.clothing import cap_indices
from fedcore.data.datasets import RawDataset, register_dataset, resolve_root, stratified_split
from fedcore.data.vision import channel_stats, read_images
from fedcore.errors import ConfigError, DataError

log = logging.getLogger(__name__)

DEFAULT_SIZE = 64
TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
HELD_OUT_NOTE = ("no test split in the data: {n} samples were held out as test, and their labels are as noisy "
                 "as training's; add a split column or a test/ folder for a clean test set")


@dataclass
class Records:
    """One source's samples before decoding. x: image paths, or uint8 (N, C, H, W); labels: class names
    per sample (one for single-label); clients, trusted: per sample or None; test: bool (N,) or None."""

    x: list[Path] | np.ndarray
    labels: list[tuple[str, ...]]
    clients: list[str] | None
    trusted: list[str] | None  # "" where a sample has no trusted label
    test: np.ndarray | None
    where: str  # names the source in error messages


# -- shared assembly -----------------------------------------------------------------------------


def _param(cfg: DataConfig, key: str, default, kind: type | tuple[type, ...]):
    value = cfg.params.get(key, default)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind is int):
        raise ConfigError(f"data.params.{key} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _natural_key(name: str) -> tuple:
    # Classes 2 and 10 sort as numbers, not as text.
    return (0, int(name), "") if name.lstrip("-").isdigit() else (1, 0, name)


def _classes(cfg: DataConfig, rec: Records, train: np.ndarray, given: Sequence[str] | None) -> list[str]:
    """The class names: data.params.classes, the source's own (folders), or the training labels, sorted."""
    listed = _param(cfg, "classes", None, list)
    classes = [str(c) for c in listed] if listed is not None else list(given) if given is not None else sorted(
        {c for i in np.flatnonzero(train) for c in rec.labels[i]}, key=_natural_key)
    if not classes:
        raise DataError(f"{cfg.name}: {rec.where} has no labelled training samples; give each sample a label")
    index = set(classes)
    for i, labels in enumerate(rec.labels):
        for c in labels:
            if c not in index:
                what = "test split has class" if not train[i] else "label"
                hint = "add training samples of it or drop them from the test split" if not train[i] else \
                    "fix the label or add it to data.params.classes"
                raise DataError(f"{cfg.name}: {what} '{c}' (sample {i} of {rec.where}) is not one of the "
                                f"{len(classes)} training classes; {hint}")
    return classes


def _trusted(cfg: DataConfig, rec: Records, index: dict[str, int]) -> np.ndarray:
    """Trusted class id per sample, -1 where none; an unknown value is refused."""
    out = np.full(len(rec.labels), -1, dtype=np.int64)
    for i, t in enumerate(rec.trusted or []):
        if t == "":
            continue
        if t not in index:
            raise DataError(f"{cfg.name}: trusted label '{t}' (sample {i} of {rec.where}) is not one of the "
                            f"classes {sorted(index)[:10]}; fix it or leave it empty")
        out[i] = index[t]
    return out


def _split(cfg: DataConfig, rec: Records, notes: list[str]) -> np.ndarray:
    """Bool (N,) test mask: the data's own, or a stratified hold-out of its (noisy) labels."""
    if rec.test is not None:
        if not rec.test.any():
            raise DataError(f"{cfg.name}: {rec.where} marks no sample as test; mark some, or drop the split")
        return rec.test
    first = np.array([sorted(lab)[0] if lab else "" for lab in rec.labels])
    _, y = np.unique(first, return_inverse=True)
    _, te = stratified_split(y, cfg.test_fraction, seed=_param(cfg, "split_seed", 0, int))
    test = np.zeros(len(first), dtype=bool)
    test[te] = True
    notes.append(HELD_OUT_NOTE.format(n=int(test.sum())))
    log.warning("%s: %s", cfg.name, notes[-1])
    return test


def _targets(rec: Records, idx: np.ndarray, index: dict[str, int], multi: bool) -> np.ndarray:
    if not multi:
        return np.array([index[rec.labels[i][0]] for i in idx], dtype=np.int64)
    out = np.zeros((len(idx), len(index)), dtype=np.uint8)
    for row, i in enumerate(idx):
        out[row, [index[c] for c in rec.labels[i]]] = 1
    return out


def assemble(cfg: DataConfig, rec: Records, multi: bool = False, classes: Sequence[str] | None = None) -> RawDataset:
    """Check labels, split, cap, decode and wrap one source's records into a RawDataset."""
    notes: list[str] = []
    if not multi and any(len(lab) != 1 for lab in rec.labels):
        bad = next(i for i, lab in enumerate(rec.labels) if len(lab) != 1)
        raise DataError(f"{cfg.name}: sample {bad} of {rec.where} has no label; give every sample one")
    test = _split(cfg, rec, notes)
    names = _classes(cfg, rec, ~test, classes)
    index = {c: k for k, c in enumerate(names)}
    if rec.trusted is not None and multi:
        raise DataError(f"{cfg.name}: trusted labels are single-label only; drop the trusted column of "
                        f"{rec.where} or give one label per sample")
    trusted = _trusted(cfg, rec, index)
    tr = np.flatnonzero(~test)
    tr = tr[cap_indices(len(tr), cfg.max_train)]
    te = np.flatnonzero(test)
    x_train, x_test = one_channel_if_grey(_images(cfg, rec, tr), _images(cfg, rec, te))
    y_given, known = _targets(rec, tr, index, multi), trusted[tr] >= 0
    groups, group_names = None, None
    if rec.clients is not None:
        group_names, groups = np.unique(np.array([rec.clients[i] for i in tr], dtype=str), return_inverse=True)
    mean, std = channel_stats(x_train)
    return RawDataset(
        name=cfg.name, x_train=x_train, y_train=y_given if multi else np.where(known, trusted[tr], y_given),
        x_test=x_test, y_test=_targets(rec, te, index, multi), num_classes=len(names),
        task="multi" if multi else "single", class_names=names, mean=mean, std=std,
        y_train_noisy=None if multi else y_given, y_train_known=None if multi else known,
        groups=groups, group_names=None if group_names is None else [str(g) for g in group_names],
        labels_as_given=True, notes=notes,
    )


# -- images --------------------------------------------------------------------------------------


def one_channel_if_grey(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both splits with one channel when every decoded image is grey (R = G = B), else as they are:
    image files decode as RGB, and a grey dataset would hand the model three copies of one channel."""
    def grey(x: np.ndarray) -> bool:
        return x.shape[1] == 3 and bool((x[:, 0] == x[:, 1]).all() and (x[:, 1] == x[:, 2]).all())

    if grey(x_train) and grey(x_test):
        return x_train[:, :1].copy(), x_test[:, :1].copy()
    return x_train, x_test


def _images(cfg: DataConfig, rec: Records, idx: np.ndarray) -> np.ndarray:
    if isinstance(rec.x, np.ndarray):
        return resize(rec.x[idx], cfg.image_size)
    return read_images(cfg.name, [rec.x[i] for i in idx], cfg.image_size or DEFAULT_SIZE,
                       missing="fix the path or add the file", broken="replace or remove it")


def resize(x: np.ndarray, size: int | None) -> np.ndarray:
    """uint8 (N, C, H, W) resized to (size, size) (bilinear, antialiased); unchanged when size is None."""
    if size is None or x.shape[2:] == (size, size) or len(x) == 0:
        return np.ascontiguousarray(x)
    t = F.interpolate(torch.from_numpy(x).float(), size=(size, size), mode="bilinear", antialias=True,
                      align_corners=False)
    return t.round().clamp(0, 255).to(torch.uint8).numpy()


def to_nchw(name: str, x: np.ndarray, where: str) -> np.ndarray:
    """Images as uint8 (N, C, H, W) from (N, H, W), (N, H, W, C) or (N, C, H, W), uint8 or floats in [0, 1]."""
    if x.ndim == 3:
        x = x[:, None]
    elif x.ndim == 4 and x.shape[-1] in (1, 3) and x.shape[1] not in (1, 3):
        x = x.transpose(0, 3, 1, 2)
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise DataError(f"{name}: images in {where} have shape {x.shape}; give (N, H, W), (N, H, W, C) or "
                        "(N, C, H, W) with 1 or 3 channels")
    if x.dtype != np.uint8:
        if not np.issubdtype(x.dtype, np.floating) or x.size and (np.nanmin(x) < 0 or np.nanmax(x) > 1):
            raise DataError(f"{name}: images in {where} are {x.dtype}; give uint8 0..255 or floats in [0, 1]")
        x = np.rint(x * 255.0).astype(np.uint8)
    return np.ascontiguousarray(x)


# -- imagefolder ---------------------------------------------------------------------------------


def _has_images(folder: Path) -> bool:
    return any(p.is_file() and p.suffix.lower() in IMG_EXTENSIONS for p in folder.iterdir())


def _class_tree(name: str, folder: Path, skip: str = "") -> list[tuple[Path, str]]:
    """(image path, class name) under folder/CLASS/*, through torchvision's ImageFolder helper."""
    classes = [p.name for p in _folders(folder, skip)]
    if not classes:
        raise DataError(f"{name}: no class folders in '{folder}'; lay images out as CLASS/*.png or CLIENT/CLASS/*.png")
    try:
        items = make_dataset(folder, {c: k for k, c in enumerate(classes)}, extensions=IMG_EXTENSIONS)
    except FileNotFoundError as err:
        # torchvision names the empty class folders; its text stays, with what to do added.
        raise DataError(f"{name}: in '{folder}': {str(err).split('. ')[0]}; add images or remove those folders") \
            from None
    return [(Path(p), classes[c]) for p, c in items]


def _folders(root: Path, skip: str) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name != skip and not p.name.startswith("."))


def _tree_layout(cfg: DataConfig, tops: list[Path]) -> str:
    layout = _param(cfg, "layout", "auto", str)
    if layout not in ("auto", "classes", "clients"):
        raise ConfigError(f"data.params.layout must be auto, classes or clients, got {layout!r}")
    if layout != "auto":
        return layout
    # A client folder holds class folders only; a class folder holds images.
    if tops and all(_folders(t, "") and not _has_images(t) for t in tops):
        return "clients"
    return "classes"


@register_dataset("imagefolder", params=("layout", "test_dir", "split_seed"))
def load_imagefolder(cfg: DataConfig) -> RawDataset:
    """ROOT/CLASS/* or ROOT/CLIENT/CLASS/*, with ROOT/test/CLASS/* as the test split when present."""
    root = resolve_root(cfg, expected="ROOT/CLASS/*.png|jpg or ROOT/CLIENT/CLASS/*, and optionally ROOT/test/CLASS/*")
    test_dir = _param(cfg, "test_dir", "test", str)
    tops = _folders(root, test_dir)
    items, clients = [], None
    if _tree_layout(cfg, tops) == "clients":
        clients = []
        for top in tops:
            found = _class_tree(cfg.name, top)
            items += found
            clients += [top.name] * len(found)
    else:
        items = _class_tree(cfg.name, root, skip=test_dir)
    classes = sorted({c for _, c in items}, key=_natural_key)
    test_items = _class_tree(cfg.name, root / test_dir) if (root / test_dir).is_dir() else []
    all_items = items + test_items
    rec = Records(
        x=[p for p, _ in all_items], labels=[(c,) for _, c in all_items],
        clients=None if clients is None else clients + [""] * len(test_items), trusted=None,
        test=np.arange(len(all_items)) >= len(items) if test_items else None, where=f"'{root}'",
    )
    return assemble(cfg, rec, classes=classes)


# -- table and arrays --------------------------------------------------------------------------


def _one_file(cfg: DataConfig, root: Path, suffixes: tuple[str, ...], what: str) -> Path:
    """data.params.file under root, or the only file there with one of `suffixes`."""
    name = _param(cfg, "file", None, str)
    if name is not None:
        path = root / name
        if not path.is_file():
            raise DataError(f"{cfg.name}: '{path}' not found; set data.params.file to a {what} under data.root")
        return path
    found = sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in suffixes)
    if len(found) != 1:
        raise DataError(f"{cfg.name}: '{root}' holds {len(found)} {what}s ({', '.join(suffixes)}); "
                        "name one with data.params.file")
    return found[0]


def _text(values: Sequence) -> list[str]:
    """Cells as text: missing ones as "", whole floats (a Parquet int column with gaps) as ints."""
    out = []
    for v in values:
        if v is None or isinstance(v, float) and np.isnan(v):
            out.append("")
        elif isinstance(v, float | np.floating) and float(v).is_integer():
            out.append(str(int(v)))
        else:
            out.append(str(v).strip())
    return out


def _read_table(name: str, path: Path) -> pd.DataFrame:
    try:
        if path.suffix.lower() == ".csv":
            return pd.read_csv(path, dtype=str, keep_default_na=False)
        return pd.read_parquet(path)
    except Exception as err:  # pandas and pyarrow raise many kinds for one cause: a malformed file
        raise DataError(f"{name}: cannot read table '{path}' ({type(err).__name__}); write it as CSV or Parquet") \
            from None


def _column(cfg: DataConfig, df: pd.DataFrame, key: str, default: str, where: str) -> list[str] | None:
    """A column's cells as text, or None when it is absent and was not asked for by name."""
    col = _param(cfg, key, default, str)
    if col in df.columns:
        return _text(df[col].tolist())
    if key in cfg.params:
        raise DataError(f"{cfg.name}: {where} has no column '{col}' (data.params.{key}); columns: {list(df.columns)}")
    return None


def _split_mask(name: str, values: Sequence[str] | None, where: str) -> np.ndarray | None:
    if values is None:
        return None
    bad = sorted({v for v in values if v not in ("train", "test")})
    if bad:
        raise DataError(f"{name}: split values {bad[:5]} in {where}; use 'train' or 'test'")
    return np.array([v == "test" for v in values], dtype=bool)


def _pixels(cfg: DataConfig, cells: Sequence, where: str) -> np.ndarray:
    """Square images from pixel cells (space-separated text or lists) of data.params.channels channels."""
    channels = _param(cfg, "channels", 1, int)
    try:
        rows = [np.asarray(c.split() if isinstance(c, str) else c, dtype=np.float64) for c in cells]
        flat = np.stack(rows)
    except (ValueError, TypeError):
        raise DataError(f"{cfg.name}: the pixels in {where} are not numbers of one length per row; fix them") \
            from None
    side = int(round(np.sqrt(flat.shape[1] / channels)))
    if channels not in (1, 3) or side * side * channels != flat.shape[1]:
        raise DataError(f"{cfg.name}: {flat.shape[1]} pixels per row in {where} do not make a square image of "
                        f"{channels} channel(s); set data.params.channels (1 or 3)")
    x = flat.reshape(len(flat), channels, side, side)
    return to_nchw(cfg.name, x.astype(np.uint8) if flat.max(initial=0) > 1 else x, where)


@register_dataset("table", params=("file", "path_column", "pixels_column", "label_column", "client_column",
                                   "trusted_column", "split_column", "label_sep", "multi_label", "classes",
                                   "channels", "split_seed"))
def load_table(cfg: DataConfig) -> RawDataset:
    """A CSV or Parquet table of image paths (or pixels), labels, and optional client/trusted/split columns."""
    root = resolve_root(cfg, expected="a CSV or Parquet table (data.params.file) and the images it names")
    path = _one_file(cfg, root, TABLE_SUFFIXES, "table")
    df, where = _read_table(cfg.name, path), f"'{path.name}'"
    label_col, path_col = _param(cfg, "label_column", "label", str), _param(cfg, "path_column", "path", str)
    pix_col = _param(cfg, "pixels_column", "pixels", str)
    if label_col not in df.columns or path_col not in df.columns and pix_col not in df.columns:
        missing = label_col if label_col not in df.columns else f"{path_col}' or '{pix_col}"
        raise DataError(f"{cfg.name}: table {where} has no column '{missing}' (columns: {list(df.columns)}); "
                        "add it or name it with data.params.label_column / path_column / pixels_column")
    sep = _param(cfg, "label_sep", "|", str)
    raw = _text(df[label_col].tolist())
    multi = _param(cfg, "multi_label", None, bool)
    multi = any(sep in v for v in raw) if multi is None else multi
    labels = [tuple(t for t in (v.split(sep) if multi else [v]) if t) for v in raw]
    if path_col in df.columns:
        x: list[Path] | np.ndarray = [path.parent / p for p in _text(df[path_col].tolist())]
    else:
        x = _pixels(cfg, df[pix_col].tolist(), where)
    rec = Records(
        x=x, labels=labels, clients=_column(cfg, df, "client_column", "client", where),
        trusted=_column(cfg, df, "trusted_column", "trusted", where),
        test=_split_mask(cfg.name, _column(cfg, df, "split_column", "split", where), where), where=where,
    )
    return assemble(cfg, rec, multi=multi)


def _npz(cfg: DataConfig, path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:  # pickled object arrays could run code: refused
            return {k: z[k] for k in z.files}
    except ValueError as err:
        if "pickle" in str(err):
            raise DataError(f"{cfg.name}: '{path}' holds object arrays; save labels as numbers or fixed-width "
                            "strings (np.asarray(labels, dtype=str))") from None
        raise DataError(f"{cfg.name}: cannot read '{path}' ({err}); write it with numpy.savez") from None
    except (OSError, EOFError) as err:
        raise DataError(f"{cfg.name}: cannot read '{path}' ({type(err).__name__}); write it with numpy.savez") \
            from None


def _array_labels(cfg: DataConfig, y: np.ndarray, where: str) -> tuple[list[tuple[str, ...]], bool]:
    if y.ndim == 2:  # (N, C) 0/1: multi-label; class names from data.params.classes or 0..C-1
        names = [str(c) for c in _param(cfg, "classes", None, list) or range(y.shape[1])]
        if len(names) != y.shape[1]:
            raise DataError(f"{cfg.name}: y in {where} has {y.shape[1]} label columns but data.params.classes "
                            f"names {len(names)}; make them agree")
        return [tuple(names[c] for c in np.flatnonzero(row)) for row in y], True
    listed = _param(cfg, "classes", None, list)
    if listed is not None and np.issubdtype(y.dtype, np.integer):
        # Integer ids index data.params.classes; one past its end is a label outside the classes.
        bad = y[(y < 0) | (y >= len(listed))]
        if len(bad):
            raise DataError(f"{cfg.name}: label {int(bad[0])} in {where} is outside the {len(listed)} classes "
                            "of data.params.classes; fix the label or the list")
        return [(str(listed[v]),) for v in y], False
    return [(t,) for t in _text(y.tolist())], False


def _array_trusted(cfg: DataConfig, t: np.ndarray) -> list[str]:
    """Trusted labels as class names ("" where none: -1 or empty); unknown ones are refused later."""
    if not np.issubdtype(t.dtype, np.integer):
        return ["" if v == "-1" else v for v in _text(t.tolist())]
    listed = _param(cfg, "classes", None, list)
    return ["" if v < 0 else str(listed[v]) if listed is not None and v < len(listed) else str(v) for v in t.tolist()]


@register_dataset("arrays", params=("file", "classes", "split_seed"))
def load_arrays(cfg: DataConfig) -> RawDataset:
    """An .npz of x, y and optional client, trusted and split arrays."""
    root = resolve_root(cfg, expected="an .npz file with arrays x and y (client, trusted, split optional)")
    path = _one_file(cfg, root, (".npz",), "npz file")
    arrays, where = _npz(cfg, path), f"'{path.name}'"
    missing = [k for k in ("x", "y") if k not in arrays]
    if missing:
        raise DataError(f"{cfg.name}: {where} has no array {missing[0]!r} (it has {sorted(arrays)}); save x and y")
    x, n = to_nchw(cfg.name, arrays["x"], where), len(arrays["y"])
    for key in ("x", "client", "trusted", "split"):
        if key in arrays and len(arrays[key]) != n:
            raise DataError(f"{cfg.name}: {where} has {len(arrays[key])} {key} entries for {n} labels; "
                            "give one per sample")
    labels, multi = _array_labels(cfg, arrays["y"], where)
    trusted = _array_trusted(cfg, arrays["trusted"]) if "trusted" in arrays else None
    rec = Records(
        x=x, labels=labels, clients=_text(arrays["client"].tolist()) if "client" in arrays else None,
        trusted=trusted, test=_split_mask(cfg.name, _text(arrays["split"].tolist()) if "split" in arrays else None,
                                          where), where=where,
    )
    return assemble(cfg, rec, multi=multi)

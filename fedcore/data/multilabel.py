"""Multi-label image datasets in their official on-disk formats: voc2007, coco, flair.

All read local files under data.root (or an s3:// prefix staged into data.cache_dir);
targets are uint8 (N, C) presence matrices, images RGB resized to data.image_size
(default 64). data.max_train and data.params.max_test cap the image lists *before*
decoding (the same rule as `load_dataset`'s cap). Assumed layouts:

voc2007  data.root = VOCdevkit/VOC2007 (or a folder above it):
         Annotations/<id>.xml, ImageSets/Main/{trainval,test}.txt, JPEGImages/<id>.jpg.
         A label is present when an <object> of that class is annotated; objects marked
         <difficult>1</difficult> count unless data.params.use_difficult is false.
coco     annotations/instances_{train,val}<year>.json with images/ annotations/ categories
         (year: data.params.year, default 2017) and the images in <split><year>/<file_name>.
         Labels = categories sorted by id (80 in the official files). Train = train, test =
         val. Images without any annotation are dropped unless data.params.keep_empty.
flair    Apple's ml-flair release: labels_and_metadata.json (a list of {image_id, user_id,
         labels, fine_grained_labels, partition}) and small_images/<image_id>.jpg. The 17
         coarse labels are the coarse side of label_relationship.txt ('fine -> coarse'
         lines) when present, else every coarse label in the metadata, sorted. Train =
         partition 'train', test = data.params.test_partition ('test'). Flickr users become
         `groups`, so `partition.kind: natural` gives the natural user partition.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.config import DataConfig
from fedcore.data import mosaic, scenes  # noqa: F401  (registers the mosaics; the loader hook imports this)
from fedcore.data.clothing import cap_indices
from fedcore.data.datasets import RawDataset, register_dataset, resolve_root
from fedcore.data.vision import channel_stats, read_images
from fedcore.errors import DataError

DEFAULT_SIZE = 64
VOC_CLASSES = ["aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable",
               "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor"]
VOC_EXPECTED = "VOCdevkit/VOC2007 with Annotations/*.xml, ImageSets/Main/{trainval,test}.txt and JPEGImages/*.jpg"
COCO_EXPECTED = "annotations/instances_{{train,val}}{y}.json plus train{y}/ and val{y}/ image folders"
FLAIR_EXPECTED = "labels_and_metadata.json and small_images/<image_id>.jpg (label_relationship.txt optional)"


# -- images ------------------------------------------------------------------------------


def assemble(cfg: DataConfig, classes: list[str], train: tuple[list[Path], np.ndarray],
             test: tuple[list[Path], np.ndarray], groups: np.ndarray | None = None) -> RawDataset:
    """Cap, decode and wrap (paths, (N, C) labels) splits into a multi-label RawDataset."""
    keep = cap_indices(len(train[0]), cfg.max_train)
    keep_te = cap_indices(len(test[0]), cfg.params.get("max_test"))
    size = cfg.image_size or DEFAULT_SIZE
    x_train = read_images(cfg.name, [train[0][i] for i in keep], size)
    x_test = read_images(cfg.name, [test[0][i] for i in keep_te], size)
    mean, std = channel_stats(x_train)
    return RawDataset(
        name=cfg.name, x_train=x_train, y_train=train[1][keep].astype(np.uint8), x_test=x_test,
        y_test=test[1][keep_te].astype(np.uint8), num_classes=len(classes), task="multi",
        class_names=list(classes), mean=mean, std=std, groups=None if groups is None else groups[keep],
        flip_ok=True,  # natural photos: mirroring keeps every label
    )


def _read_json(name: str, path: Path, expected: str) -> Any:
    if not path.is_file():
        raise DataError(f"{name}: '{path}' not found; data.root must hold {expected}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise DataError(f"{name}: '{path}' is not valid JSON; replace it with the official file") from None


# -- PASCAL VOC 2007 -----------------------------------------------------------------------


def _voc_dir(root: Path) -> Path:
    for cand in (root, root / "VOC2007", root / "VOCdevkit" / "VOC2007"):
        if (cand / "Annotations").is_dir() and (cand / "ImageSets" / "Main").is_dir():
            return cand
    raise DataError(f"voc2007: no Annotations/ and ImageSets/Main/ under '{root}'; data.root must hold {VOC_EXPECTED}")


def voc_labels(path: Path, use_difficult: bool = True) -> np.ndarray:
    """uint8 (20,) presence vector from one VOC annotation XML."""
    try:
        objects = ET.parse(path).getroot().findall("object")
    except FileNotFoundError:
        raise DataError(f"voc2007: annotation '{path}' is missing; copy the full Annotations/ folder") from None
    except ET.ParseError:
        raise DataError(f"voc2007: '{path}' is not valid XML; replace it with the official file") from None
    y = np.zeros(len(VOC_CLASSES), dtype=np.uint8)
    for obj in objects:
        cls = (obj.findtext("name") or "").strip()
        if cls not in VOC_CLASSES:
            raise DataError(f"voc2007: '{path}' names an unknown class '{cls}'; replace it with the official file")
        if use_difficult or (obj.findtext("difficult") or "0").strip() != "1":
            y[VOC_CLASSES.index(cls)] = 1
    return y


def _voc_split(base: Path, split: str, use_difficult: bool) -> tuple[list[Path], np.ndarray]:
    listing = base / "ImageSets" / "Main" / f"{split}.txt"
    if not listing.is_file():
        raise DataError(f"voc2007: '{listing}' not found; data.root must hold {VOC_EXPECTED}")
    ids = [line.split()[0] for line in listing.read_text().splitlines() if line.strip()]
    if not ids:
        raise DataError(f"voc2007: '{listing}' lists no images; replace it with the official file")
    labels = np.stack([voc_labels(base / "Annotations" / f"{i}.xml", use_difficult) for i in ids])
    return [base / "JPEGImages" / f"{i}.jpg" for i in ids], labels


@register_dataset("voc2007", params=("use_difficult", "train_split", "test_split", "max_test"))
def load_voc2007(cfg: DataConfig) -> RawDataset:
    """PASCAL VOC 2007 multi-label classification: trainval (5,011) / test (4,952), 20 labels."""
    base = _voc_dir(resolve_root(cfg, expected=VOC_EXPECTED))
    use_difficult = bool(cfg.params.get("use_difficult", True))
    train = _voc_split(base, cfg.params.get("train_split", "trainval"), use_difficult)
    test = _voc_split(base, cfg.params.get("test_split", "test"), use_difficult)
    return assemble(cfg, VOC_CLASSES, train, test)


# -- MS COCO -----------------------------------------------------------------------------


def coco_split(root: Path, split: str, year: str, keep_empty: bool) -> tuple[list[Path], np.ndarray, list[str]]:
    """Image paths, (N, C) labels and class names from instances_<split><year>.json."""
    path = root / "annotations" / f"instances_{split}{year}.json"
    data = _read_json("coco", path, COCO_EXPECTED.format(y=year))
    try:
        cats = sorted(data["categories"], key=lambda c: c["id"])
        col = {c["id"]: i for i, c in enumerate(cats)}
        row = {img["id"]: i for i, img in enumerate(data["images"])}
        files = [img["file_name"] for img in data["images"]]
        y = np.zeros((len(files), len(cats)), dtype=np.uint8)
        for ann in data["annotations"]:
            y[row[ann["image_id"]], col[ann["category_id"]]] = 1
        names = [str(c["name"]) for c in cats]
    except (KeyError, TypeError) as err:
        raise DataError(f"coco: '{path}' lacks the official fields (images, annotations, categories): "
                        f"{type(err).__name__} {err}; replace it with the official file") from None
    keep = np.arange(len(files)) if keep_empty else np.flatnonzero(y.any(axis=1))
    return [root / f"{split}{year}" / files[i] for i in keep], y[keep], names


@register_dataset("coco", params=("year", "keep_empty", "max_test"))
def load_coco(cfg: DataConfig) -> RawDataset:
    """MS COCO multi-label classification from the instances files: train / val, 80 labels."""
    year = str(cfg.params.get("year", "2017"))
    root = resolve_root(cfg, expected=COCO_EXPECTED.format(y=year))
    keep_empty = bool(cfg.params.get("keep_empty", False))
    tr_paths, tr_y, names = coco_split(root, "train", year, keep_empty)
    te_paths, te_y, te_names = coco_split(root, "val", year, keep_empty)
    if names != te_names:
        raise DataError("coco: the train and val instances files list different categories; use matching files")
    return assemble(cfg, names, (tr_paths, tr_y), (te_paths, te_y))


# -- FLAIR ---------------------------------------------------------------------------------


def flair_classes(root: Path, records: list[dict[str, Any]]) -> list[str]:
    rel = root / "label_relationship.txt"
    if rel.is_file():
        coarse = [line.split("->")[-1].strip() for line in rel.read_text(encoding="utf-8").splitlines()
                  if "->" in line]
        if coarse:
            return sorted(set(coarse))
    return sorted({str(lab) for r in records for lab in r["labels"]})


def _flair_split(root: Path, records: list[dict[str, Any]], part: str, classes: list[str]):
    rows = [r for r in records if r["partition"] == part]
    if not rows:
        raise DataError(f"flair: labels_and_metadata.json has no image in partition '{part}'; "
                        "use the official file (partitions train/val/test)")
    index = {c: i for i, c in enumerate(classes)}
    y = np.zeros((len(rows), len(classes)), dtype=np.uint8)
    for i, r in enumerate(rows):
        for lab in r["labels"]:
            if lab not in index:
                raise DataError(f"flair: image {r['image_id']} has label '{lab}', absent from "
                                "label_relationship.txt; use the official, matching files")
            y[i, index[lab]] = 1
    paths = [root / "small_images" / f"{r['image_id']}.jpg" for r in rows]
    return paths, y, [str(r["user_id"]) for r in rows]


@register_dataset("flair", params=("test_partition", "max_test"))
def load_flair(cfg: DataConfig) -> RawDataset:
    """FLAIR (Song et al., NeurIPS 2022): Flickr photos, 17 coarse labels, real users as groups."""
    root = resolve_root(cfg, expected=FLAIR_EXPECTED)
    records = _read_json("flair", root / "labels_and_metadata.json", FLAIR_EXPECTED)
    try:
        classes = flair_classes(root, records)
        tr_paths, tr_y, users = _flair_split(root, records, "train", classes)
        te_paths, te_y, _ = _flair_split(root, records, str(cfg.params.get("test_partition", "test")), classes)
    except (KeyError, TypeError) as err:
        raise DataError(f"flair: labels_and_metadata.json lacks the official fields (image_id, user_id, labels, "
                        f"partition): {type(err).__name__} {err}; replace it with the official file") from None
    _, groups = np.unique(np.array(users), return_inverse=True)
    return assemble(cfg, classes, (tr_paths, tr_y), (te_paths, te_y), groups=groups.astype(np.int64))

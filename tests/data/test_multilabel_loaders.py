"""voc2007, coco and flair loaders on tiny files written in the official formats."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fedcore.config import DataConfig, PartitionConfig
from fedcore.data.datasets import available_datasets, load_dataset
from fedcore.data.multilabel import VOC_CLASSES
from fedcore.data.partition import partition
from fedcore.errors import DataError
from fedcore.io import storage


def _load(name: str, root: Path | str, **kw):
    return load_dataset(DataConfig(name=name, root=str(root), **kw))


def _jpeg(path: Path, rgb: tuple[int, int, int], size=(40, 30)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, rgb).save(path)


# -- writers for the official formats -----------------------------------------------------

VOC_OBJECTS = {  # id -> [(class, difficult)]
    "000005": [("chair", 0), ("chair", 0), ("diningtable", 1)],
    "000007": [("car", 0)],
    "000009": [("horse", 0), ("person", 0), ("person", 1)],
    "000001": [("dog", 0), ("person", 0)],
    "000002": [("train", 0)],
}


def _voc_xml(img_id: str, objects: list[tuple[str, int]]) -> str:
    objs = "".join(
        f"<object><name>{c}</name><pose>Unspecified</pose><truncated>0</truncated><difficult>{d}</difficult>"
        "<bndbox><xmin>1</xmin><ymin>2</ymin><xmax>20</xmax><ymax>25</ymax></bndbox></object>"
        for c, d in objects
    )
    return (f"<annotation><folder>VOC2007</folder><filename>{img_id}.jpg</filename>"
            "<source><database>The VOC2007 Database</database></source>"
            f"<size><width>40</width><height>30</height><depth>3</depth></size><segmented>0</segmented>{objs}"
            "</annotation>")


def write_voc(root: Path) -> Path:
    base = root / "VOCdevkit" / "VOC2007"
    (base / "Annotations").mkdir(parents=True)
    (base / "ImageSets" / "Main").mkdir(parents=True)
    for i, (img_id, objs) in enumerate(VOC_OBJECTS.items()):
        (base / "Annotations" / f"{img_id}.xml").write_text(_voc_xml(img_id, objs))
        _jpeg(base / "JPEGImages" / f"{img_id}.jpg", (40 * i, 10, 200))
    (base / "ImageSets" / "Main" / "trainval.txt").write_text("000005\n000007\n000009\n")
    (base / "ImageSets" / "Main" / "test.txt").write_text("000001\n000002\n")
    return base


COCO_CATS = [{"supercategory": "animal", "id": 18, "name": "dog"},  # listed out of id order on purpose
             {"supercategory": "person", "id": 1, "name": "person"},
             {"supercategory": "vehicle", "id": 3, "name": "car"}]


def _coco_json(images: dict[int, list[int]], split: str) -> dict:
    imgs = [{"license": 1, "file_name": f"{i:012d}.jpg", "height": 30, "width": 40, "id": i} for i in images]
    anns = [{"segmentation": [[1.0, 2.0, 3.0, 4.0]], "area": 4.0, "iscrowd": 0, "image_id": i, "bbox": [1, 2, 3, 4],
             "category_id": c, "id": 100 * i + k} for i, cats in images.items() for k, c in enumerate(cats)]
    return {"info": {"description": f"tiny {split}"}, "licenses": [], "images": imgs, "annotations": anns,
            "categories": COCO_CATS}


def write_coco(root: Path) -> None:
    splits = {"train": {9: [1, 18, 18], 25: [3], 30: []}, "val": {139: [1, 3], 285: [18]}}
    (root / "annotations").mkdir(parents=True)
    for split, images in splits.items():
        (root / "annotations" / f"instances_{split}2017.json").write_text(json.dumps(_coco_json(images, split)))
        for i in images:
            _jpeg(root / f"{split}2017" / f"{i:012d}.jpg", (i % 255, 50, 90))


FLAIR_RECORDS = [
    ("u1", "101", ["structure", "outdoor"], "train"), ("u1", "102", ["structure"], "train"),
    ("u1", "103", ["food"], "train"), ("u2", "201", ["animal", "plant"], "train"),
    ("u3", "301", ["food", "liquid"], "val"), ("u4", "401", ["animal"], "test"), ("u4", "402", ["outdoor"], "test"),
]
FLAIR_RELATIONSHIP = ["bridge -> structure", "building -> structure", "pizza -> food", "coffee -> liquid",
                      "dog -> animal", "tree -> plant", "street -> outdoor", "car -> vehicle"]


def write_flair(root: Path, relationship: bool = True) -> None:
    records = [{"user_id": u, "image_id": i, "labels": labs, "fine_grained_labels": [f"fine_{x}" for x in labs],
                "partition": p} for u, i, labs, p in FLAIR_RECORDS]
    root.mkdir(parents=True, exist_ok=True)
    (root / "labels_and_metadata.json").write_text(json.dumps(records, indent=4))
    if relationship:
        (root / "label_relationship.txt").write_text("\n".join(FLAIR_RELATIONSHIP) + "\n")
    for k, (_, img_id, _, _) in enumerate(FLAIR_RECORDS):
        _jpeg(root / "small_images" / f"{img_id}.jpg", (30 * k, 200, 30), size=(256, 256))


# -- loading ------------------------------------------------------------------------------


def test_registered():
    assert {"voc2007", "coco", "flair", "digits_mosaic"} <= set(available_datasets())


@pytest.mark.parametrize("sub", ["", "VOCdevkit", "VOCdevkit/VOC2007"])
def test_voc_labels_from_xml(tmp_path: Path, sub: str):
    write_voc(tmp_path)
    ds = _load("voc2007", tmp_path / sub, image_size=16)
    assert ds.task == "multi" and ds.num_classes == 20 and ds.class_names == VOC_CLASSES
    assert ds.x_train.shape == (3, 3, 16, 16) and ds.x_train.dtype == np.uint8
    expect = [{"chair", "diningtable"}, {"car"}, {"horse", "person"}]
    assert [{VOC_CLASSES[c] for c in np.flatnonzero(row)} for row in ds.y_train] == expect
    assert [{VOC_CLASSES[c] for c in np.flatnonzero(row)} for row in ds.y_test] == [{"dog", "person"}, {"train"}]
    assert ds.y_train.dtype == np.uint8 and ds.flip_ok


def test_voc_difficult_objects_can_be_left_out(tmp_path: Path):
    write_voc(tmp_path)
    ds = load_dataset(DataConfig(name="voc2007", root=str(tmp_path), params={"use_difficult": False}))
    assert ds.y_train[0, VOC_CLASSES.index("diningtable")] == 0  # only a difficult instance
    assert ds.y_train[2, VOC_CLASSES.index("person")] == 1  # one easy instance suffices


def test_coco_categories_by_sorted_id_and_empty_images_dropped(tmp_path: Path):
    write_coco(tmp_path)
    ds = _load("coco", tmp_path, image_size=8)
    assert ds.class_names == ["person", "car", "dog"]  # ids 1, 3, 18
    assert ds.y_train.tolist() == [[1, 0, 1], [0, 1, 0]]  # image 30 has no annotation
    assert ds.y_test.tolist() == [[1, 1, 0], [0, 0, 1]]
    assert ds.x_test.shape == (2, 3, 8, 8)
    # Images stay aligned with their labels (red channel = image id, up to JPEG error).
    red = [float(x[0].mean()) for x in ds.x_train]
    assert abs(red[0] - 9) < 4 and abs(red[1] - 25) < 4
    kept = load_dataset(DataConfig(name="coco", root=str(tmp_path), params={"keep_empty": True}))
    assert kept.y_train.tolist()[-1] == [0, 0, 0] and kept.x_train.shape[-1] == 64  # default size


@pytest.mark.parametrize("relationship", [True, False])
def test_flair_labels_users_and_natural_partition(tmp_path: Path, relationship: bool):
    write_flair(tmp_path, relationship)
    ds = _load("flair", tmp_path, image_size=32)
    if relationship:  # the coarse side of label_relationship.txt, sorted, including unused 'vehicle'
        assert ds.class_names == ["animal", "food", "liquid", "outdoor", "plant", "structure", "vehicle"]
    else:
        assert ds.class_names == ["animal", "food", "liquid", "outdoor", "plant", "structure"]
    idx = {c: i for i, c in enumerate(ds.class_names)}
    assert ds.y_train.shape == (4, len(idx)) and ds.y_test.shape == (2, len(idx))  # val is not used
    assert np.flatnonzero(ds.y_train[0]).tolist() == sorted([idx["structure"], idx["outdoor"]])
    assert ds.groups.tolist() == [0, 0, 0, 1]
    parts = partition(ds.y_train, PartitionConfig(kind="natural", num_clients=2), ds.num_classes, 0, ds.groups)
    assert [p.tolist() for p in parts] == [[0, 1, 2], [3]]
    val = load_dataset(DataConfig(name="flair", root=str(tmp_path), params={"test_partition": "val"}))
    assert val.y_test.sum() == 2


def test_caps_apply_before_decoding(tmp_path: Path):
    write_flair(tmp_path)
    ds = load_dataset(DataConfig(name="flair", root=str(tmp_path), max_train=2, params={"max_test": 1}))
    assert len(ds.y_train) == 2 == len(ds.groups) and len(ds.y_test) == 1


# -- user errors --------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), [
    ("voc2007", "Annotations/"), ("coco", "instances_train2017.json"), ("flair", "labels_and_metadata.json"),
])
def test_missing_files_are_named(tmp_path: Path, name: str, expected: str):
    with pytest.raises(DataError, match=expected):
        _load(name, tmp_path)
    with pytest.raises(DataError, match="needs data.root"):
        load_dataset(DataConfig(name=name))


def test_malformed_files_are_named(tmp_path: Path):
    base = write_voc(tmp_path / "voc")
    (base / "Annotations" / "000007.xml").write_text("<annotation><object>")
    with pytest.raises(DataError, match="000007.xml' is not valid XML"):
        _load("voc2007", tmp_path / "voc")
    (base / "Annotations" / "000007.xml").write_text(_voc_xml("000007", [("unicorn", 0)]))
    with pytest.raises(DataError, match="unknown class 'unicorn'"):
        _load("voc2007", tmp_path / "voc")
    write_coco(tmp_path / "coco")
    (tmp_path / "coco" / "annotations" / "instances_val2017.json").write_text('{"images": [')
    with pytest.raises(DataError, match="instances_val2017.json' is not valid JSON"):
        _load("coco", tmp_path / "coco")
    (tmp_path / "coco" / "annotations" / "instances_val2017.json").write_text('{"images": []}')
    with pytest.raises(DataError, match="lacks the official fields"):
        _load("coco", tmp_path / "coco")


def test_missing_and_truncated_images_are_named(tmp_path: Path):
    write_flair(tmp_path)
    (tmp_path / "small_images" / "102.jpg").unlink()
    with pytest.raises(DataError, match=r"image '.*small_images/102.jpg' is missing"):
        _load("flair", tmp_path)
    (tmp_path / "small_images" / "102.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    with pytest.raises(DataError, match=r"small_images/102.jpg' is truncated"):
        _load("flair", tmp_path)


def test_flair_label_outside_the_relationship_file(tmp_path: Path):
    write_flair(tmp_path)
    (tmp_path / "label_relationship.txt").write_text("dog -> animal\n")
    with pytest.raises(DataError, match="absent from label_relationship.txt"):
        _load("flair", tmp_path)


# -- an s3:// root, staged through the real S3 server -------------------------------------


@pytest.mark.parametrize(("name", "write"), [("voc2007", write_voc), ("coco", write_coco), ("flair", write_flair)])
def test_s3_root_is_staged_and_loads_like_local(s3_bucket: str, tmp_path: Path, name: str, write):
    write(tmp_path / "src")
    storage.upload_dir(tmp_path / "src", f"s3://{s3_bucket}/datasets/{name}")
    remote = _load(name, f"s3://{s3_bucket}/datasets/{name}", cache_dir=str(tmp_path / "cache"), image_size=16)
    local = _load(name, tmp_path / "src", image_size=16)
    np.testing.assert_array_equal(remote.x_train, local.x_train)
    np.testing.assert_array_equal(remote.y_test, local.y_test)

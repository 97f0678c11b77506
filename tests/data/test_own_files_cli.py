"""The user's own federation through `fedcore` itself: a tiny run per source, `fedcore data inspect`, and bad
data as one line on stderr, exit code 2 and nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from fedcore import cli
from tests.data.test_own_files import CLASSES, CLIENTS, png, shade, table_rows, write_npz, write_table, write_tree


def config(tmp_path: Path, name: str, root: Path, **data_params) -> Path:
    cfg = {"data": {"name": name, "root": str(root), "image_size": 8, "params": data_params},
           "partition": {"kind": "natural", "num_clients": 3, "min_size": 2}, "noise": {"type": "real"},
           "model": {"name": "mlp"}, "train": {"rounds": 2, "local_epochs": 1, "batch_size": 8, "lr": 0.05},
           "method": {"name": "fedavg"}}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


SOURCES = {
    "imagefolder": lambda root: write_tree(root),
    "table": lambda root: write_table(root),
    "arrays": lambda root: write_npz(root, split=np.where(np.arange(36) >= 30, "test", "train")),
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_tiny_run_on_each_source(tmp_path, name):
    root = SOURCES[name](tmp_path / "data")
    out = tmp_path / "run"
    cli.main(["run", str(config(tmp_path, name, root)), "--out", str(out), "--no-progress"])
    metrics = json.loads((out / "metrics.json").read_text())
    assert 0.0 <= metrics["summary"]["final/acc"] <= 1.0
    assert metrics["rounds"] == 2 and not any(k.startswith(("detect/", "noise/")) for k in metrics["summary"])
    assert "federation" in json.loads((out / "scene.json").read_text())


def test_a_multi_label_table_runs_fedharmony(tmp_path):
    df = table_rows(tmp_path / "data").drop(columns=["trusted"])
    df["label"] = [lab if i % 2 else f"{lab}|emu" for i, lab in enumerate(df["label"])]
    cfg = config(tmp_path, "table", write_table(tmp_path / "data", df=df))
    out = tmp_path / "run"
    cli.main(["run", str(cfg), "--out", str(out), "--no-progress", "--set", "noise.type=none",
              "--set", "method.name=fedharmony"])
    summary = json.loads((out / "metrics.json").read_text())["summary"]
    assert 0.0 <= summary["final/mAP"] <= 1.0


def test_inspect_prints_the_federation_and_writes_only_the_figure(tmp_path, capsys):
    root = write_table(tmp_path / "data")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    cli.main(["data", "inspect", str(config(tmp_path, "table", root)), "--out", str(tmp_path / "look")])
    text = capsys.readouterr().out
    for client in CLIENTS:
        assert client in text
    assert "labels: cat 21, dog 15, emu 9" in text and "agree with 50.0% of them" in text
    assert [p.name for p in (tmp_path / "look").iterdir()] == ["clients_by_class.png"]
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_prepare_stores_the_summary_in_the_artifact(tmp_path):
    root = write_tree(tmp_path / "data")
    cli.main(["data", "prepare", str(config(tmp_path, "imagefolder", root)), "--out", str(tmp_path / "art")])
    scene = json.loads((tmp_path / "art" / "scene.json").read_text())
    assert [c["client"] for c in scene["federation"]["clients"]] == ["carol", "bob", "alice"]
    assert scene["federation"]["trusted_agreement"] is None


# -- bad data -------------------------------------------------------------------------------------


def _unreadable(root: Path) -> dict:
    write_tree(root)
    (root / "bob" / "dog" / "2.png").write_bytes(b"not a png")
    return {}


def _empty_class(root: Path) -> dict:
    write_tree(root)
    shutil.rmtree(root / "alice" / "emu")
    (root / "alice" / "emu").mkdir()
    return {}


def _outside(root: Path) -> dict:
    write_npz(root, y=np.arange(36) % 4)  # id 3 with three classes named
    return {"classes": list(CLASSES)}


def _trusted_unknown(root: Path) -> dict:
    df = table_rows(root)
    df.loc[4, "trusted"] = "yak"
    write_table(root, df=df)
    return {}


def _small_client(root: Path) -> dict:
    df = table_rows(root)
    df.loc[0, "client"] = "dora"  # one sample: below partition.min_size (2) once dora is among 3 clients
    df = df[df["client"] != "carol"]
    write_table(root, df=df)
    return {}


def _test_class_unseen(root: Path) -> dict:
    write_tree(root)
    png(root / "test" / "yak" / "0.png", shade(1), 8)
    return {}


def _no_label(root: Path) -> dict:
    write_table(root, df=table_rows(root).drop(columns=["label"]))
    return {}


def _no_path(root: Path) -> dict:
    write_table(root, df=table_rows(root).rename(columns={"path": "file"}))
    return {}


BAD = {
    "unreadable image": ("imagefolder", _unreadable, "dog/2.png' is truncated or not an image"),
    "empty class folder": ("imagefolder", _empty_class, "Found no valid file for the classes emu"),
    "label outside the classes": ("arrays", _outside, "label 3 in 'data.npz' is outside the 3 classes"),
    "unknown trusted label": ("table", _trusted_unknown, "trusted label 'yak' (sample 4"),
    "client below min_size": ("table", _small_client, "client 'dora' of table has 1 samples, fewer than"),
    "test class training lacks": ("imagefolder", _test_class_unseen, "test split has class 'yak'"),
    "no label column": ("table", _no_label, "has no column 'label'"),
    "no path column": ("table", _no_path, "has no column 'path' or 'pixels'"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_data_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, case):
    name, write, expected = BAD[case]
    root = tmp_path / "data"
    root.mkdir()
    params = write(root)
    cfg = config(tmp_path, name, root, **params)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["data", "prepare", str(cfg), "--out", str(tmp_path / "art")])
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in captured.err
    assert expected in err
    assert not (tmp_path / "art").exists()


def test_a_pixel_table_with_too_few_columns_says_which(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    write_table(tmp_path / "d", df=pd.DataFrame({"pixels": ["1 2 3"] * 4, "label": ["a", "b"] * 2}))
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["data", "inspect", str(config(tmp_path, "table", tmp_path / "d")), "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2 and "do not make a square image" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()

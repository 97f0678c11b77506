"""The pipelines on the user's own federation from an s3:// prefix: the local experiment pipeline trains a
folder tree, a table and arrays uploaded there, and a run-time snapshot for a dataset that reads no files is
refused by the first task that gets it. (A retrain on the newest s3:// snapshot of a user's table runs every
retrain component in tests/components/test_components.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedcore.cli import main
from fedcore.data.federated import FederatedDataset
from fedcore.errors import ConfigError
from fedcore.io import storage
from fedcore.pipeline import ops
from fedcore.pipeline.inputs import RunInputs
from fedcore.pipeline.plan import config_input
from fedcore.registries import config_from_dict
from tests.components.test_components import tiny_config
from tests.data.test_own_files import CLIENTS, write_npz, write_table, write_tree

# data.name -> (writes the source into a folder, the test split's size: its own, or None when held out)
SOURCES = {"table": (write_table, 9), "imagefolder": (write_tree, 6), "arrays": (write_npz, None)}


def own_config(tmp_path: Path, root: str, name: str = "table") -> dict:
    """The user's files at `root` (their clients, labels as given), 2 rounds."""
    return {"data": {"name": name, "root": root, "image_size": 8, "cache_dir": str(tmp_path / "cache")},
            "partition": {"kind": "natural", "num_clients": 3, "min_size": 2}, "noise": {"type": "real"},
            "model": {"name": "mlp"}, "method": {"name": "fedavg"},
            "train": {"rounds": 2, "local_epochs": 1, "batch_size": 8, "lr": 0.05, "device": "cpu"}}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_the_local_experiment_pipeline_trains_each_source_from_an_s3_prefix(name, s3_bucket, tmp_path, capsys):
    write, num_test = SOURCES[name]
    root = f"s3://{s3_bucket}/{name}"
    storage.upload_dir(write(tmp_path / "src"), root)
    config = tmp_path / "mine.yaml"
    config.write_text(yaml.safe_dump(own_config(tmp_path, root, name)))
    out = tmp_path / "run"
    main(["pipeline", "run", "experiment", str(config), "--local", "--out", str(out), "--no-tracking"])
    printed = capsys.readouterr().out
    assert "fedavg-train: success" in printed and "fedavg-evaluate: success" in printed
    fed = FederatedDataset.load(next(out.glob("kfp/**/prepare-data/dataset")))
    assert sorted(fed.meta["client_names"]) == list(CLIENTS)
    assert len(fed.y_test) == num_test if num_test else any("held out" in n for n in fed.meta["notes"])
    (record,) = [json.loads(p.read_text()) for p in out.glob("kfp/**/record.json")]
    assert record["data_sha256"] == fed.sha256 and 0.0 <= record["summary"]["final/acc"] <= 1.0


def test_a_run_time_snapshot_for_a_bundled_dataset_is_refused_by_the_task(tmp_path):
    inp = RunInputs(config_input(config_from_dict(tiny_config(tmp_path))), data_root="s3://b/snapshots/2024-02-01")
    with pytest.raises(ConfigError, match="dataset 'digits' is bundled and reads no files"):
        ops.prepare(inp, tmp_path / "data", tmp_path / "report")
    assert not (tmp_path / "data").exists() and not (tmp_path / "report").exists()

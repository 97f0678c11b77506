"""`fedcore bench` on the user's own federation, once per source (a folder tree, a table, arrays): a tiny grid
whose scene is the user's data (data.name + data.root, natural clients, labels as given), then
`fedcore run BASE --sweep OUT/SCENE/tuned_sweep.yaml` at the reporting seed repeats the chosen row's
run to the digit, and data without a test split is said to be so in one printed line and in the table."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml

from fedcore import cli
from tests.data.test_own_files import write_npz, write_table, write_tree
from tests.data.test_own_files_cli import config

SEED = 1  # the reporting seed: not the config's own (0), so the run must be told it as the bench was
SCENE = "mine"
# The arrays carry no split: their test samples are held out of the labels as given (files.HELD_OUT_NOTE).
SOURCES = {
    "imagefolder": lambda root: write_tree(root),
    "table": lambda root: write_table(root),
    "arrays": lambda root: write_npz(root),
}
HELD_OUT = {"arrays"}


@dataclass(frozen=True)
class Bench:
    name: str
    config: Path  # the user's config: their data, natural clients, noise.type real
    grid: Path
    out: Path


def write_grid(tmp: Path, cfg: Path) -> Path:
    grid = {"scenes": {SCENE: {"config": str(cfg), "set": ["train.device=cpu", "tracking.backend=none"]}},
            "methods": ["fedavg", "fedprox"], "trials": 2, "seeds": [SEED]}
    path = tmp / "grid.yaml"
    path.write_text(yaml.safe_dump(grid))
    return path


@pytest.fixture(scope="module", params=sorted(SOURCES))
def own_bench(request, tmp_path_factory) -> Bench:
    name = request.param
    tmp = tmp_path_factory.mktemp(f"bench-{name}")
    cfg = config(tmp, name, SOURCES[name](tmp / "data"))
    grid = write_grid(tmp, cfg)
    cli.main(["bench", str(grid), "--out", str(tmp / "out"), "--no-progress"])
    return Bench(name, cfg, grid, tmp / "out")


def _scene(b: Bench) -> dict:
    return json.loads((b.out / "bench.json").read_text())["scenes"][SCENE]


def test_the_bench_chooses_among_rows_trained_on_the_users_federation(own_bench):
    scene = _scene(own_bench)
    assert scene["choice"] in ("fedavg", "fedprox") and scene["choice_setting"] in ("default", "tuned")
    assert {(r["method"], r["setting"], r["seed"]) for r in scene["rows"]} == {
        (m, s, SEED) for m in ("fedavg", "fedprox") for s in ("default", "tuned")}
    for r in scene["rows"]:
        cfg = yaml.safe_load((Path(r["run"]) / "config.yaml").read_text())
        assert cfg["data"]["name"] == own_bench.name and cfg["data"]["root"] == str(own_bench.config.parent / "data")
        assert (cfg["partition"]["kind"], cfg["noise"]["type"], cfg["seed"]) == ("natural", "real", SEED)
        clients = json.loads((Path(r["run"]) / "scene.json").read_text())["federation"]["clients"]
        assert {c["client"] for c in clients} == {"alice", "bob", "carol"}  # the user's own clients
    federation = yaml.safe_load(Path(scene["sweep"]).read_text())["scene"]["federation"]
    assert (federation["data.name"], federation["partition.kind"], federation["noise.type"]) == (
        own_bench.name, "natural", "real")


def test_fedcore_run_with_the_sweep_file_repeats_the_chosen_row_to_the_digit(own_bench, tmp_path):
    scene = _scene(own_bench)
    row = own_bench.out / SCENE / scene["choice"] / scene["choice_setting"] / f"s{SEED}"
    out = tmp_path / "run"
    # A user's shell runs torch on its default pool, not the one thread tests pin (tests/conftest.py); the
    # autouse fixture there pins it back for the next test.
    torch.set_num_threads(2)
    cli.main(["run", str(own_bench.config), "--sweep", scene["sweep"], "--out", str(out), "--no-progress",
              "--set", f"seed={SEED}"])
    mine, bench = (json.loads((d / "metrics.json").read_text()) for d in (out, row))
    # The run built its data in-process (no artifact sha) and its config names the one thread the bench's
    # runner pinned each job to (its config left it unset): every number is the row's.
    differ = {k for k in mine.keys() | bench.keys() if mine.get(k) != bench.get(k)}
    assert differ <= {"data_sha256", "config_hash"}
    assert mine["summary"]["final/acc"] == bench["summary"]["final/acc"] and mine["rounds"] == 2
    assert (out / "history.csv").read_text() == (row / "history.csv").read_text()
    cfg, cfg_row = (yaml.safe_load((d / "config.yaml").read_text()) for d in (out, row))
    assert cfg["train"].pop("threads") == 1 and cfg_row["train"].pop("threads") is None
    assert cfg == cfg_row


def test_a_held_out_test_split_is_said_in_one_line_and_in_the_table(own_bench, capsys):
    capsys.readouterr()
    cli.main(["bench", str(own_bench.grid), "--out", str(own_bench.out), "--no-progress"])  # all done: writes
    said = [line for line in capsys.readouterr().out.splitlines() if "as noisy as training's" in line]
    table = (own_bench.out / SCENE / "table.md").read_text()
    if own_bench.name not in HELD_OUT:
        assert said == [] and "Caveat" not in table and _scene(own_bench)["test_notes"] == []
        return
    assert len(said) == 1 and said[0].startswith(f"{SCENE}: caveat from the data: no test split in the data: 9 ")
    caveat = [line for line in table.splitlines() if line.startswith("Caveat (the data): no test split")]
    assert len(caveat) == 1 and "their labels are as noisy as training's" in caveat[0]
    assert table.index(caveat[0]) < table.index("| method |")  # read before any test column


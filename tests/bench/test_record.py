"""A grid in parts: `fedcore bench GRID --scenes` runs some of its scenes, and `fedcore bench-record`
joins the parts' finished scenes into one bench.json with paths relative to a bench dir (the form
docs/results/bench/ keeps), refusing parts of other grids, a scene twice and a partial scene."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fedcore import cli
from fedcore.bench.grid import load_grid
from fedcore.bench.record import join_records
from fedcore.errors import ConfigError
from fedcore.tracking import git_commit

ROOT = Path(__file__).resolve().parents[2]
RECORDS = sorted((ROOT / "docs/results/bench").glob("*.json"))


def _grid(tmp_path: Path) -> Path:
    """experiments/grids/tiny.yaml's scene twice (two shares of noisy clients), FedAvg alone, one trial."""
    tiny = yaml.safe_load((ROOT / "experiments/grids/tiny.yaml").read_text())
    base = tiny["scenes"]["quickstart-tiny"]
    base["config"] = str(ROOT / base["config"])
    grid = {**tiny, "methods": ["fedavg"], "trials": 1,
            "scenes": {"low": base, "high": {**base, "set": [*base["set"], "noise.noisy_client_fraction=0.3"]}}}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(grid, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(grid, OUT of scene 'low', OUT of scene 'high'): the grid run in two parts."""
    tmp = tmp_path_factory.mktemp("parts")
    grid = _grid(tmp)
    for scene in ("low", "high"):
        cli.main(["bench", str(grid), "--scenes", scene, "--out", str(tmp / scene), "--no-progress"])
    return grid, tmp / "low", tmp / "high"


def test_scenes_narrow_a_grid_in_the_order_given_and_refuse_an_unknown_name(tmp_path):
    grid = _grid(tmp_path)
    assert list(load_grid(grid, scenes=["high", "low"]).scenes) == ["high", "low"]
    assert list(load_grid(grid, scenes=["high"]).scenes) == ["high"]
    with pytest.raises(ConfigError, match="no scene 'mid'; its scenes: low, high"):
        load_grid(grid, scenes=["mid"])
    with pytest.raises(ConfigError, match="twice"):
        load_grid(grid, scenes=["low", "low"])


def test_each_part_runs_only_its_scene(parts):
    _, low, high = parts
    assert list(json.loads((low / "bench.json").read_text())["scenes"]) == ["low"]
    assert list(json.loads((high / "bench.json").read_text())["scenes"]) == ["high"]
    assert not (low / "high").exists() and not (high / "low").exists()


def test_the_record_holds_both_parts_with_paths_under_a_bench_dir(parts, tmp_path, capsys):
    _, low, high = parts
    rec = tmp_path / "rec.json"
    cli.main(["bench-record", str(low), str(high), "--out", str(rec)])
    joined = json.loads(rec.read_text())
    assert "from" in capsys.readouterr().out
    assert list(joined["scenes"]) == ["low", "high"]
    assert joined["grid"] == json.loads((low / "bench.json").read_text())["grid"]
    for name, src in (("low", low), ("high", high)):
        part = json.loads((src / "bench.json").read_text())["scenes"][name]
        scene = joined["scenes"][name]
        # The same rows, choice and tunes; only the paths lose OUT's prefix, and each still names its run.
        assert {k: v for k, v in scene.items() if k not in ("rows", "sweep", "report")} == \
            {k: v for k, v in part.items() if k not in ("rows", "sweep", "report")}
        for got, ran in zip(scene["rows"], part["rows"], strict=True):
            assert {**got, "run": ran["run"]} == ran
            assert (src / got["run"] / "metrics.json").is_file()
            assert got["run"] == f"{name}/{got['method']}/{got['setting']}/s{got['seed']}"
        assert (scene["sweep"], scene["report"]) == (f"{name}/tuned_sweep.yaml", f"{name}/report/report.md")
    # bench-table reads the record as it reads the parts.
    cli.main(["bench-table", str(rec)])
    from_record = capsys.readouterr().out
    cli.main(["bench-table", str(low), str(high)])
    assert capsys.readouterr().out == from_record


def test_a_record_joins_a_later_part_and_can_be_rewritten_in_place(parts, tmp_path):
    _, low, high = parts
    rec = tmp_path / "rec.json"
    cli.main(["bench-record", str(low), "--out", str(rec)])
    cli.main(["bench-record", str(rec), str(high), "--out", str(rec)])
    both = tmp_path / "both.json"
    cli.main(["bench-record", str(low), str(high), "--out", str(both)])
    assert rec.read_text() == both.read_text()
    # The OUT a record was taken from holds the recorded scene too: the same results twice are one scene.
    cli.main(["bench-record", str(low), "--out", str(rec)])
    cli.main(["bench-record", str(rec), str(low), str(high), "--out", str(rec)])
    assert rec.read_text() == both.read_text()


def test_each_scene_names_the_commit_that_wrote_it_and_a_later_commit_alone_is_the_same_results(parts, tmp_path):
    _, low, _ = parts
    scene = json.loads((low / "bench.json").read_text())["scenes"]["low"]
    assert scene["commit"] == git_commit() and scene["commit"] != "unknown"
    later = json.loads((low / "bench.json").read_text())
    later["scenes"]["low"]["commit"] = "0" * 40  # the same OUT, bench.json rewritten by later code
    (tmp_path / "later.json").write_text(json.dumps(later))
    joined, origin = join_records([low, tmp_path / "later.json"])
    assert joined["scenes"]["low"]["commit"] == scene["commit"] and origin["low"] == low / "bench.json"


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.name)
def test_the_shipped_records_are_what_bench_record_writes_from_them(record):
    joined, _ = join_records([record])
    assert joined == json.loads(record.read_text())


def test_another_grid_a_scene_twice_with_other_results_and_a_partial_scene_are_refused(parts, tmp_path, capsys):
    grid, low, high = parts
    changed = json.loads((low / "bench.json").read_text())
    changed["scenes"]["low"]["rows"][0]["acc_last10"] += 0.01  # the scene again, with other results
    (tmp_path / "changed.json").write_text(json.dumps(changed))
    with pytest.raises(ConfigError, match="scene 'low' is in both .* with different results"):
        join_records([low, tmp_path / "changed.json"])
    other = tmp_path / "other"
    cli.main(["bench", str(grid), "--scenes", "high", "--trials", "2", "--out", str(other), "--no-progress"])
    with pytest.raises(ConfigError, match=r"ran another grid .*\(its trials differ\)"):
        join_records([low, other])
    partial = json.loads((high / "bench.json").read_text())
    partial["scenes"]["high"]["still_to_run"] = {"tune_trials": 1, "runs": 2}
    (tmp_path / "partial.json").write_text(json.dumps(partial))
    with pytest.raises(ConfigError, match="'high' .* is partial \\(1 tune trials and 2 runs still to run\\)"):
        join_records([low, tmp_path / "partial.json"])
    assert list(join_records([low, tmp_path / "partial.json"], scenes=["low"])[0]["scenes"]) == ["low"]
    with pytest.raises(ConfigError, match="no scene 'mid'"):
        join_records([low, high], scenes=["mid"])
    # On the command line: exit code 2, one line, and an existing record left as it was.
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        cli.main(["bench-record", str(low), str(other), "--out", str(kept)])
    assert exit_.value.code == 2 and kept.read_text() == "{}"
    assert len(capsys.readouterr().err.strip().splitlines()) == 1

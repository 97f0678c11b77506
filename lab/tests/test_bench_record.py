"""lab/bench_record.py joins the finished scenes of a grid's parts (`fedcore bench GRID --scenes`) into
one bench.json with paths relative to a bench dir (the form lab/records/ keeps), refusing parts of
other grids, a scene twice with other results, a partial scene and a scene that names no commit; the
shipped records are what it writes from them, and each names the commit that produced it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedcore import cli
from fedcore.errors import ConfigError
from fedcore.tracking import git_commit
from lab.bench_record import SHA, join_records, main
from tests.bench.test_bench_parts import run_in_parts

ROOT = Path(__file__).resolve().parents[2]
RECORDS = sorted((ROOT / "lab/records").glob("*.json"))
CHECKED_IN = ("checked in: this scene predates bench.json's commit (58dad27); the code that ran it is this "
              "commit or an ancestor")


@pytest.fixture(scope="module")
def parts(tmp_path_factory) -> tuple[Path, Path, Path]:
    """The grid run in two parts, as the product's test of `--scenes` runs it."""
    return run_in_parts(tmp_path_factory.mktemp("parts"))


def test_the_record_holds_both_parts_with_paths_under_a_bench_dir(parts, tmp_path, capsys):
    _, low, high = parts
    rec = tmp_path / "rec.json"
    assert main([str(low), str(high), "--out", str(rec)]) == 0
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
    main([str(low), "--out", str(rec)])
    main([str(rec), str(high), "--out", str(rec)])
    both = tmp_path / "both.json"
    main([str(low), str(high), "--out", str(both)])
    assert rec.read_text() == both.read_text()
    # The OUT a record was taken from holds the recorded scene too: the same results twice are one scene.
    main([str(low), "--out", str(rec)])
    main([str(rec), str(low), str(high), "--out", str(rec)])
    assert rec.read_text() == both.read_text()


def test_a_later_commit_alone_is_the_same_results_and_a_scene_without_one_is_refused(parts, tmp_path, capsys):
    _, low, _ = parts
    scene = json.loads((low / "bench.json").read_text())["scenes"]["low"]
    assert scene["commit"] == git_commit()
    later = json.loads((low / "bench.json").read_text())
    later["scenes"]["low"]["commit"] = "0" * 40  # the same OUT, bench.json rewritten by later code
    (tmp_path / "later.json").write_text(json.dumps(later))
    joined, origin = join_records([low, tmp_path / "later.json"])
    assert joined["scenes"]["low"]["commit"] == scene["commit"] and origin["low"] == low / "bench.json"
    # bench.json written outside a git checkout says "unknown": such a scene cannot be traced to its code.
    later["scenes"]["low"]["commit"] = "unknown"
    (tmp_path / "nogit.json").write_text(json.dumps(later))
    with pytest.raises(ConfigError, match="scene 'low' in .* names no commit \\('unknown'\\)"):
        join_records([tmp_path / "nogit.json"])
    del later["scenes"]["low"]["commit"]
    (tmp_path / "nogit.json").write_text(json.dumps(later))
    assert main([str(tmp_path / "nogit.json"), "--out", str(tmp_path / "rec.json")]) == 2
    assert "names no commit ('none')" in capsys.readouterr().err and not (tmp_path / "rec.json").exists()


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.name)
def test_the_shipped_records_are_what_bench_record_writes_from_them(record):
    joined, _ = join_records([record])
    assert joined == json.loads(record.read_text())


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.name)
def test_every_scene_of_a_shipped_record_names_the_commit_that_produced_it(record):
    """A scene from before bench.json named its commit carries the one that checked it in, and says so."""
    for name, scene in json.loads(record.read_text())["scenes"].items():
        assert SHA.fullmatch(scene.get("commit", "")), f"{record.name}: scene '{name}' names no commit"
        assert scene.get("commit_note") in (None, CHECKED_IN), f"{record.name}: scene '{name}'"


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
    assert main([str(low), str(other), "--out", str(kept)]) == 2
    assert kept.read_text() == "{}"
    assert len(capsys.readouterr().err.strip().splitlines()) == 1

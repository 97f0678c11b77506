"""`fedcore bench` end to end on configs/grids/tiny.yaml (digits, 2 methods, 2 trials, 1 seed,
3 rounds): tunes, default and tuned runs on one artifact per seed, bench.json, the sweep file and
the report; a rerun skips what is done; the choice survives shuffled test numbers and swapped test labels."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from fedcore import cli
from fedcore.bench.choice import choose
from fedcore.bench.grid import load_grid
from fedcore.bench.results import run_row, write_results
from fedcore.registries import load_config

ROOT = Path(__file__).resolve().parents[2]
GRID = ROOT / "configs/grids/tiny.yaml"
GRID_CONFIG = ROOT / "configs/quickstart.yaml"  # tiny.yaml's scene's config


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bench") / "out"
    cli.main(["bench", str(GRID), "--out", str(out), "--no-progress"])
    return out


def _metrics(run: Path) -> dict:
    return json.loads((run / "metrics.json").read_text())


def test_every_method_is_tuned_with_the_same_budget_and_runs_both_settings_on_one_artifact(bench):
    scene = bench / "quickstart-tiny"
    for m in ("fedavg", "fedprox"):
        tune = json.loads((scene / m / "tune" / "tune.json").read_text())
        assert (tune["n_trials"], tune["seed"], tune["objective"]) == (2, 100, "final/val_acc_last10")
        assert tune["method"] == m
    runs = [scene / m / s / "s0" for m in ("fedavg", "fedprox") for s in ("default", "tuned")]
    shas = {_metrics(r)["data_sha256"] for r in runs}
    assert len(shas) == 1 and {_metrics(r)["seed"] for r in runs} == {0}
    manifest = json.loads((scene / "data-s0" / "manifest.json").read_text())
    assert manifest["files"]["data.pt"] in shas  # the shared artifact, not one built per run
    # The tune trained on the tuning seed's own artifact, never the reporting seed's.
    assert (scene / "data-s100" / "manifest.json").is_file()
    import yaml

    best = yaml.safe_load((scene / "fedprox" / "tuned" / "s0" / "config.yaml").read_text())
    tuned = json.loads((scene / "fedprox" / "tune" / "tune.json").read_text())["best_params"]
    assert best["method"]["params"]["mu"] == tuned["method.params.mu"] and best["train"]["lr"] == tuned["train.lr"]


def test_bench_json_holds_the_choice_rows_and_tuned_params(bench):
    from fedcore.pipeline.plan import load_sweep_spec

    result = json.loads((bench / "bench.json").read_text())
    scene = result["scenes"]["quickstart-tiny"]
    assert {(r["method"], r["setting"], r["seed"]) for r in scene["rows"]} == {
        (m, s, 0) for m in ("fedavg", "fedprox") for s in ("default", "tuned")}
    for r in scene["rows"]:
        assert all(isinstance(r[k], float) for k in ("val_acc_last10", "acc_last10", "acc_best", "acc_at_val_best"))
    want = choose(scene["rows"], [0])
    assert (scene["choice"], scene["runner_up"], scene["margin"]) == (want["choice"], want["runner_up"],
                                                                       want["margin"])
    assert scene["choice"] in ("fedavg", "fedprox") and scene["margin"] >= 0
    # The choice is a method at a setting, among both settings of every method.
    assert scene["among"] == ["default", "tuned"] and scene["choice_setting"] in ("default", "tuned")
    assert list(scene["means"]) == [f"{scene['choice']} ({scene['choice_setting']})", *list(scene["means"])[1:]]
    assert len(scene["means"]) == 4 and scene["runner_up"] != scene["choice"]
    # The scene the rows trained on: every method's overrides of its config, in bench.json and the sweep file.
    tiny = load_grid(GRID).scenes["quickstart-tiny"]
    assert scene["set"] == [*(o for o in tiny.set if not o.startswith("tracking.")), "train.threads=1",
                            "data.validation.fraction=0.1"]
    assert scene["seed_keys"] == []
    assert set(scene["tuned"]["fedprox"]["best_params"]) >= {"train.lr", "method.params.mu"}
    spec = load_sweep_spec(scene["sweep"])
    assert set(spec.method_overrides) == {"fedavg", "fedprox"}
    assert (spec.selected, spec.selected_setting) == (scene["choice"], scene["choice_setting"])
    assert spec.scene.name == "quickstart-tiny" and spec.scene.set == scene["set"]
    assert spec.scene.federation["partition.num_clients"] == load_config(tiny.config).partition.num_clients
    assert any(o.startswith("method.params.mu=") for o in spec.method_overrides["fedprox"])
    assert "written by\n# fedcore bench" in Path(scene["sweep"]).read_text()
    assert Path(scene["report"]).is_file() and (Path(scene["report"]).parent / "accuracy.png").is_file()
    # the report names its groups by row and setting, as the table does, not by config keys, and marks the choice
    page = Path(scene["report"]).read_text()
    groups = [line.split(" | ")[0][2:] for line in page.splitlines() if line.startswith("| fed")]
    chosen = (scene["choice"], scene["choice_setting"])
    assert set(groups) == {f"{m} ({s}{', chosen' if (m, s) == chosen else ''})"
                           for m in ("fedavg", "fedprox") for s in ("default", "tuned")}
    assert "| val acc last-10 |" in page  # the score the choice read
    assert all(isinstance(r["one_class"], bool) for r in scene["rows"])  # from each run's confusion.json


def test_each_scene_gets_its_table_and_bench_table_prints_it(bench, capsys):
    from fedcore.bench.tables import scene_table

    scene = json.loads((bench / "bench.json").read_text())["scenes"]["quickstart-tiny"]
    table = (bench / "quickstart-tiny" / "table.md").read_text()
    assert table == scene_table("quickstart-tiny", scene) + "\n"
    assert "| fedavg | 2 (" in table or "| **fedavg** (chosen, " in table
    assert "| reference | reference | 1/1 |" in table
    capsys.readouterr()
    cli.main(["bench-table", str(bench)])
    assert capsys.readouterr().out == table


def test_the_table_marks_the_chosen_row_and_fedcore_run_trains_it_on_the_scene(bench, tmp_path, capsys):
    """`fedcore run BASE --sweep OUT/SCENE/tuned_sweep.yaml` trained the pick on BASE's own scene (the grid
    scene's set was dropped), at a tuned setting whatever the bench had chosen."""
    import yaml

    scene = json.loads((bench / "bench.json").read_text())["scenes"]["quickstart-tiny"]
    choice, setting = scene["choice"], scene["choice_setting"]
    assert f"| **{choice}** (chosen, {setting}) |" in (bench / "quickstart-tiny" / "table.md").read_text()
    out = tmp_path / "run"
    capsys.readouterr()
    cli.main(["run", str(GRID_CONFIG), "--sweep", scene["sweep"], "--out", str(out), "--no-progress",
              "--set", "train.rounds=1"])
    cfg = yaml.safe_load((out / "config.yaml").read_text())
    said = " ".join(capsys.readouterr().out.split())
    assert f"training row '{choice}' at its {setting} setting (the bench's choice) on scene 'quickstart-tiny'" in said
    assert cfg["method"]["name"] == choice and cfg["train"]["rounds"] == 1  # --set still wins
    # The scene's set, which configs/quickstart.yaml does not hold, and the validation split the rows had.
    assert cfg["train"]["memorization"] is False and cfg["data"]["validation"]["fraction"] == 0.1
    lr = scene["tuned"][choice]["best_params"]["train.lr"] if setting == "tuned" else load_config(GRID_CONFIG).train.lr
    assert cfg["train"]["lr"] == lr


def test_shuffled_test_accuracies_in_the_runs_leave_the_choice_unchanged(bench, tmp_path):
    import shutil

    copy = tmp_path / "out"
    shutil.copytree(bench, copy)
    runs = sorted(p.parent for p in copy.glob("quickstart-tiny/*/*/s0/metrics.json"))
    tests = [{k: v for k, v in _metrics(r)["summary"].items() if k.startswith("final/acc")} for r in runs]
    random.Random(1).shuffle(tests)
    for run, test in zip(runs, tests, strict=True):
        m = _metrics(run)
        m["summary"].update({k: 1.0 - v if "round" not in k else v for k, v in test.items()})
        (run / "metrics.json").write_text(json.dumps(m))
    grid = load_grid(GRID)
    before = json.loads((bench / "bench.json").read_text())["scenes"]["quickstart-tiny"]
    after = write_results(grid, copy, [])["scenes"]["quickstart-tiny"]
    assert [r["acc_last10"] for r in after["rows"]] != [r["acc_last10"] for r in before["rows"]]
    assert (after["choice"], after["runner_up"], after["margin"]) == (before["choice"], before["runner_up"],
                                                                       before["margin"])


def test_a_rerun_skips_what_is_done_and_new_seeds_run_in_worker_processes(bench, capsys):
    done = {p: p.stat().st_mtime_ns for p in bench.glob("quickstart-tiny/*/*/s0/metrics.json")}
    tune = (bench / "quickstart-tiny/fedavg/tune/tune.json").stat().st_mtime_ns
    capsys.readouterr()
    cli.main(["bench", str(GRID), "--out", str(bench), "--no-progress", "--methods", "fedavg", "--seeds", "0,1",
              "--jobs", "2"])
    err = capsys.readouterr().err
    assert {p: p.stat().st_mtime_ns for p in done} == done
    assert (bench / "quickstart-tiny/fedavg/tune/tune.json").stat().st_mtime_ns == tune
    assert "fedavg tune done" not in err and "s0 done" not in err  # nothing done again
    assert "fedavg default s1 done" in err and "fedavg tuned s1 done" in err
    result = json.loads((bench / "bench.json").read_text())
    assert result["grid"]["seeds"] == [0, 1] and result["grid"]["methods"] == ["fedavg"]
    rows = result["scenes"]["quickstart-tiny"]["rows"]
    assert {(r["setting"], r["seed"]) for r in rows} == {(s, n) for s in ("default", "tuned") for n in (0, 1)}
    assert len({_metrics(Path(r["run"]))["data_sha256"] for r in rows if r["seed"] == 1}) == 1


def test_swapped_test_labels_move_every_test_score_and_leave_the_choice_unchanged(bench, tmp_path):
    """The test split's labels shifted by one class in every shared artifact, then the same bench:
    the test columns change, the validation scores and the choice do not (test labels reach no
    decision). Seed 0 only: a test above may have added seeds to the fixture's bench."""
    import dataclasses

    from fedcore.data.federated import FederatedDataset

    out, scene = tmp_path / "swapped", "quickstart-tiny"
    for name in ("data-s0", "data-s100"):  # the reporting seed's artifact and the tuning seed's
        fed = FederatedDataset.load(bench / scene / name)
        dataclasses.replace(fed, y_test=(fed.y_test + 1) % fed.num_classes).save(out / scene / name)
    cli.main(["bench", str(GRID), "--out", str(out), "--seeds", "0", "--no-progress"])
    # The fixture's runs, read from their dirs: a test above may have rewritten its bench.json for fewer methods.
    before = [run_row(m, s, 0, bench / scene / m / s / "s0")
              for m in ("fedavg", "fedprox") for s in ("default", "tuned")]
    after = json.loads((out / "bench.json").read_text())["scenes"][scene]

    def by_run(rows):
        return {(r["method"], r["setting"], r["seed"]): r for r in rows}

    b, a = by_run(before), by_run(after["rows"])
    assert set(a) == set(b) and len(b) == 4
    assert all(a[k]["acc_last10"] != b[k]["acc_last10"] for k in b)
    assert all(a[k]["val_acc_last10"] == b[k]["val_acc_last10"] for k in b)
    want = choose(before, [0])
    assert (after["choice"], after["runner_up"], after["margin"]) == (want["choice"], want["runner_up"],
                                                                       want["margin"])


def test_a_dry_run_counts_what_is_left_and_paces_it_on_the_finished_jobs(bench, capsys):
    stamp = (bench / "bench.json").stat().st_mtime_ns
    capsys.readouterr()
    cli.main(["bench", str(GRID), "--out", str(bench), "--dry-run"])
    out = " ".join(capsys.readouterr().out.split())
    assert "quickstart-tiny │ fedavg │ 2/2 │ 1/1 │ 1/1" in out and "nothing left to run" in out

    cli.main(["bench", str(GRID), "--out", str(bench), "--dry-run", "--seeds", "0,7", "--jobs", "2"])
    out = " ".join(capsys.readouterr().out.split())
    assert "quickstart-tiny │ fedprox │ 2/2 │ 1/2 │ 1/2" in out
    # Seed 7's default and tuned run of both methods, at the pace the fixture's jobs saved.
    assert "4 units to run" in out and "left" in out and "no time measured" not in out
    assert not (bench / "quickstart-tiny/data-s7").exists()  # it ran nothing, prepared nothing
    assert (bench / "bench.json").stat().st_mtime_ns == stamp


def test_so_far_writes_the_finished_runs_marked_partial_and_runs_nothing(bench, tmp_path, capsys):
    import shutil

    copy, scene = tmp_path / "out", "quickstart-tiny"
    shutil.copytree(bench, copy)
    (copy / "bench.json").unlink()
    shutil.rmtree(copy / scene / "fedprox" / "tuned" / "s0")  # a tuned run still to do
    capsys.readouterr()
    cli.main(["bench", str(GRID), "--out", str(copy), "--seeds", "0", "--so-far"])
    out = capsys.readouterr().out
    assert not (copy / scene / "fedprox" / "tuned" / "s0").exists()  # nothing ran
    result = json.loads((copy / "bench.json").read_text())["scenes"][scene]
    assert result["still_to_run"] == {"tune_trials": 0, "runs": 1}
    # fedprox has no tuned run yet: its default takes part, its tuned setting does not.
    assert [m for m in result["means"] if m.startswith("fedprox")] == ["fedprox (default)"]
    assert f"{scene} (so far): {result['choice']} at its" in out and "partial: 0 tune trials and 1 runs" in out
    assert (copy / scene / "table.md").read_text().splitlines()[2].startswith(f"Partial: {scene} had 0 tune")
    cli.main(["bench-table", str(copy), "--summary"])
    assert capsys.readouterr().out.strip().endswith("its rows, verdicts and choice may change.")
    # The bench then does what was left, and its bench.json is whole again.
    cli.main(["bench", str(GRID), "--out", str(copy), "--seeds", "0", "--no-progress"])
    result = json.loads((copy / "bench.json").read_text())["scenes"][scene]
    assert "still_to_run" not in result and result["left_out"] == []


def test_so_far_refuses_an_out_with_nothing_finished_and_a_dry_run_beside_it(tmp_path, capsys):
    for extra in ([], ["--dry-run"]):
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["bench", str(GRID), "--out", str(tmp_path / "out"), "--so-far", *extra])
        err = capsys.readouterr().err.strip()
        assert exit_info.value.code == 2 and "\n" not in err
        assert ("ask for one" if extra else "no run of this grid has finished") in err
    assert not (tmp_path / "out" / "bench.json").exists()

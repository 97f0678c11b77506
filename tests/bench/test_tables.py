"""lab/results/tuning.md's tables from bench.json rows (fedcore.bench.tables): the verdicts against
the better of FedAvg's two rows per seed, the margins, the trial counts, a diverged seed, a model
that predicts one class, a multi-label scene, and `fedcore bench-table` over several bench.json."""

from __future__ import annotations

import json

import pytest

from fedcore import cli
from fedcore.bench.results import one_class
from fedcore.bench.tables import figure_data, fmt, load_scenes, scene_table, seed_table, summary_table, verdict


def _row(method, setting, seed, last10=None, best=None, at_val=None, **extra):
    return {"method": method, "setting": setting, "seed": seed, "val_acc_last10": None, "acc_last10": last10,
            "acc_best": best, "acc_at_val_best": at_val, **extra}


# FedAvg's reference per seed: test-best s0 max(.70, .71) = .71, s1 max(.72, .71) = .72;
# at val-best s0 max(.65, .69) = .69, s1 max(.66, .73) = .73.
SCENE = {"metric": "acc", "rows": [
    _row("fedavg", "default", 0, 0.50, 0.70, 0.65), _row("fedavg", "default", 1, 0.60, 0.72, 0.66),
    _row("fedavg", "tuned", 0, 0.68, 0.71, 0.69), _row("fedavg", "tuned", 1, 0.70, 0.71, 0.73),
    _row("fedsir", "default", 0, 0.78, 0.8, 0.77), _row("fedsir", "default", 1, 0.76, 0.8, 0.75),
    _row("fedsir", "tuned", 0, 0.80, 0.81, 0.79), _row("fedsir", "tuned", 1, 0.74, 0.8, 0.74),
    _row("coteaching", "default", 0, 0.40, 0.5, 0.45),
    _row("coteaching", "default", 1, 0.42, 0.5, 0.44, one_class=True),
    _row("coteaching", "tuned", 0, 0.75, 0.8, 0.74), _row("coteaching", "tuned", 1, 0.70, 0.8, 0.71),
    _row("dividemix", "default", 0, 0.55, 0.6, 0.56), _row("dividemix", "default", 1, 0.57, 0.6, 0.58),
    _row("dividemix", "tuned", 0, 0.72, 0.8, 0.73), {**_row("dividemix", "tuned", 1), "diverged": "nan loss"},
], "tuned": {"fedavg": {"n_trials": 8, "n_pruned": 2, "n_diverged": 0},
             "fedsir": {"n_trials": 8, "n_pruned": 1},  # a tune.json from before n_diverged existed
             "coteaching": {"n_trials": 8, "n_pruned": 3, "n_diverged": 1}}}  # dividemix: no finished tune
MAP_SCENE = {"metric": "mAP", "rows": [
    _row("fedavg", "default", 0, 0.80, 0.85, 0.84), _row("fedavg", "tuned", 0, 0.86, 0.87, 0.86),
    _row("fedharmony", "default", 0, 0.84, 0.86, 0.85), _row("fedharmony", "tuned", 0, 0.77, 0.8, 0.79),
], "tuned": {}}


def test_fmt_is_the_mean_and_sample_std_in_percent():
    assert (fmt([0.5, 0.6]), fmt([0.5]), fmt([])) == ("55.0 ± 7.1", "50.0", "-")


def test_a_verdict_needs_every_common_seed_and_gives_the_smallest_margin():
    mine = {0: {"k": 0.80}, 1: {"k": 0.74}, 2: {"k": None}}
    assert verdict(mine, {0: 0.71, 1: 0.72}, "k") == "✓ (+2.0)"
    assert verdict(mine, {0: 0.71, 1: 0.75}, "k") == "✗ (-1.0)"
    assert verdict(mine, {0: 0.80, 1: 0.70}, "k") == "✗ (+0.0)"  # level is not above
    assert verdict(mine, {2: 0.5, 3: 0.5}, "k") == "-"


def test_the_scene_table_judges_tuned_rows_against_fedavgs_better_row_per_seed():
    assert scene_table("fedsir_09", SCENE).splitlines() == [
        "### fedsir_09", "",
        "| method | trials | default val last-10 | default last-10 | default acc@val | tuned val last-10 "
        "| tuned last-10 | tuned acc@val | tuned last-10 > FedAvg test-best | tuned acc@val > FedAvg acc@val "
        "| seeds, notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        # acc@val against FedAvg's acc@val: coteaching's s1 .71 is under .73.
        "| coteaching | 8 (3 pruned, 1 diverged) | - | 41.0 ± 1.4 | 44.5 ± 0.7 | - | 72.5 ± 3.5 | 72.5 ± 2.1 "
        "| ✗ (-2.0) | ✗ (-2.0) | 2/2; s1 one class |",
        # The diverged seed leaves the verdict on the seed that trained, and is named.
        "| dividemix | - | - | 56.0 ± 1.4 | 57.0 ± 1.4 | - | 72.0 | 73.0 | ✓ (+1.0) | ✓ (+4.0) "
        "| 2/1; tuned s1 diverged |",
        "| fedavg | 8 (2 pruned, 0 diverged) | - | 55.0 ± 7.1 | 65.5 ± 0.7 | - | 69.0 ± 1.4 | 71.0 ± 2.8 "
        "| reference | reference | 2/2 |",
        "| fedsir | 8 (1 pruned, 0 diverged) | - | 77.0 ± 1.4 | 76.0 ± 1.4 | - | 77.0 ± 4.2 | 76.5 ± 3.5 "
        "| ✓ (+2.0) | ✓ (+1.0) | 2/2 |",
        "",
        "Ranking by mean last-10, default: fedsir 77.0 > dividemix 56.0 > fedavg 55.0 > coteaching 41.0. "
        "Tuned: fedsir 77.0 > coteaching 72.5 > dividemix 72.0 > fedavg 69.0.",
        "",
        "FedAvg reference per seed (better of default and tuned): test-best 71.5 ± 0.7, acc@val 71.0 ± 2.8."]


def test_the_seed_table_marks_each_tuned_seed_against_both_fedavg_bars():
    assert seed_table(SCENE, "s").splitlines() == [
        "| row | seed 0 | seed 1 | mean ± std |", "|---|---|---|---|",
        "| FedAvg test-best (bar) | 71.0 | 72.0 | 71.5 ± 0.7 |",
        "| FedAvg acc@val (bar) | 69.0 | 73.0 | 71.0 ± 2.8 |",
        "| coteaching, tuned | 75.0 ✓ | 70.0 ✗ | 72.5 ± 3.5 |",  # under both bars on seed 1
        "| coteaching, default | 40.0 | 42.0 | 41.0 ± 1.4 |",
        "| dividemix, tuned | 72.0 ✓ | diverged | 72.0 |",
        "| dividemix, default | 55.0 | 57.0 | 56.0 ± 1.4 |",
        "| fedavg, tuned | 68.0 | 70.0 | 69.0 ± 1.4 |",  # the bars' own rows carry no mark
        "| fedavg, default | 50.0 | 60.0 | 55.0 ± 7.1 |",
        "| fedsir, tuned | 80.0 ✓ | 74.0 ✓ | 77.0 ± 4.2 |",
        "| fedsir, default | 78.0 | 76.0 | 77.0 ± 1.4 |"]
    # a row is ✓ in the summary exactly where every seed it trained is ✓ here
    marks = {line.split(" | ")[0][2:-7]: line for line in seed_table(SCENE, "s").splitlines() if ", tuned |" in line}
    summary = {line.split(" | ")[0][2:]: line for line in summary_table({"s": SCENE}).splitlines()[2:]}
    for m in ("coteaching", "dividemix", "fedsir"):
        assert ("✗" not in marks[m]) == summary[m].endswith("✓ |"), m


def test_bench_table_per_seed_prints_each_scene_and_refuses_two_tables_at_once(tmp_path, capsys):
    path = tmp_path / "bench.json"
    path.write_text(json.dumps({"scenes": {"fedsir_09": SCENE}}))
    cli.main(["bench-table", str(path), "--per-seed"])
    out = capsys.readouterr().out
    assert out.startswith("### fedsir_09, per seed") and "| fedsir, tuned | 80.0 ✓ | 74.0 ✓ |" in out
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench-table", str(path), "--per-seed", "--summary"])
    assert exit_info.value.code == 2 and "two different tables" in capsys.readouterr().err


def test_a_multi_label_scene_says_map():
    lines = scene_table("fedharmony_scenes", MAP_SCENE).splitlines()
    assert lines[0] == "### fedharmony_scenes (mAP)"
    assert "| default mAP@val |" in lines[2] and "| tuned mAP@val > FedAvg mAP@val |" in lines[2]
    assert lines[5] == "| fedharmony | - | - | 84.0 | 85.0 | - | 77.0 | 79.0 | ✗ (-10.0) | ✗ (-7.0) | 1/1 |"
    assert lines[-1].endswith("test-best 87.0, mAP@val 86.0.")


def test_the_summary_marks_rows_that_beat_both_bars_and_names_what_did_not_run():
    assert summary_table({"fedsir_09": SCENE, "fedharmony_scenes": MAP_SCENE}).splitlines() == [
        "| method (tuned, mean last-10) | fedsir_09 | fedharmony_scenes (mAP) |",
        "|---|---|---|",
        "| fedavg | 69.0 (reference) | 86.0 (reference) |",
        "| coteaching | 72.5 ✗ | not run |",
        "| dividemix | 72.0 ✓ | not run |",
        "| fedharmony | not run | 77.0 ✗ |",
        "| fedsir | 77.0 ✓ | not run |"]


def test_the_figure_data_are_the_tables_means_with_fedavgs_bars():
    panels, refs, metric = figure_data({"fedsir_09": SCENE, "fedharmony_scenes": MAP_SCENE})
    assert metric == "acc/mAP" and list(panels) == ["fedsir_09", "fedharmony_scenes (mAP)"]
    assert panels["fedsir_09"]["dividemix"]["tuned"] == pytest.approx((72.0, 0.0))
    assert refs["fedsir_09"] == pytest.approx({"FedAvg test-best": 71.5, "FedAvg at val-best": 71.0})


def test_one_class_reads_the_predicted_columns(tmp_path):
    (tmp_path / "confusion.json").write_text(json.dumps([[5, 0], [3, 0]]))
    assert one_class(tmp_path) is True
    (tmp_path / "confusion.json").write_text(json.dumps([[5, 1], [3, 0]]))
    assert one_class(tmp_path) is False
    assert one_class(tmp_path / "none") is None


def _bench(path, scenes):
    path.mkdir(parents=True)
    (path / "bench.json").write_text(json.dumps({"grid": {}, "scenes": scenes}))
    return str(path)


def test_bench_table_prints_the_scenes_of_several_results(tmp_path, capsys):
    a, b = _bench(tmp_path / "a", {"fedsir_09": SCENE}), _bench(tmp_path / "b", {"fedharmony_scenes": MAP_SCENE})
    cli.main(["bench-table", a, f"{b}/bench.json"])
    out = capsys.readouterr().out
    assert out == scene_table("fedsir_09", SCENE) + "\n\n" + scene_table("fedharmony_scenes", MAP_SCENE) + "\n"
    cli.main(["bench-table", a, b, "--summary", "--scenes", "fedharmony_scenes,fedsir_09"])
    assert capsys.readouterr().out.splitlines()[0] == (
        "| method (tuned, mean last-10) | fedharmony_scenes (mAP) | fedsir_09 |")


@pytest.mark.parametrize(("make", "says"), [
    (lambda p: [str(p / "nope")], "no bench results at"),
    (lambda p: [_bench(p / "a", {"s": SCENE}), _bench(p / "b", {"s": SCENE})], "scene 's' is in two"),
    (lambda p: [_bench(p / "a", {"s": SCENE}), "--scenes", "t"], "scene t not in the bench results"),
])
def test_bench_table_refuses_bad_input_in_one_line(tmp_path, capsys, make, says):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench-table", *make(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and says in err and "\n" not in err


def test_a_file_that_is_not_a_bench_json_is_refused(tmp_path):
    from fedcore.errors import ConfigError

    (tmp_path / "x.json").write_text("[1]")
    with pytest.raises(ConfigError, match="is not a bench.json"):
        load_scenes([tmp_path / "x.json"])


def test_a_row_above_one_fedavg_bar_only_is_marked_not_beating_it():
    # FedAvg: test-best .55 per seed, at val-best .50; SCE beats the val bar on both seeds, the
    # test-best bar on seed 0 only.
    rows = [_row("fedavg", s, seed, 0.4, 0.55, 0.50) for s in ("default", "tuned") for seed in (0, 1)]
    scene = {"metric": "acc", "rows": [*rows, _row("sce", "tuned", 0, 0.60, 0.7, 0.6),
                                       _row("sce", "tuned", 1, 0.52, 0.7, 0.6)], "tuned": {}}
    sce = next(line for line in scene_table("a", scene).splitlines() if line.startswith("| sce "))
    assert "| ✗ (-3.0) | ✓ (+10.0) | 0/2 |" in sce
    assert "| sce | 56.0 ✗ |" in summary_table({"a": scene})
    assert "Ranking: no row has both settings yet." in scene_table("a", {**scene, "rows": scene["rows"][4:]})


def test_bench_table_draws_the_figure(tmp_path, capsys):
    png = tmp_path / "t.png"
    cli.main(["bench-table", _bench(tmp_path / "a", {"fedsir_09": SCENE}), "--summary", "--figure", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert capsys.readouterr().out.startswith("| method (tuned, mean last-10) | fedsir_09 |")


def test_every_table_of_a_scene_with_work_left_says_it_is_partial():
    partial = {**SCENE, "still_to_run": {"tune_trials": 3, "runs": 2}}
    note = ("Partial: fedsir_09 had 3 tune trials and 2 runs still to run; its rows, verdicts and choice may "
            "change.")
    assert scene_table("fedsir_09", partial).splitlines()[2:4] == [note, ""]
    assert seed_table(partial, "fedsir_09").splitlines()[:2] == [note, ""]
    assert summary_table({"fedsir_09": partial, "fedharmony_scenes": MAP_SCENE}).splitlines()[-2:] == ["", note]
    # the rest of each table is the finished scene's
    assert scene_table("fedsir_09", partial).splitlines()[4:] == scene_table("fedsir_09", SCENE).splitlines()[2:]
    assert "Partial" not in summary_table({"fedsir_09": SCENE}) + seed_table(SCENE, "s")


def _scored(method, setting, seed, val, last10, at_val):
    return {**_row(method, setting, seed, last10, last10 + 0.02, at_val), "val_acc_last10": val}


# Issue 71.4's case: the tuned row stops on validation at 52.9 against FedAvg's 51.1, while its last-10
# (41.2) is under FedAvg's 51.1; the choice (fedprox, tuned) rests on one seed.
CHOSEN = {"metric": "acc", "tuned": {}, "among": ["default", "tuned"], "rows": [
    _scored("fedavg", "default", 0, 0.30, 0.50, 0.511), _scored("fedavg", "tuned", 0, 0.29, 0.49, 0.50),
    _scored("fedprox", "default", 0, 0.28, 0.40, 0.45), _scored("fedprox", "tuned", 0, 0.3067, 0.412, 0.529)],
    "choice": "fedprox", "choice_setting": "tuned", "runner_up": "fedavg", "runner_up_setting": "default",
    "margin": 0.0067, "means": {"fedprox (tuned)": 0.3067, "fedavg (default)": 0.30}, "left_out": []}


def test_the_table_shows_the_validation_score_bolds_the_choice_and_says_why():
    lines = scene_table("q", CHOSEN).splitlines()
    fedprox = next(line for line in lines if line.startswith("| **fedprox** (chosen, tuned) "))
    # default val, last-10, @val; tuned val (bold: what the choice read), last-10, @val; the verdicts
    assert fedprox.split(" | ")[2:10] == ["28.0", "40.0", "45.0", "**30.7**", "41.2", "52.9", "✗ (-10.8)", "✓ (+1.8)"]
    assert "| fedavg | - | 30.0 | 50.0 | 51.1 | 29.0 |" in lines[4]  # no bold: not chosen
    assert lines[-1] == ("Chosen on validation: fedprox at its tuned setting (val acc last-10 30.7%), runner-up "
                         "fedavg (default) by 0.7 points on one reporting seed, which cannot tell that margin "
                         "from seed-to-seed spread (give the grid more seeds).")


def test_the_acc_at_val_verdict_compares_acc_at_val_on_every_table():
    """It compared the tuned last-10 with FedAvg's acc@val: 41.2 against 51.1 read ✗ (-9.9)."""
    assert "| ✗ (-10.8) | ✓ (+1.8) |" in scene_table("q", CHOSEN)
    # the summary's ✓ needs both verdicts, and the per-seed mark both comparisons (test-best fails here)
    assert "| fedprox | 41.2 ✗ |" in summary_table({"q": CHOSEN})
    assert "| fedprox, tuned | 41.2 ✗ |" in seed_table(CHOSEN, "q")
    above_both = {**CHOSEN, "rows": [*CHOSEN["rows"][:3], _scored("fedprox", "tuned", 0, 0.3067, 0.60, 0.529)]}
    assert "| fedprox | 60.0 ✓ |" in summary_table({"q": above_both})
    assert "| fedprox, tuned | 60.0 ✓ |" in seed_table(above_both, "q")
    under_val = {**CHOSEN, "rows": [*CHOSEN["rows"][:3], _scored("fedprox", "tuned", 0, 0.3067, 0.60, 0.50)]}
    assert "| fedprox, tuned | 60.0 ✗ |" in seed_table(under_val, "q")  # last-10 alone above both bars


def test_the_report_labels_mark_the_chosen_row():
    from fedcore.bench.results import report_labels

    rows = [{**r, "run": f"runs/{r['method']}/{r['setting']}"} for r in CHOSEN["rows"]]
    labels = report_labels(rows, "fedprox", "tuned")
    assert labels["runs/fedprox/tuned"] == "fedprox (tuned, chosen)"
    assert labels["runs/fedprox/default"] == "fedprox (default)" and labels["runs/fedavg/tuned"] == "fedavg (tuned)"

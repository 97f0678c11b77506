"""experiments/tuning_table.py on constructed runs: the verdicts and the notes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("tuning_table", Path("experiments/tuning_table.py"))
tt = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tt)


def _run(path: Path, last10: float, best: float, at_val: float, one_class: bool = False) -> None:
    path.mkdir(parents=True)
    summary = {"final/acc_last10": last10, "final/acc_best": best, "final/acc_at_val_best": at_val}
    (path / "metrics.json").write_text(json.dumps({"summary": summary}))
    conf = [[5, 0], [3, 0]] if one_class else [[5, 1], [1, 4]]
    (path / "confusion.json").write_text(json.dumps(conf))


def test_verdicts_use_the_better_fedavg_row_per_seed(tmp_path):
    scene = tmp_path / "s"
    for seed, (db, vb) in enumerate([(0.50, 0.40), (0.55, 0.45)]):
        _run(scene / "fedavg" / "default" / f"s{seed}", 0.30, db, vb)
        _run(scene / "fedavg" / "tuned" / f"s{seed}", 0.35, db - 0.10, vb + 0.05)
        # Above FedAvg's acc@val (0.45 / 0.50) on both seeds, above its test-best (0.50 / 0.55) on seed 0 only.
        _run(scene / "sce" / "tuned" / f"s{seed}", [0.52, 0.53][seed], 0.6, 0.5, one_class=seed == 1)
        _run(scene / "sce" / "default" / f"s{seed}", 0.40, 0.5, 0.45)
    (scene / "sce" / "default" / "s2.log").write_text("error: training diverged in round 3: ...")
    text = tt.table(tmp_path, "s")
    sce = next(line for line in text.splitlines() if line.startswith("| sce "))
    cells = [c.strip() for c in sce.split("|")[1:-1]]
    assert cells[2] == "40.0 ± 0.0" and cells[4] == "52.5 ± 0.7"
    assert cells[6] == "✗ (-2.0)" and cells[7] == "✓ (+3.0)"  # margins 0.52-0.45, 0.53-0.50
    assert cells[8] == "2/2; s2 diverged, tuned s1 one class"
    assert "test-best 52.5 ± 3.5, acc@val 47.5 ± 3.5" in text
    fedavg = next(line for line in text.splitlines() if line.startswith("| fedavg "))
    assert [c.strip() for c in fedavg.split("|")[1:-1]][6:8] == ["reference", "reference"]


def test_a_multi_label_scene_is_judged_on_map(tmp_path):
    scene = tmp_path / "h"
    for row, (last10, best, at_val) in {("fedavg", "default"): (0.80, 0.85, 0.84),
                                        ("fedharmony", "tuned"): (0.86, 0.87, 0.86)}.items():
        run = scene / row[0] / row[1] / "s0"
        run.mkdir(parents=True)
        summary = {"final/mAP_last10": last10, "final/mAP_best": best, "final/mAP_at_val_best": at_val}
        (run / "metrics.json").write_text(json.dumps({"summary": summary}))
    text = tt.table(tmp_path, "h")
    assert text.startswith("### h (mAP)") and "tuned mAP@val" in text
    row = next(line for line in text.splitlines() if line.startswith("| fedharmony "))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[4] == "86.0" and cells[6] == "✓ (+1.0)" and cells[7] == "✓ (+2.0)"
    assert "test-best 85.0, mAP@val 84.0" in text


def test_the_ranking_line_orders_rows_by_mean_last10_per_setting(tmp_path):
    scene = tmp_path / "r"
    for method, (d, t) in {"fedavg": (0.30, 0.60), "sce": (0.50, 0.55), "half": (0.9, None)}.items():
        _run(scene / method / "default" / "s0", d, 0.9, 0.5)
        if t is not None:
            _run(scene / method / "tuned" / "s0", t, 0.9, 0.5)
    text = tt.table(tmp_path, "r")
    assert "default: sce 50.0 > fedavg 30.0. Tuned: fedavg 60.0 > sce 55.0." in text
    assert tt.ranking({"default": {"a": 0.1}, "tuned": {}}) == "Ranking: no row has both settings yet."


def test_the_summary_marks_a_row_only_when_it_beats_both_references_on_every_seed(tmp_path):
    for scene, sce_last10 in (("a", [0.60, 0.62]), ("b", [0.60, 0.40])):
        for seed in (0, 1):
            _run(tmp_path / scene / "fedavg" / "default" / f"s{seed}", 0.3, 0.50, 0.45)
            _run(tmp_path / scene / "fedavg" / "tuned" / f"s{seed}", 0.4, 0.55, 0.50)
            _run(tmp_path / scene / "sce" / "tuned" / f"s{seed}", sce_last10[seed], 0.7, 0.6)
    _run(tmp_path / "a" / "fedcorr" / "tuned" / "s0", 0.9, 0.9, 0.9)
    text = tt.summary(tmp_path, ["a", "b", "absent"])
    lines = text.splitlines()
    assert lines[0] == "| method (tuned, mean last-10) | a | b |"
    assert lines[2] == "| fedavg | 40.0 (reference) | 40.0 (reference) |"
    assert "| sce | 61.0 ✓ | 50.0 ✗ |" in lines
    assert "| fedcorr | 90.0 ✓ | not run |" in lines


def test_the_figure_has_a_panel_per_scene_with_both_settings_and_fedavgs_bars(tmp_path):
    for seed in (0, 1):
        _run(tmp_path / "a" / "fedavg" / "default" / f"s{seed}", 0.3, 0.50, 0.45)
        _run(tmp_path / "a" / "fedavg" / "tuned" / f"s{seed}", 0.4, [0.55, 0.65][seed], 0.50)
        _run(tmp_path / "a" / "sce" / "tuned" / f"s{seed}", [0.6, 0.7][seed], 0.7, 0.6)
    panels, refs, metric = tt.figure_data(tmp_path, ["a", "absent"])
    assert list(panels) == ["a"] and metric == "acc"
    assert panels["a"]["fedavg"]["default"] == (30.0, 0.0)
    assert panels["a"]["sce"]["tuned"] == pytest.approx((65.0, 7.0710678))
    assert refs["a"] == {"FedAvg test-best": pytest.approx(60.0), "FedAvg at val-best": pytest.approx(50.0)}
    png = tmp_path / "t.png"
    tt.main(["--figure", str(png), str(tmp_path), "a"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_multi_label_scene_names_its_metric_in_the_summary_and_its_figure_panel(tmp_path):
    _run(tmp_path / "a" / "fedavg" / "tuned" / "s0", 0.4, 0.55, 0.50)
    run = tmp_path / "h" / "fedavg" / "tuned" / "s0"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({"summary": {
        "final/mAP_last10": 0.8, "final/mAP_best": 0.85, "final/mAP_at_val_best": 0.84}}))
    assert tt.summary(tmp_path, ["a", "h"]).splitlines()[0] == "| method (tuned, mean last-10) | a | h (mAP) |"
    panels, refs, metric = tt.figure_data(tmp_path, ["a", "h"])
    assert list(panels) == ["a", "h (mAP)"] and metric == "acc/mAP"
    assert refs["h (mAP)"]["FedAvg test-best"] == pytest.approx(85.0)

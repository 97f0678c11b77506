"""A scene's tunes become one sweep file of method_overrides that reruns each tuned setting exactly
(fedcore.bench.sweepfile, what `fedcore bench` writes to OUT/SCENE/tuned_sweep.yaml)."""

from __future__ import annotations

import json

from fedcore.bench.sweepfile import read_tunes, sweep_text, write_if_changed


def test_a_scenes_tunes_become_one_sweep_at_full_precision_with_the_variants_fixed_params(tmp_path):
    from fedcore.pipeline.plan import load_sweep_spec

    scene = tmp_path / "quickstart"
    rows = {"fedavg": {"train.lr": 0.1234567891234}, "fedgr-robust": {"method.params.beta": 0.5}}
    for row, params in rows.items():
        (scene / row / "tune").mkdir(parents=True)
        (scene / row / "tune" / "tune.json").write_text(json.dumps({
            "best_params": params, "best_value": 0.3, "n_trials": 8, "objective": "final/val_acc_last10", "seed": 100}))
    text = sweep_text("quickstart", scene, read_tunes(scene), 0.1, "fedcore bench",
                      {"fedgr-robust": ["method.params.profile=robust"]})
    out = tmp_path / "sweep.yaml"
    assert write_if_changed(out, text) and not write_if_changed(out, text)  # a rerun leaves it alone
    assert "per row 8 trials" in text and "on seed 100" in text and "data.validation.fraction=0.1" in text
    assert load_sweep_spec(out).method_overrides == {
        "fedavg": ["train.lr=0.1234567891234"],  # full precision: the same run
        "fedgr-robust": ["method.params.profile=robust", "method.params.beta=0.5"]}

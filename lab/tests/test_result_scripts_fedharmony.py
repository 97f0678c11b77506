"""lab/notes/fedharmony_labels.py and fedharmony_d2.py still read what fedcore writes: a short FedAvg
run on scenes_mosaic."""

import math

import numpy as np
import pytest

from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.run import run_experiment
from fedcore.stats.correlation import offdiag_distance, phi_correlation
from lab.tests.test_result_scripts import _floats, _run_quiet, load_script


@pytest.fixture(scope="module")
def scenes_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fedharmony")
    cfg = ExperimentConfig.model_validate({
        "data": {"name": "scenes_mosaic", "params": {"n_train": 300, "n_test": 100, "groups": 3, "unannotated": 1}},
        "partition": {"kind": "natural", "num_clients": 3}, "noise": {"type": "none"},
        "model": {"name": "mlp", "width": 16}, "train": {"rounds": 2, "device": "cpu"},
        "method": {"name": "fedavg"}})
    fed = build_federated_dataset(cfg)
    data = fed.save(tmp / "data")
    return fed, data, run_experiment(cfg, tmp / "run", data=fed)


def test_fedharmony_labels_reports_the_runs_test_map_and_the_label_tension(scenes_run):
    fed, data, res = scenes_run
    out = _run_quiet(load_script("notes/fedharmony_labels").main, data, [res.out_dir]).splitlines()
    # Tension of client 0 by hand: its annotated-label phi against the size-weighted mean of the other two.
    y = fed.y_train.numpy().astype(float)
    r = [phi_correlation(y[idx], eps=0.0).numpy() for idx in fed.client_indices]
    n = [len(idx) for idx in fed.client_indices]
    teacher0 = (n[1] * r[1] + n[2] * r[2]) / (n[1] + n[2])
    assert _floats(out[0].split(":")[1])[0] == pytest.approx(offdiag_distance(r[0], teacher0), abs=0.006)
    assert _floats(out[1].split("test mAP")[1])[0] == pytest.approx(res.summary["final/mAP"] * 100, abs=0.051)
    assert np.isfinite(_floats(out[1].split("own images")[1])[0])


def test_fedharmony_d2_measures_ecl_under_both_teachers_and_readings(scenes_run):
    _, data, res = scenes_run
    out = _run_quiet(load_script("notes/fedharmony_d2").main, data, [res.out_dir]).strip()
    assert out.startswith(f"{res.out_dir}: ")
    values = {k: float(v) for k, v in (item.rsplit(" ", 1) for item in out.split(": ", 1)[1].split("; "))}
    assert {"norm consensus", "norm own", "norm truth"} <= set(values)
    for teacher in ("consensus", "oracle"):
        for reading in ("v2", "v3"):
            assert any(k.startswith(f"{teacher} {reading} ") for k in values), (teacher, reading)
    assert all(math.isfinite(v) for v in values.values()), values
    assert values["norm truth"] > 0  # the scene's exact correlation reached the script

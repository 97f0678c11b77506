"""FedHarmony as a method: leave-one-out teachers, CAA weights, alignment loss and switches,
plus the multi-label path through `fedcore run` (no accuracy claims here)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from fedcore.cli import app
from fedcore.config import ExperimentConfig
from fedcore.data.build import build_federated_dataset
from fedcore.engine.sampler import client_rngs
from fedcore.engine.types import ClientTask, ClientUpdate, RoundPlan
from fedcore.errors import ConfigError
from fedcore.methods.fedharmony import FedHarmonyInstructions, FedHarmonyUpload, FedHarmonyVisit
from fedcore.methods.registry import build_method
from fedcore.run import make_context
from fedcore.stats.correlation import phi_correlation
from fedcore.train.local import Batch
from fedcore.train.params import weighted_average

TRAIN_PLAN = RoundPlan("train", instructions=FedHarmonyInstructions())  # a v2 round: no probe, lam from params
MOSAIC = {"name": "digits_mosaic", "params": {"n_train": 240, "n_test": 60, "groups": 3}}


def mosaic_cfg(**params) -> ExperimentConfig:
    return ExperimentConfig.model_validate({
        "data": MOSAIC, "partition": {"kind": "natural", "num_clients": 3}, "noise": {"type": "none"},
        "model": {"name": "mlp", "width": 16},
        "train": {"rounds": 4, "device": "cpu", "batch_size": 32},
        "method": {"name": "fedharmony", "params": params},
    })


@pytest.fixture(scope="module")
def fed():
    return build_federated_dataset(mosaic_cfg())


def make_method(fed, **params):
    cfg = mosaic_cfg(**params)
    method = build_method(cfg)
    state = method.init(make_context(cfg, fed, torch.device("cpu")))
    return method, state


def fake_updates(state, sizes=(100, 100, 200), levels=(0.1, 0.2, 0.6)):
    """Client k uploads R_k with every off-diagonal entry levels[k], and params = global + k."""
    ups = []
    for k, (n, lv) in enumerate(zip(sizes, levels, strict=True)):
        r = np.full((10, 10), lv)
        np.fill_diagonal(r, 1.0)
        params = {name: (v + k if v.is_floating_point() else v) for name, v in state.params.items()}
        ups.append(ClientUpdate(cid=k, num_examples=n, params=params, uploads=FedHarmonyUpload(corr=r)))
    return ups


def test_needs_a_multilabel_dataset():
    cfg = ExperimentConfig.model_validate({"method": {"name": "fedharmony"}, "train": {"device": "cpu"},
                                           "data": {"max_train": 100}, "partition": {"num_clients": 2}})
    with pytest.raises(ConfigError, match="multi-label"):
        build_method(cfg).init(make_context(cfg, build_federated_dataset(cfg), torch.device("cpu")))


def test_leave_one_out_teachers_exclude_the_client(fed):
    method, state = make_method(fed)
    state, _ = method.server_update(state, TRAIN_PLAN, fake_updates(state))
    teachers = state.extra["teachers"]
    # Sample-count weighted means of the *other* clients' off-diagonal level.
    assert teachers[0][0, 1] == pytest.approx((100 * 0.2 + 200 * 0.6) / 300)
    assert teachers[1][0, 1] == pytest.approx((100 * 0.1 + 200 * 0.6) / 300)
    assert teachers[2][0, 1] == pytest.approx(0.15)
    for k in range(3):  # blocks partition the labels
        assert sorted(np.concatenate(state.extra["blocks"][k]).tolist()) == list(range(10))
    assert method.plan_round(state, 1).instructions.teachers[2][3, 4] == pytest.approx(0.15)


def test_caa_weights_equal_sample_counts_at_t0_and_favour_small_gaps_later(fed):
    method, state = make_method(fed)
    ups = fake_updates(state)
    new, metrics = method.server_update(state, TRAIN_PLAN, ups)
    fedavg = weighted_average([u.params for u in ups], [u.num_examples for u in ups])
    assert all(torch.allclose(new.params[k], fedavg[k]) for k in fedavg if fedavg[k].is_floating_point())
    assert metrics.scalars["harmony/alpha"] == 1.0
    # From T0 = rounds / 2 = 2 on, only quality counts: client 2 (level 0.6, far from its teachers) weighs least.
    late, metrics = method.server_update(state.replace(stage_round=2), TRAIN_PLAN, ups)
    assert metrics.scalars["harmony/alpha"] == 0.0
    key = next(k for k in fedavg if fedavg[k].is_floating_point())
    shift = float((late.params[key] - state.params[key]).flatten()[0])  # = sum_k w_k * k
    assert shift < 1 * 0.5 + 2 * 0.5 - 0.05  # client 2's weight is below 1/2
    off, _ = make_method(fed, caa=False)
    plain, _ = off.server_update(state.replace(stage_round=2), TRAIN_PLAN, ups)
    assert all(torch.allclose(plain.params[k], fedavg[k]) for k in fedavg if fedavg[k].is_floating_point())


def _task(method, state, teacher=None):
    rng, gen = client_rngs(0, 1, 0)
    instr = FedHarmonyInstructions(teachers={} if teacher is None else {0: teacher}, blocks={0: None})
    return ClientTask(cid=0, params=state.params, data=method.ctx.clients[0], instructions=instr, state={},
                      rng=rng, gen=gen, rnd=1, stage="train")


def _batch(task):
    pos = torch.arange(32)
    return Batch(pos=pos, x=task.data.x(pos), y=task.data.labels[pos])


def test_alignment_loss_is_zero_when_local_correlation_equals_the_teacher(fed):
    # Spec v1 form: R_k of the mini-batch alone, squared Frobenius summed over the entries.
    method, state = make_method(fed, blocks=False, estimate="batch", scale="sum")
    task = _task(method, state)
    batch = _batch(task)
    with torch.no_grad():
        logits = method.model(batch.x)
    own = phi_correlation(torch.sigmoid(logits)).numpy()
    bce = method.base_loss(logits, batch.y)
    task = _task(method, state, teacher=own)
    extras = method.before_local(task)
    assert extras["visit"].mask.sum() == 90  # blocks off: every off-diagonal entry
    assert extras["visit"].table is None
    assert method.loss(method.model, batch, task, extras).item() == pytest.approx(bce.item(), abs=1e-5)
    far = _task(method, state, teacher=np.full((10, 10), 0.9))
    far_extras = method.before_local(far)
    assert method.loss(method.model, batch, far, far_extras).item() > bce.item() + 1.0


def test_consensus_switch_removes_the_alignment_term(fed):
    method, state = make_method(fed, consensus=False)
    task = _task(method, state, teacher=np.full((10, 10), 0.9))
    assert method.before_local(task) == {"visit": FedHarmonyVisit()}
    batch = _batch(task)
    with torch.no_grad():
        expected = method.base_loss(method.model(batch.x), batch.y).item()
        assert method.loss(method.model, batch, task, {"visit": FedHarmonyVisit()}).item() == pytest.approx(expected)


def test_client_uploads_its_correlation(fed):
    method, state = make_method(fed)
    up = method.client_update(_task(method, state, teacher=np.full((10, 10), 0.1)))
    r = up.uploads.corr
    assert r.shape == (10, 10) and np.allclose(r, r.T)
    assert "harmony/client_gap" in up.metrics


@pytest.mark.parametrize("method", ["fedharmony", "fedavg", "fedprox"])
def test_multilabel_runs_through_fedcore_run_with_all_metrics(tmp_path, method):
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({
        "data": MOSAIC, "partition": {"kind": "natural", "num_clients": 3}, "noise": {"type": "none"},
        "model": {"name": "cnn", "width": 8}, "train": {"rounds": 2, "device": "cpu"},
        "method": {"name": method},
    }))
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["run", str(cfg), "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "metrics.json").read_text())["summary"]
    for key in ("final/mAP_last10", "last/test/OmAP", "last/test/CP", "last/test/CR", "last/test/CF1",
                "last/test/OP", "last/test/OR", "last/test/OF1", "last/test/corr_dist", "last/test/loss"):
        assert key in summary and np.isfinite(summary[key]), key


@pytest.mark.parametrize("path", [*(f"configs/fedharmony_{n}.yaml" for n in ("digits_mosaic", "voc", "coco", "flair",
                                                                             "scenes_digits")),
                                  "configs/fmnist/fedharmony_scenes.yaml"])
def test_presets_validate(path: str):
    from fedcore.registries import load_config

    cfg = load_config(path)
    assert cfg.method.name == "fedharmony" and cfg.partition.num_clients == 10
    build_method(cfg)  # method params valid


def test_scenes_presets_differ_only_in_their_tiles():
    from fedcore.registries import load_config

    digits = load_config("configs/fedharmony_scenes_digits.yaml").to_dict()
    fmnist = load_config("configs/fmnist/fedharmony_scenes.yaml").to_dict()
    assert digits["data"]["params"].pop("tiles") == "digits"
    assert fmnist["data"]["params"].pop("tiles") == "fashion_mnist"
    assert digits == fmnist


def test_early_stopping_watches_val_map_on_multilabel_runs_and_never_the_test_split():
    from fedcore.engine.callbacks import EarlyStopping

    stop = EarlyStopping(patience=1)
    stop.after_round(1, "train", {"val/mAP": 0.5, "test/mAP": 0.1})
    assert not stop.should_stop()
    stop.after_round(2, "train", {"val/mAP": 0.4, "test/mAP": 0.9})  # a better test score does not count
    assert stop.should_stop()
    acc = EarlyStopping(patience=1)
    acc.after_round(1, "train", {"val/acc": 0.5, "val/mAP": 0.1})
    acc.after_round(2, "train", {"val/acc": 0.6, "val/mAP": 0.0})  # accuracy wins when both exist
    assert not acc.should_stop()
    blind = EarlyStopping(patience=1)
    for rnd, score in enumerate((0.9, 0.1, 0.0)):
        blind.after_round(rnd, "train", {"test/acc": score})
    assert not blind.should_stop()  # no validation logged: nothing to stop on

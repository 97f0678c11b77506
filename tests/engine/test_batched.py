"""The batched executor: same client updates as the sequential one, any client sizes, any chunking."""

import json

import numpy as np
import pytest
import torch

from fedcore.config import ExperimentConfig, ModelConfig
from fedcore.data.federated import FederatedDataset, GroundTruth
from fedcore.engine.batched import BatchedExecutor, auto_chunk, make_executor
from fedcore.engine.executor import SequentialExecutor
from fedcore.engine.loop import RoundLoop
from fedcore.engine.program import LocalProgram
from fedcore.engine.sampler import ClientSampler
from fedcore.engine.stacked import _positions, num_steps, train_stacked
from fedcore.engine.stacknet import StackedNet
from fedcore.engine.store import ClientData, ClientStateStore, TensorStore
from fedcore.errors import ConfigError
from fedcore.methods.base import StagedMethod
from fedcore.methods.registry import MethodParams, build_method
from fedcore.models import build_model
from fedcore.registries import load_config
from fedcore.run import run_experiment
from fedcore.train import losses
from fedcore.train.ema import ema_update_
from fedcore.train.local import OptimSpec
from tests.engine.helpers import tiny_context
from tests.engine.test_run import Crash, model_equal


def make_fed(sizes, shape=(1, 4, 4), classes=3, seed=0) -> FederatedDataset:
    """Random images and labels, clients of the given sizes."""
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    x = torch.randint(0, 256, (n, *shape), generator=g, dtype=torch.uint8)
    y = torch.randint(0, classes, (n,), generator=g)
    bounds = np.cumsum([0, *sizes])
    parts = [np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    truth = GroundTruth(y_true=y.numpy(), is_noisy_sample=np.zeros(n, bool), is_noisy_client=np.zeros(len(sizes), bool),
                        noise_type=["none"] * len(sizes), target_rate=np.zeros(len(sizes)),
                        realized_rate=np.zeros(len(sizes)))
    meta = {"name": "rand", "task": "single", "num_classes": classes, "mean": [0.5] * shape[0],
            "std": [0.25] * shape[0], "in_shape": list(shape)}
    return FederatedDataset(x, y, x[:8].clone(), y[:8].clone(), parts, truth, meta)


def cfg_for(method="fedavg", params=None, **train) -> ExperimentConfig:
    base = {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4, "batch_size": 32,
            "local_epochs": 2, "rounds": 1, "device": "cpu"}
    return ExperimentConfig.model_validate({"model": {"name": "mlp", "width": 8}, "train": {**base, **train},
                                            "method": {"name": method, "params": params or {}}})


def round_updates(cfg, fed, executor):
    """One round's client updates (fresh method, fresh generators) under `executor`."""
    method = build_method(cfg)
    ctx = tiny_context(fed, cfg)
    state = method.init(ctx)
    loop = RoundLoop(method, ctx, ClientSampler(fed.num_clients, 1.0, 0), ClientStateStore(fed.num_clients),
                     executor=executor)
    return executor.run_clients(method, loop._tasks(state, list(range(fed.num_clients)), {}))


def assert_same_updates(a, b, atol=1e-5):
    assert [u.cid for u in a] == [u.cid for u in b]
    for ua, ub in zip(a, b, strict=True):
        assert ua.params.keys() == ub.params.keys() and ua.num_examples == ub.num_examples
        for k in ua.params:
            torch.testing.assert_close(ua.params[k], ub.params[k], rtol=0, atol=atol)
        assert ua.metrics.keys() == ub.metrics.keys()
        for k in ua.metrics:
            assert ua.metrics[k] == pytest.approx(ub.metrics[k], abs=atol), k


# Sizes around the batch size of 32: 1 (one sample, not skipped), 2, 33 (a lone trailing sample,
# skipped), 64 (exact), 97 (three full batches + 1) and 40; the clients take 2 to 6 steps.
SIZES = [40, 1, 33, 2, 97, 64]


@pytest.mark.parametrize("train", [{}, {"local_steps": 5}, {"optimizer": "adam", "lr": 3e-3, "weight_decay": 1e-2},
                                   {"optimizer": "adam", "lr": 3e-3, "weight_decay": 1e-2, "fused_adam": True},
                                   {"augment": "weak", "batch_size": 7}])
def test_clients_of_unequal_size_match_the_sequential_executor(train):
    cfg, fed = cfg_for(**train), make_fed(SIZES)
    seq = round_updates(cfg, fed, SequentialExecutor())
    bat = round_updates(cfg, fed, BatchedExecutor(chunk=64))
    assert [u.metrics["train/steps"] for u in seq] == [float(num_steps(n, OptimSpec.from_train(cfg.train)))
                                                       for n in SIZES]
    assert len({u.metrics["train/steps"] for u in seq}) > 2  # really unequal
    assert_same_updates(bat, seq)


def test_the_vmap_model_path_matches_too(monkeypatch):
    """Models the grouped layers cannot express run through torch.func.vmap; same updates."""
    import fedcore.engine.stacked as stacked

    monkeypatch.setattr(stacked, "StackedNet", lambda model: StackedNet(model, grouped=False))
    cfg = ExperimentConfig.model_validate({**cfg_for().model_dump(), "model": {"name": "cnn", "width": 8}})
    fed = make_fed(SIZES)
    assert_same_updates(round_updates(cfg, fed, BatchedExecutor()), round_updates(cfg, fed, SequentialExecutor()))


@pytest.mark.parametrize("chunk", [1, 2, 4, 5])  # 1 and 5: stacks of a single client
def test_chunking_gives_the_result_of_one_chunk(chunk):
    cfg, fed = cfg_for(), make_fed(SIZES)
    assert_same_updates(round_updates(cfg, fed, BatchedExecutor(chunk=chunk)),
                        round_updates(cfg, fed, BatchedExecutor(chunk=64)), atol=1e-6)


def test_the_default_chunk_fits_the_memory_budgets(monkeypatch):
    import fedcore.engine.batched as batched

    store = TensorStore(torch.zeros(4, 1, 8, 8, dtype=torch.uint8), [0.5], [0.25], torch.device("cpu"))
    data = ClientData(0, store, np.arange(4), torch.zeros(4, dtype=torch.long))
    model = build_model(ModelConfig(name="mlp", width=16), (1, 8, 8), 3)
    # one sample: flatten 64 + two hidden layers (linear and ReLU outputs) 4 x 16 + 3 logits, float32
    assert batched.activation_bytes(model, (1, 8, 8), torch.device("cpu")) == 4 * (64 + 4 * 16 + 3)
    prog = LocalProgram(data, torch.Generator(), OptimSpec(batch_size=32), dict(model.state_dict()), (), model,
                        None, None)  # type: ignore[arg-type]
    assert auto_chunk(prog) == 64
    monkeypatch.setattr(batched, "ACT_BUDGET", {"cpu": 32 * 4 * 131 * 10})
    assert auto_chunk(prog) == 10  # ten clients' activations fit
    weights = 4 * sum(t.numel() for t in model.state_dict().values())
    monkeypatch.setattr(batched, "STATE_BUDGET", 5 * weights * 3)
    assert auto_chunk(prog) == 3  # three clients' weights, gradients and optimizer state fit


def test_num_steps_replays_the_batch_schedule():
    store = TensorStore(torch.zeros(100, 1, 1, 1, dtype=torch.uint8), [0.0], [1.0], torch.device("cpu"))
    for n in (1, 2, 3, 31, 32, 33, 65, 97):
        for bs, epochs, steps in ((1, 1, None), (2, 0, None), (32, 2, None), (32, 1, 5), (3, 3, 7), (32, 1, 1)):
            data = ClientData(0, store, np.arange(n), torch.zeros(n, dtype=torch.long))
            spec = OptimSpec(batch_size=bs, epochs=epochs, steps=steps)
            prog = LocalProgram(data, torch.Generator(), spec, {}, (), None, None, None)  # type: ignore[arg-type]
            assert num_steps(n, spec) == sum(1 for _ in _positions(prog, torch.Generator())), (n, bs, epochs, steps)
    assert num_steps(5, OptimSpec(batch_size=1, epochs=1)) == 0  # every batch is a lone sample


def test_executor_choice_and_refusal():
    fed = make_fed([10, 12])
    for name in ("fedavg", "fedprox", "symmetric_ce", "fednoro", "fedcorr", "fedsir", "fedgr"):
        method = build_method(cfg_for(name))
        assert method.batched_support() is None, name
        assert isinstance(make_executor("auto", method, 8), BatchedExecutor)
        assert type(make_executor("sequential", method, 8)) is SequentialExecutor
    # FedGR's main phase trains batched; its v1 representation term (both views at once) does not
    for name, params in (("coteaching", None), ("dividemix", None), ("fedrg", None), ("fedgr", {"rep_loss": "cosine"}),
                         ("fedharmony", None)):
        method = build_method(cfg_for(name, params))
        assert method.batched_support(), name  # a reason
        assert type(make_executor("auto", method, 8)) is SequentialExecutor
        with pytest.raises(ConfigError) as err:
            make_executor("batched", method, 8)
        msg = str(err.value)
        assert f"method '{name}' cannot train batched" in msg and "train.executor=auto or sequential" in msg
        assert "\n" not in msg
    bn = ExperimentConfig.model_validate({"model": {"name": "cnn", "width": 8, "params": {"norm": "batch"}},
                                         "train": {"device": "cpu"}})
    method = build_method(bn)
    method.init(tiny_context(fed, bn))
    with pytest.raises(ConfigError, match="BatchNorm"):
        make_executor("batched", method, 8)


def test_the_batched_loop_runs_on_the_params_device():
    """'meta' stands in for CUDA: any tensor the loop made on the CPU and mixed in would raise."""
    meta = torch.device("meta")
    store = TensorStore(torch.zeros(40, 1, 4, 4, dtype=torch.uint8), [0.5], [0.25], meta)
    net = build_model(ModelConfig(name="cnn", width=8), (1, 4, 4), 3).to(meta)
    params = dict(net.state_dict())

    def loss(step):
        logits = step.net(step.params, step.batch["x"])
        return losses.ce(step.flat(logits), step.flat(step.batch["y"]), reduction="none")

    def prog(lo, hi, inputs=None):
        data = ClientData(0, store, np.arange(lo, hi), torch.zeros(hi - lo, dtype=torch.long))
        return LocalProgram(data, torch.Generator().manual_seed(lo), OptimSpec(batch_size=8, epochs=2), params,
                            tuple(n for n, _ in net.named_parameters()), net, loss, None,
                            samples={"y": data.labels}, inputs=inputs)

    assert StackedNet(net).grouped
    for progs in ([prog(0, 10), prog(10, 25), prog(25, 40)],
                  [prog(0, 9, lambda pos: {"x": store.get(pos)}), prog(9, 40, lambda pos: {"x": store.get(pos)})]):
        for params_k, sums, _ in train_stacked(progs):
            assert {t.device for t in params_k.values()} == {meta}
            assert sums["loss"].device == meta


def test_run_records_the_executor(tmp_path, capsys):
    fast = ["train.device=cpu", "train.rounds=1", "partition.num_clients=4", "train.local_epochs=1"]
    for method, want in (("fedavg", "batched"), ("coteaching", "sequential")):
        cfg = load_config("configs/quickstart.yaml", [*fast, f"method.name={method}"])
        run_experiment(cfg, tmp_path / method)
        assert json.loads((tmp_path / method / "metrics.json").read_text())["executor"] == want
        assert f"executor {want} (train.executor=auto" in capsys.readouterr().err


class EmaDistill(StagedMethod):
    """A FedGR-shaped local step: CE + KL to teacher logits computed once per round, an EMA of the
    parameters updated after every step, and a logged loss term (the shape FedGR's main phase has)."""

    name = "ema_distill"

    def before_local(self, task):
        with torch.no_grad():
            teacher = self.model(task.data.x())  # logits of the round's start model on every sample
        ema = {n: task.params[n].clone() for n, _ in self.model.named_parameters()}
        return {"teacher": teacher, "ema": ema, "sums": {"kd": 0.0, "steps": 0}}

    def loss(self, model, batch, task, extras):
        logits = model(batch.x)
        kd = losses.kd_kl(logits, extras["teacher"][batch.pos], T=2.0)
        extras["sums"]["kd"] += kd.detach()
        extras["sums"]["steps"] += 1
        return losses.ce(logits, batch.y) + 0.5 * kd

    def after_step(self, task, extras):
        return lambda model: ema_update_(extras["ema"], dict(model.named_parameters()), 0.9)

    def after_local(self, task, extras):
        ema = extras["batched_consts"]["ema"] if "batched_consts" in extras else extras["ema"]
        if "batched_consts" not in extras:  # the batched path reports the logged term itself
            extras["metrics"] = {"toy/kd": float(extras["sums"]["kd"]) / max(extras["sums"]["steps"], 1)}
        return {"ema": {k: v.clone() for k, v in ema.items()}}, None

    # batched twins
    def batched_samples(self, task, extras):
        return {"teacher": extras["teacher"]}

    def batched_consts(self, task, extras):
        return {"ema": extras["ema"]}

    def batched_loss(self, step):
        logits = step.flat(step.net(step.params, step.batch["x"]))
        kd = losses.kd_kl(logits, step.flat(step.batch["teacher"]), T=2.0, reduction="none")
        return losses.ce(logits, step.flat(step.batch["y"]), reduction="none") + 0.5 * kd, {"toy/kd": kd}

    def batched_after_step(self, task, extras):
        return self._ema_step

    def _ema_step(self, params, consts, static):
        return {"ema": {n: torch.lerp(e, params[n], 0.1) for n, e in consts["ema"].items()}}


@pytest.mark.parametrize("train", [{}, {"optimizer": "adam", "lr": 3e-3}])
def test_a_per_step_ema_teacher_logits_and_logged_terms_match(train):
    cfg, fed = cfg_for(**train), make_fed(SIZES)
    assert EmaDistill(cfg, MethodParams()).batched_support() is None
    runs = []
    for ex in (SequentialExecutor(), BatchedExecutor()):
        method = EmaDistill(cfg, MethodParams())
        ctx = tiny_context(fed, cfg)
        state = method.init(ctx)
        loop = RoundLoop(method, ctx, ClientSampler(fed.num_clients, 1.0, 0), ClientStateStore(fed.num_clients))
        runs.append(ex.run_clients(method, loop._tasks(state, list(range(fed.num_clients)), {})))
    assert_same_updates(runs[1], runs[0])
    for us, ub in zip(*runs, strict=True):
        assert "toy/kd" in ub.metrics
        for k, v in us.uploads["ema"].items():
            torch.testing.assert_close(ub.uploads["ema"][k], v, rtol=0, atol=1e-5)


@pytest.mark.parametrize("method", ["fedavg", "fednoro", "fedgr"])
def test_an_interrupted_batched_run_resumes_bit_identically(tmp_path, method):
    # FedGR: two warm-up rounds (one pass at half the clients), then the cut falls in its main phase,
    # whose EMA teachers and label caches live in client state
    extra = ["method.params.warmup_rounds=1"] if method in ("fednoro", "fedgr") else []
    fast = ["train.device=cpu", "train.rounds=4", "train.local_epochs=1", "partition.num_clients=6",
            "train.client_fraction=0.5", "train.augment=weak", "train.checkpoint_every=2", "train.executor=batched"]
    cfg = load_config("configs/quickstart.yaml", [*fast, f"method.name={method}", *extra])
    full = run_experiment(cfg, tmp_path / "full")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path / "cut", callbacks=[Crash(at=3)])
    resumed = run_experiment(cfg, tmp_path / "cut", resume=tmp_path / "cut")
    assert resumed.history == full.history
    assert model_equal(tmp_path / "cut", tmp_path / "full")

"""Every method that trains batched ends a run where the sequential executor does (within 1e-5).

Whole runs pass through the methods' discrete decisions (GMM splits, confidence thresholds,
FedSIR's spectral relabel gate), where a 1e-7 difference can flip a borderline sample and
the runs then part ways legitimately. The runs below sit clear of such margins; FedSIR's
relabel gate does not, so its whole run goes without relabeling, and the relabel round (KD
on the disagreeing samples only) is compared from identical client state instead.
"""

import json

import numpy as np
import pytest
import torch

from fedcore.data.build import build
from fedcore.data.federated import FederatedDataset
from fedcore.engine.batched import BatchedExecutor
from fedcore.engine.executor import SequentialExecutor
from fedcore.engine.loop import RoundLoop
from fedcore.engine.sampler import ClientSampler
from fedcore.engine.store import ClientStateStore
from fedcore.engine.types import ServerState
from fedcore.methods.fedcorr import FedCorrInstructions
from fedcore.methods.registry import build_method
from fedcore.registries import load_config
from fedcore.run import make_context, run_experiment

# The scene is pinned here, not taken from the quickstart preset: under Adam, float rounding (1e-8
# after a round) is amplified where a weight's gradient is tiny, at a pace the scene sets. With
# the preset's harsher scene of issue 24 (7 of 10 clients at U(0.7, 1.0)) fedavg-adam-augment
# differed by 4.2e-5 on 1 of 16384 weights after two rounds (docs/performance.md, Equality).
FAST = ["train.device=cpu", "train.rounds=2", "partition.num_clients=6", "train.local_epochs=1",
        "noise.noisy_client_fraction=0.6", "noise.rate.min=0.4", "noise.rate.max=0.8"]
# Metrics the clients report (sample-weighted means over the cohort) and what the server derives
# from their uploads; test accuracy is left out (a 1e-7 change may flip one borderline image).
CLIENT_KEYS = ("train/loss", "train/steps", "lr", "relabel/agree_rate", "detect/clients_noisy", "round/clients",
               "fedgr/loss_sr", "fedgr/loss_b", "fedgr/loss_r")

CASES = {
    "fedavg": [],
    "fedavg-adam-augment": ["method.name=fedavg", "train.optimizer=adam", "train.lr=0.003", "train.augment=weak"],
    "fedprox": ["method.params.mu=0.5"],
    "symmetric_ce": [],
    "fednoro": ["method.params.warmup_rounds=1", "train.rounds=3"],  # probe, then LA-KD on noisy clients
    "fedsir": ["method.params.relabel=false"],  # identify (Adam), then LA-KD on the noisy clients
    # preprocess (one client a round: sequential in both), finetune, train; without mixup here: with it,
    # these 10 rounds end 7.4e-5 apart on an AMD EPYC (under 1e-5 on the Xeon CI ran on before), while one
    # round from identical state stays at 1e-8 (test_fedcorr_rounds_from_identical_state, below)
    "fedcorr": ["method.params.iterations=1", "train.rounds=4", "method.params.mixup_alpha=0"],
    "fedcorr-augment": ["method.name=fedcorr", "method.params.iterations=1", "train.rounds=4", "train.augment=weak"],
    # one warm-up round, then two sieved rounds: refined targets, EMA teacher (B) and R on plain views
    "fedgr": ["method.params.warmup_rounds=1", "train.rounds=3"],
    # strong student views with a separate weak view for R, B weighed per sample, the teacher reset
    # for every noisy client (coverage 1 can never be reached), the EMA without its ramp
    "fedgr-strong": ["method.name=fedgr", "method.params.warmup_rounds=1", "train.rounds=3",
                     "method.params.views=strong", "method.params.distill_on=weighted",
                     "method.params.ema_ramp=\"off\"", "method.params.beta=0.0", "method.params.reset_coverage=1.0"],
    # the robust profile: B masked to the teacher's agreement (any confidence, so it is active) at a
    # ramped lambda_B, class-wise BIC-gated sieve
    "fedgr-robust": ["method.name=fedgr", "method.params.warmup_rounds=1", "train.rounds=3",
                     "method.params.profile=robust", "method.params.distill_conf=0.0", "method.params.lambda_b_ramp=2"],
}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    return build(load_config("configs/quickstart.yaml", FAST)).save(tmp_path_factory.mktemp("data") / "art")


def _run(tmp_path, artifact, case, executor):
    extra = CASES[case]
    name = [f"method.name={case}"] if not any(e.startswith("method.name=") for e in extra) else []
    cfg = load_config("configs/quickstart.yaml", [*FAST, *name, *extra, f"train.executor={executor}"])
    out = tmp_path / executor
    return run_experiment(cfg, out, data=artifact), json.loads((out / "metrics.json").read_text())


@pytest.mark.parametrize("case", sorted(CASES))
def test_batched_equals_sequential(tmp_path, artifact, case):
    seq, seq_meta = _run(tmp_path, artifact, case, "sequential")
    bat, bat_meta = _run(tmp_path, artifact, case, "batched")
    assert (seq_meta["executor"], bat_meta["executor"]) == ("sequential", "batched")
    for k, v in seq.state.params.items():
        torch.testing.assert_close(bat.state.params[k], v, rtol=0, atol=1e-5)
    assert [h["stage"] for h in bat.history] == [h["stage"] for h in seq.history]
    for hs, hb in zip(seq.history, bat.history, strict=True):
        keys = [k for k in CLIENT_KEYS if k in hs]
        assert keys == [k for k in CLIENT_KEYS if k in hb]
        for k in keys:
            assert hb[k] == pytest.approx(hs[k], abs=1e-5), (hs["round"], k)
    # the interesting parts of each method really ran
    if case in ("fednoro", "fedsir"):
        assert max(h.get("detect/clients_noisy", 0) for h in seq.history) > 0
    if case.startswith("fedcorr"):
        assert {"preprocess", "finetune", "train"} <= {h["stage"] for h in seq.history}
    if case.startswith("fedgr"):
        main = [h for h in seq.history if h["stage"] == "train"]
        assert len(main) == 2 and all(h["fedgr/loss_b"] > 0 and h["fedgr/loss_r"] > 0 for h in main)


def _round_from_identical_state(artifact, cfg, server_state, client_states, instructions, check=None):
    """One round of every client from the same server and client state, sequential and batched:
    every client update matches (within 1e-5). check(method, task) runs on the batched side."""
    fed = FederatedDataset.load(artifact)
    updates = {}
    for name, ex in (("seq", SequentialExecutor()), ("bat", BatchedExecutor())):
        method = build_method(cfg)
        ctx = make_context(cfg, fed, torch.device("cpu"))
        state = ServerState(params=method.init(ctx).params, **server_state)
        store = ClientStateStore(fed.num_clients)
        for c, st in client_states(ctx).items():
            store.put(c, st)
        loop = RoundLoop(method, ctx, ClientSampler(fed.num_clients, 1.0, 0), store, executor=ex)
        ins = instructions(method, state)
        if check is not None and name == "bat":
            check(method, loop._tasks(state, [0], ins)[0])
        updates[name] = ex.run_clients(method, loop._tasks(state, list(range(fed.num_clients)), ins))
    for us, ub in zip(updates["seq"], updates["bat"], strict=True):
        for k in us.params:
            torch.testing.assert_close(ub.params[k], us.params[k], rtol=0, atol=1e-5)
        assert ub.metrics == pytest.approx(us.metrics, abs=1e-5)


def test_fedsir_relabel_round_from_identical_state(artifact):
    """Relabeled targets and the KD mask (disagreeing samples) in client state: LA on the clean
    clients, LA-KD on the mask of the noisy ones; every client update matches."""
    def states(ctx):  # the same draws for both executors
        rng = np.random.default_rng(0)
        return {c: {"labels": torch.as_tensor(rng.integers(0, 10, ctx.clients[c].n)),
                    "kd_mask": torch.as_tensor(rng.random(ctx.clients[c].n) < 0.4)} for c in (1, 3, 4)}

    def instructions(method, state):
        ins = method.train_instructions(state)
        assert ins.w_kd > 0
        return ins

    cfg = load_config("configs/quickstart.yaml", [*FAST, "method.name=fedsir"])
    _round_from_identical_state(artifact, cfg, {"rnd": 3, "stage": "train", "stage_round": 2,
                                                "extra": {"noisy": [1, 3, 4]}}, states, instructions)


@pytest.mark.parametrize("prox", [False, True])
def test_fedcorr_rounds_from_identical_state(artifact, prox):
    """A FedCorr round with mixup (finetune and train), and with the adaptive proximal term on top
    (pre-processing with more than one client a round), from identical client state: every client
    update matches. Whole runs with mixup amplify float rounding at a pace the machine sets (see
    the fedcorr case above); one round isolates the computation."""
    cfg = load_config("configs/quickstart.yaml", [*FAST, "method.name=fedcorr", "method.params.iterations=1"])

    def states(ctx):  # noisy clients with a fitted level: prox weight beta * level
        return {c: {"loss": np.zeros(cl.n), "loss_level": (0.1 * (c + 1), np.zeros(cl.n, dtype=bool))}
                for c, cl in enumerate(ctx.clients)}

    def instructions(method, state):
        return FedCorrInstructions(noisy=frozenset(range(len(method.ctx.clients))), prox=prox)

    def check(method, task):  # the round really takes the stacked path, mixup and (when asked) the prox term
        assert method.local_program(task).static == {"mixup": True, "prox": prox}

    _round_from_identical_state(artifact, cfg, {"rnd": 7, "stage": "train", "stage_round": 0, "extra": {}},
                                states, instructions, check)

"""Device placement in the engine, with the 'meta' device standing in for CUDA.

Any tensor made on the CPU and mixed with a meta one raises, as it would with a CUDA one.
Resume must put every checkpointed tensor back on the run's device, not only the server
params: checkpoints are read with map_location="cpu", and e.g. FedSIR/FedCorr keep
relabeled labels and KD masks in client state that the local loop indexes with the batch
positions, which live on the device.
"""

import numpy as np
import torch

from fedcore.engine.checkpoint import Checkpointer, load_checkpoint, restore, to_device
from fedcore.engine.loop import PERSONAL, LoopState
from fedcore.engine.store import ClientData, ClientStateStore, TensorStore
from fedcore.engine.types import ServerState

META = torch.device("meta")


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, list | tuple):
        for v in obj:
            yield from _tensors(v)


def test_to_device_moves_nested_tensors_and_leaves_the_rest():
    arr = np.arange(3)
    obj = {"labels": torch.arange(3), "pair": (0.5, torch.ones(2)), "list": [torch.zeros(1), 7],
           "loss": arr, "noisy": frozenset({1})}
    out = to_device(obj, META)
    assert [t.device for t in _tensors(out)] == [META] * 3
    assert isinstance(out["pair"], tuple) and out["pair"][0] == 0.5 and out["list"][1] == 7
    assert out["loss"] is arr and out["noisy"] == frozenset({1})


def test_restore_puts_params_extra_and_client_state_on_the_device(tmp_path):
    params = {"w": torch.ones(2), "n": torch.tensor(3)}
    state = ServerState(params=params, rnd=4, stage="train", stage_round=2,
                        extra={"phi_clean": dict(params), "snapshot": {"pass": 0, "params": dict(params)},
                               "sieve": {0: {"q": np.ones(3), "rate": 0.1}}, "noisy": [1]})
    clients = ClientStateStore(2)
    clients.put(0, {"labels": torch.arange(3), "kd_mask": torch.ones(3, dtype=torch.bool),
                    "ema": dict(params), "loss_level": (0.2, np.zeros(3, bool)), PERSONAL: {"w": torch.ones(2)}})
    ckpt = Checkpointer(tmp_path, "h")
    ckpt.clients = clients
    payload = load_checkpoint(ckpt.save(state, LoopState(), "latest"), "h")

    store = ClientStateStore(2)
    got, loop = restore(payload, META, store)
    assert (got.rnd, got.stage, got.stage_round, loop.stage_index) == (4, "train", 2, 0)
    for part in (got.params, got.extra, store.state_dict()):
        devices = {t.device for t in _tensors(part)}
        assert devices == {META}, devices
    assert got.extra["noisy"] == [1] and isinstance(got.extra["sieve"][0]["q"], np.ndarray)
    c0 = store.get(0)
    assert c0["labels"].dtype == torch.int64 and c0["kd_mask"].dtype == torch.bool
    assert isinstance(c0["loss_level"], tuple) and isinstance(c0["loss_level"][1], np.ndarray)
    assert store.get(1) == {}


def test_client_batches_inputs_and_labels_live_on_the_store_device():
    store = TensorStore(torch.zeros(10, 1, 4, 4, dtype=torch.uint8), [0.5], [0.25], META)
    data = ClientData(0, store, np.array([1, 3, 5, 7]), torch.arange(4))  # a CPU generator, as client_rngs gives
    batches = list(data.batches(3, torch.Generator().manual_seed(0), epochs=1)) + list(data.eval_batches(2))
    assert len(batches) == 4
    for pos in batches:
        assert {pos.device, data.x(pos).device, data.x01(pos).device, data.labels[pos].device} == {META}


def test_an_empty_client_yields_no_batches_in_epoch_and_step_mode():
    # With `steps` an empty client used to loop forever (no batch ever counted towards the steps).
    store = TensorStore(torch.zeros(4, 1, 4, 4, dtype=torch.uint8), [0.5], [0.25], torch.device("cpu"))
    empty = ClientData(0, store, np.array([], dtype=np.int64), torch.zeros(0, dtype=torch.int64))
    gen = torch.Generator().manual_seed(0)
    assert list(empty.batches(2, gen, epochs=3)) == [] and list(empty.batches(2, gen, steps=5)) == []

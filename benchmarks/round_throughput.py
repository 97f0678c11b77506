"""Client-SGD-steps per second: fedcore's engine vs a naive reference loop on identical work.

The naive loop is what FL code often looks like: a deepcopy of the global model and a
DataLoader over a per-client copy of the data for every client, then a per-key FedAvg
in Python. Both loops see the same data, the same shuffles (the engine's per-client
generators) and the same init, so they must end at the same global parameters; the
script checks that (max abs diff <= 1e-4) before it reports the speed ratio.

    python benchmarks/round_throughput.py [--model mlp|cnn] [--rounds 5] [--clients 10] [--device cpu]

Not a test: timings depend on the machine. Report the printed ratio.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from fedcore.data.build import build
from fedcore.engine.loop import LoopState, RoundLoop
from fedcore.engine.sampler import ClientSampler, client_rngs
from fedcore.engine.store import ClientStateStore
from fedcore.methods.registry import build_method
from fedcore.models import resolve_device
from fedcore.registries import load_config
from fedcore.run import make_context


def engine_run(cfg, fed, device):
    ctx = make_context(cfg, fed, device)
    method = build_method(cfg)
    state = method.init(ctx)
    init = {k: v.clone() for k, v in state.params.items()}
    loop = RoundLoop(method, ctx, ClientSampler(fed.num_clients, 1.0, cfg.seed), ClientStateStore(fed.num_clients))
    t = time.perf_counter()
    state = loop.run(state, LoopState())
    if device.type == "cuda":
        torch.cuda.synchronize()
    return state.params, time.perf_counter() - t, init, method.model


def naive_run(cfg, fed, device, init, template):
    mean = torch.tensor(fed.meta["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(fed.meta["std"]).view(1, -1, 1, 1)
    global_model = copy.deepcopy(template).cpu()
    global_model.load_state_dict(init)
    global_model.to(device)
    steps = 0
    t = time.perf_counter()
    for rnd in range(cfg.train.rounds):
        states, sizes = [], []
        for cid, idx in enumerate(fed.client_indices):
            idx_t = torch.as_tensor(idx)
            x = (fed.x_train[idx_t].float() / 255.0 - mean) / std  # a per-client copy of the data
            ds = TensorDataset(x, fed.y_train[idx_t])
            model = copy.deepcopy(global_model)
            model.train()
            opt = torch.optim.SGD(model.parameters(), lr=cfg.train.lr, momentum=cfg.train.momentum,
                                  weight_decay=cfg.train.weight_decay)
            _, gen = client_rngs(cfg.seed, rnd, cid)
            for _ in range(cfg.train.local_epochs):
                order = torch.randperm(len(ds), generator=gen).tolist()  # the engine's shuffle, replayed
                for xb, yb in DataLoader(ds, batch_size=cfg.train.batch_size, sampler=order):
                    if len(yb) < 2:
                        continue
                    xb, yb = xb.to(device), yb.to(device)
                    loss = torch.nn.functional.cross_entropy(model(xb), yb)
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
                    steps += 1
            states.append(model.state_dict())
            sizes.append(len(ds))
        total = sum(sizes)
        avg = {}
        for k in states[0]:  # per-key Python FedAvg; same rounding as the engine's fused add
            acc = torch.zeros_like(states[0][k], dtype=torch.float32)
            for s, n in zip(states, sizes, strict=True):
                acc.add_(s[k].float(), alpha=n / total)
            avg[k] = acc
        global_model.load_state_dict(avg)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return global_model.state_dict(), time.perf_counter() - t, steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--clients", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 keeps timings comparable)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = load_config("configs/quickstart.yaml", [
        f"model.name={args.model}", f"train.rounds={args.rounds}", f"partition.num_clients={args.clients}",
        f"train.local_epochs={args.epochs}", f"train.device={args.device}", "noise.type=none",
    ])
    device = resolve_device(args.device)
    fed = build(cfg)
    eng_params, eng_t, init, template = engine_run(cfg, fed, device)
    ref_params, ref_t, steps = naive_run(cfg, fed, device, init, template)
    diff = max(float((eng_params[k].float() - ref_params[k].float().to(device)).abs().max()) for k in ref_params)
    print(f"model={args.model} device={device} clients={args.clients} rounds={args.rounds} client-steps={steps}")
    print(f"engine: {steps / eng_t:9.1f} steps/s ({eng_t:.2f} s)")
    print(f"naive : {steps / ref_t:9.1f} steps/s ({ref_t:.2f} s)")
    print(f"max |param diff| = {diff:.2e} ({'OK' if diff <= 1e-4 else 'MISMATCH'})")
    print(f"speed ratio engine/naive = {ref_t / eng_t:.2f}x")
    if diff > 1e-4:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

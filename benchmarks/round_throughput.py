"""Client-SGD-steps per second: naive loop vs fedcore's sequential and batched executors, same work.

The naive loop is what FL code often looks like: a deepcopy of the global model and a
DataLoader over a per-client copy of the data for every client, then a per-key FedAvg
in Python. All three see the same data, the same shuffles (the engine's per-client
generators) and the same init, so they must end at the same global parameters. The script
checks that first (sequential vs naive within 1e-4, batched vs sequential within 1e-5 per
parameter) and exits 1 on a mismatch, then prints steps/s, the ratios to naive, and each
variant's peak RSS (VmHWM, reset before each variant, so it includes the data loaded).

    python benchmarks/round_throughput.py --model mlp --clients 20          # one setting
    python benchmarks/round_throughput.py --suite --data-root /work/data/fmnist   # docs/performance.md

Not a test: timings depend on the machine. Report the printed table with its header line.
"""

from __future__ import annotations

import argparse
import copy
import gc
import os
import platform
import re
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from fedcore.config import load_config
from fedcore.data.build import build
from fedcore.engine.batched import make_executor
from fedcore.engine.loop import LoopState, RoundLoop
from fedcore.engine.sampler import ClientSampler, client_rngs
from fedcore.engine.store import ClientStateStore
from fedcore.methods.registry import build_method
from fedcore.models import resolve_device
from fedcore.run import make_context

# (model, clients, dataset, local epochs, rounds): digits at 20 clients (Dirichlet(0.5) sizes, the
# quickstart partition) is the setting the targets refer to. Digits has 1347 training images, so
# 100 and 1000 clients use Fashion-MNIST, split IID (a Dirichlet split cannot give 1000 clients 10
# images each) and capped by --max-train (20000 in docs/performance.md: the naive CNN loop stays
# within minutes).
SUITE = [("mlp", 20, "digits", 2, 3), ("cnn", 20, "digits", 2, 1),
         ("mlp", 100, "fashion_mnist", 2, 1), ("cnn", 100, "fashion_mnist", 1, 1),
         ("mlp", 1000, "fashion_mnist", 2, 1), ("cnn", 1000, "fashion_mnist", 1, 1)]


def rss_mib(field: str = "VmHWM") -> float:
    """Peak (VmHWM) or current (VmRSS) resident memory of this process, MiB."""
    with open("/proc/self/status") as f:
        return int(re.search(field + r":\s+(\d+)", f.read()).group(1)) / 1024


def reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        pass


def engine_run(cfg, fed, device, executor: str):
    ctx = make_context(cfg, fed, device)
    method = build_method(cfg)
    state = method.init(ctx)
    init = {k: v.clone() for k, v in state.params.items()}
    ex = make_executor(executor, method, cfg.train.cohort_chunk)
    loop = RoundLoop(method, ctx, ClientSampler(fed.num_clients, 1.0, cfg.seed), ClientStateStore(fed.num_clients),
                     executor=ex)
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


def count_steps(cfg, fed) -> int:
    """Client-SGD steps of the run, replaying the engine's shuffles (the lone-sample skip included)."""
    steps, bs = 0, cfg.train.batch_size
    for rnd in range(cfg.train.rounds):
        for cid, idx in enumerate(fed.client_indices):
            n = len(idx)
            _, gen = client_rngs(cfg.seed, rnd, cid)
            for _ in range(max(cfg.train.local_epochs, 1)):
                torch.randperm(n, generator=gen)
                steps += sum(1 for s in range(0, n, bs) if min(bs, n - s) >= 2 or n < 2)
    return steps


def max_diff(a, b) -> float:
    return max(float((a[k].float() - b[k].float().to(a[k].device)).abs().max()) for k in a)


def config(args, model: str, clients: int, data: str, epochs: int, rounds: int):
    over = [f"model.name={model}", f"train.rounds={rounds}", f"partition.num_clients={clients}",
            f"train.local_epochs={epochs}", f"train.device={args.device}", "noise.type=none",
            f"data.name={data}", f"train.cohort_chunk={args.chunk}"]
    if data != "digits":
        over += ["partition.kind=iid"]
        over += [f"data.root={args.data_root}"] if args.data_root else []
        over += [f"data.max_train={args.max_train}"] if args.max_train else []
    return load_config("configs/quickstart.yaml", over)


def measure(args, model: str, clients: int, data: str, epochs: int, rounds: int) -> dict:
    cfg = config(args, model, clients, data, epochs, rounds)
    device = resolve_device(args.device)
    fed = build(cfg)
    row: dict = {"model": model, "clients": clients, "data": data, "epochs": epochs, "rounds": rounds,
                 "steps": count_steps(cfg, fed), "n_train": len(fed.y_train)}
    gc.collect()
    row["base_rss"] = rss_mib("VmRSS")
    reset_peak_rss()
    bat, row["batched_s"], init, template = engine_run(cfg, fed, device, "batched")
    row["batched_rss"] = rss_mib()
    reset_peak_rss()
    seq, row["sequential_s"], _, _ = engine_run(cfg, fed, device, "sequential")
    row["sequential_rss"] = rss_mib()
    row["diff_batched"] = max_diff(bat, seq)
    if not args.skip_naive:
        reset_peak_rss()
        ref, row["naive_s"], steps = naive_run(cfg, fed, device, init, template)
        assert steps == row["steps"], (steps, row["steps"])
        row["naive_rss"] = rss_mib()
        row["diff_naive"] = max_diff(seq, ref)
    return row


def warm_up(args) -> None:
    """First calls pay one-off costs (kernel selection, lazy imports); keep them out of the timings."""
    for model in ("mlp", "cnn"):
        measure(args, model, 4, "digits", 1, 1)


def profile(args) -> None:
    """Where the batched executor's time goes: torch.profiler's top operators for one setting."""
    from torch.profiler import profile as torch_profile

    cfg = config(args, args.model, args.clients, args.data, args.epochs, args.rounds)
    fed, device = build(cfg), resolve_device(args.device)
    engine_run(cfg, fed, device, "batched")  # warm
    with torch_profile() as prof:
        _, t, _, _ = engine_run(cfg, fed, device, "batched")
    print(f"# batched {args.model}, {args.clients} clients, {args.data}: {t:.2f} s under the profiler")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile))


def report(rows: list[dict], args) -> bool:
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s), device {args.device}, cohort_chunk {args.chunk}")
    print("| model | clients | data (train images) | epochs x rounds | client-steps | naive steps/s "
          "| sequential steps/s | batched steps/s | seq/naive | batched/naive | batched/seq "
          "| RSS MiB: before / peak naive / seq / batched | max diff b-s / s-n |")
    print("|" + "---|" * 13)
    ok = True
    for r in rows:
        steps = r["steps"]
        naive_s = r.get("naive_s")
        naive = f"{steps / naive_s:.0f}" if naive_s else "-"

        def ratio(t: float, naive_s=naive_s) -> str:
            return f"{naive_s / t:.2f}x" if naive_s else "-"

        rss = (f"{r['base_rss']:.0f} / {r.get('naive_rss', float('nan')):.0f} / {r['sequential_rss']:.0f} / "
               f"{r['batched_rss']:.0f}")
        dn = r.get("diff_naive", float("nan"))
        print(f"| {r['model']} | {r['clients']} | {r['data']} ({r['n_train']}) | {r['epochs']} x {r['rounds']} "
              f"| {steps} | {naive} | "
              f"{steps / r['sequential_s']:.0f} | {steps / r['batched_s']:.0f} | {ratio(r['sequential_s'])} | "
              f"{ratio(r['batched_s'])} | {r['sequential_s'] / r['batched_s']:.2f}x | {rss} | "
              f"{r['diff_batched']:.1e} / {dn:.1e} |")
        ok &= r["diff_batched"] <= 1e-5 and not dn > 1e-4
    print("parameters: " + ("OK (batched = sequential within 1e-5, sequential = naive within 1e-4)" if ok
                            else "MISMATCH"))
    return ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--data", default="digits")
    ap.add_argument("--data-root", default=None, help="dataset files for non-bundled datasets")
    ap.add_argument("--max-train", type=int, default=None, help="cap on training images (data.max_train)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=64, help="train.cohort_chunk")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 keeps timings comparable)")
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--suite", action="store_true", help="the docs/performance.md table: mlp/cnn x 20/100/1000")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="print the batched run's top N operators")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.profile:
        return profile(args)
    warm_up(args)
    settings = SUITE if args.suite else [(args.model, args.clients, args.data, args.epochs, args.rounds)]
    rows = []
    for s in settings:
        rows.append(measure(args, *s))
        print(f"done: {s}", flush=True)
    if not report(rows, args):
        raise SystemExit(1)


if __name__ == "__main__":
    main()

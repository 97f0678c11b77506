"""Client-SGD-steps per second: naive loop vs fedcore's sequential and batched executors, same work.

The naive loop is what FL code often looks like: a deepcopy of the global model and a
DataLoader over a per-client copy of the data for every client, then a per-key FedAvg
in Python. All three see the same data, the same shuffles (the engine's per-client
generators) and the same init, so they compute the same updates. The script checks that
first, on one round of two local steps per client (batched vs sequential within 1e-5 per
parameter, sequential vs naive within 1e-4; it stops otherwise), then times the full
setting and prints steps/s, the ratios to naive, each variant's peak RSS (VmHWM, reset
before each variant, so it includes the data loaded; `--suite` runs each setting in a fresh
process) and how far the variants' parameters drifted apart by the end (float rounding,
amplified by the training dynamics).

    python benchmarks/round_throughput.py --model mlp --clients 20          # one setting
    python benchmarks/round_throughput.py --suite --data-root /work/data/fmnist   # docs/performance.md

Not a test: timings depend on the machine. Report the printed table with its header line.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import platform
import re
import subprocess
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from fedcore.data.build import build
from fedcore.engine.batched import make_executor
from fedcore.engine.loop import LoopState, RoundLoop
from fedcore.engine.sampler import ClientSampler, client_rngs
from fedcore.engine.stacked import num_steps
from fedcore.engine.store import ClientStateStore
from fedcore.methods.registry import build_method
from fedcore.models import resolve_device
from fedcore.registries import load_config
from fedcore.run import make_context
from fedcore.train.local import OptimSpec

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
            for xb, yb in naive_batches(ds, cfg.train, gen):
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


def naive_batches(ds, train, gen):
    """A DataLoader per epoch over the engine's shuffles: `local_epochs` passes or `local_steps`
    batches, skipping a lone trailing sample, as the engine's loop does."""
    epochs, done = train.local_epochs, 0
    while True:
        order = torch.randperm(len(ds), generator=gen).tolist()
        for xb, yb in DataLoader(ds, batch_size=train.batch_size, sampler=order):
            done += 1
            if len(yb) >= 2 or len(ds) < 2:
                yield xb, yb
            if train.local_steps is not None and done >= train.local_steps:
                return
        if train.local_steps is None:
            epochs -= 1
            if epochs <= 0:
                return


def count_steps(cfg, fed) -> int:
    """Client-SGD steps of the run (the engine's own count)."""
    spec = OptimSpec.from_train(cfg.train)
    return cfg.train.rounds * sum(num_steps(len(idx), spec) for idx in fed.client_indices)


def max_diff(a, b) -> float:
    return max(float((a[k].float() - b[k].float().to(a[k].device)).abs().max()) for k in a)


def config(args, model: str, clients: int, data: str, epochs: int, rounds: int):
    over = [f"model.name={model}", f"train.rounds={rounds}", f"partition.num_clients={clients}",
            f"train.local_epochs={epochs}", f"train.device={args.device}", "noise.type=none", f"data.name={data}"]
    over += [f"train.cohort_chunk={args.chunk}"] if args.chunk else []
    if data != "digits":
        over += ["partition.kind=iid"]
        over += [f"data.root={args.data_root}"] if args.data_root else []
        over += [f"data.max_train={args.max_train}"] if args.max_train else []
    return load_config("configs/quickstart.yaml", over)


def check(cfg, fed, device, skip_naive: bool) -> tuple[float, float]:
    """Equal parameters first: one round of two local steps per client, every variant. Longer runs
    drift apart from float rounding at a pace the training dynamics set (reported, not checked)."""
    short = cfg.model_copy(update={"train": cfg.train.model_copy(update={"rounds": 1, "local_steps": 2})})
    bat, _, init, template = engine_run(short, fed, device, "batched")
    seq, _, _, _ = engine_run(short, fed, device, "sequential")
    naive = float("nan") if skip_naive else max_diff(seq, naive_run(short, fed, device, init, template)[0])
    return max_diff(bat, seq), naive


def measure(args, model: str, clients: int, data: str, epochs: int, rounds: int) -> dict:
    cfg = config(args, model, clients, data, epochs, rounds)
    device = resolve_device(args.device)
    fed = build(cfg)
    row: dict = {"model": model, "clients": clients, "data": data, "epochs": epochs, "rounds": rounds,
                 "steps": count_steps(cfg, fed), "n_train": len(fed.y_train)}
    row["check_batched"], row["check_naive"] = check(cfg, fed, device, args.skip_naive)
    if row["check_batched"] > 1e-5 or row["check_naive"] > 1e-4:
        raise SystemExit(f"parameters differ after two local steps: {row} (batched-sequential must be <= 1e-5, "
                         "sequential-naive <= 1e-4)")
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


def report(rows: list[dict], args) -> None:
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s), device {args.device}, cohort_chunk {args.chunk or 'auto'}")
    print("| model | clients | data (train images) | epochs x rounds | client-steps | naive steps/s "
          "| sequential steps/s | batched steps/s | seq/naive | batched/naive | batched/seq "
          "| RSS MiB: data loaded / peak naive / seq / batched | check b-s / s-n | end b-s / s-n |")
    print("|" + "---|" * 14)
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
              f"{r['check_batched']:.1e} / {r['check_naive']:.1e} | {r['diff_batched']:.1e} / {dn:.1e} |")
    print("check: max |param diff| after one round of two local steps per client (must be <= 1e-5 batched vs "
          "sequential, <= 1e-4 sequential vs naive, or the script stops); end: the same at the end of the timed run")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--data", default="digits")
    ap.add_argument("--data-root", default=None, help="dataset files for non-bundled datasets")
    ap.add_argument("--max-train", type=int, default=None, help="cap on training images (data.max_train)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=None, help="train.cohort_chunk (default: the engine's auto)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1 keeps timings comparable)")
    ap.add_argument("--skip-naive", action="store_true")
    ap.add_argument("--suite", action="store_true", help="the docs/performance.md table: mlp/cnn x 20/100/1000")
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="print the batched run's top N operators")
    ap.add_argument("--json", action="store_true", help="print the measured row as one JSON line (suite workers)")
    ap.add_argument("--rss-of", choices=["naive", "sequential", "batched"], default=None,
                    help="run only this variant and report its peak RSS (suite workers)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.profile:
        return profile(args)
    if args.rss_of:
        print("ROW " + json.dumps(rss_of(args)), flush=True)
        return
    rows = suite(args) if args.suite else [measure_fresh(args)]
    if args.json:
        print("ROW " + json.dumps(rows[0]), flush=True)
    else:
        report(rows, args)


def measure_fresh(args) -> dict:
    warm_up(args)
    return measure(args, args.model, args.clients, args.data, args.epochs, args.rounds)


def rss_of(args) -> dict:
    """Peak RSS of one variant alone in this process, after a tiny warm-up run and the data load."""

    def run(cfg, fed, device):
        if args.rss_of == "naive":
            method = build_method(cfg)
            state = method.init(make_context(cfg, fed, device))
            naive_run(cfg, fed, device, state.params, method.model)
        else:
            engine_run(cfg, fed, device, args.rss_of)

    device = resolve_device(args.device)
    tiny = config(args, args.model, 4, "digits", 1, 1)
    run(tiny, build(tiny), device)  # one-off allocations (kernels, lazy imports) belong to the baseline
    cfg = config(args, args.model, args.clients, args.data, args.epochs, args.rounds)
    fed = build(cfg)
    gc.collect()
    base = rss_mib("VmRSS")
    reset_peak_rss()
    run(cfg, fed, device)
    return {"base_rss": base, "peak_rss": rss_mib()}


def _worker(args, model, clients, data, epochs, rounds, *extra) -> dict:
    cmd = [sys.executable, __file__, "--json", "--model", model, "--clients", str(clients), "--data", data,
           "--epochs", str(epochs), "--rounds", str(rounds), "--device", args.device, "--threads", str(args.threads),
           *extra]
    for flag, value in (("--data-root", args.data_root), ("--max-train", args.max_train), ("--chunk", args.chunk)):
        cmd += [flag, str(value)] if value else []
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(next(ln for ln in out.splitlines() if ln.startswith("ROW "))[4:])


def suite(args) -> list[dict]:
    """Each setting in a fresh process (timings and the check), and each variant's RSS in one of its
    own: freed memory stays in the process, so a variant run after another would inherit its peak."""
    rows = []
    for setting in SUITE:
        row = _worker(args, *setting, *(["--skip-naive"] if args.skip_naive else []))
        for variant in ("batched", "sequential") + (() if args.skip_naive else ("naive",)):
            alone = _worker(args, *setting, "--rss-of", variant)
            row[f"{variant}_rss"], row["base_rss"] = alone["peak_rss"], alone["base_rss"]
        rows.append(row)
        print(f"done: {setting}", flush=True)
    return rows


if __name__ == "__main__":
    main()

"""FedAvg on the same work in Flower's simulation engine and in fedcore (sequential and batched), side by side.

The same Fashion-MNIST preset (default configs/fmnist/fedsir_09.yaml run as FedAvg), the same client
partition and noisy labels (the artifact fedcore trains on, exported by benchmarks/peer_data.py), the same
model and initial weights, optimizer, lr, weight decay, batch size, local epochs, rounds and clients per
round (all of them), one thread each. Each framework runs in a fresh process; wall time is that process
from start to exit (interpreter, imports, Ray start-up, data, training, evaluation); s/round is the median
time between two consecutive evaluated rounds after the first; peak RSS is the largest sum over the
process and its children (Ray's workers), sampled every 0.2 s.

    make bench-peers                                   # MLP then CNN (CNN: --cnn-rounds rounds)
    python benchmarks/vs_flower.py --model mlp --json  # one line: flower_s, fedcore_*_s, acc_*

Both evaluate the global model on the test split after every round. fedcore's evaluation also scores
memorization of every noisy training sample (a forward pass over the training set); by default the
benchmark turns that off (`train.memorization=false`) so both do the same work; `--fedcore-eval full`
keeps it, as a user's run has it. The two draw their shuffles from different
generators, so their accuracies differ by what the order of batches does (see `--explain`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def tree_rss_peak(proc: subprocess.Popen, samples: list[float]) -> None:
    import psutil

    try:
        root = psutil.Process(proc.pid)
    except psutil.NoSuchProcess:
        return
    while proc.poll() is None:
        total = 0
        try:
            for p in [root, *root.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            break
        samples.append(total / 2**20)
        time.sleep(0.2)


def timed(cmd: list[str], env: dict | None = None, log: Path | None = None) -> tuple[float, float]:
    """Wall seconds and peak tree RSS (MiB) of `cmd`; stops on a non-zero exit."""
    samples: list[float] = []
    t = time.perf_counter()
    with open(log or os.devnull, "w") as out:
        proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, stdout=out,
                                stderr=subprocess.STDOUT, cwd=REPO)
        watcher = threading.Thread(target=tree_rss_peak, args=(proc, samples), daemon=True)
        watcher.start()
        rc = proc.wait()
    wall = time.perf_counter() - t
    watcher.join(timeout=1)
    if rc:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed (exit {rc}); see {log}")
    return wall, max(samples, default=float("nan"))


def prepare(args, out: Path) -> tuple[Path, Path, object]:
    """The fedcore artifact and its peer export (data, partition, noisy labels, initial weights)."""
    import peer_data
    import torch

    from fedcore.data.build import build_federated_dataset
    from fedcore.methods.registry import build_method
    from fedcore.run import make_context

    cfg = config(args)
    fed = build_federated_dataset(cfg)
    art = fed.save(out / "data")
    init = build_method(cfg).init(make_context(cfg, fed, torch.device("cpu"))).params
    return art, peer_data.export(fed, out / "peer.npz", init), cfg


def config(args):
    from fedcore.registries import load_config

    over = ["method.name=fedavg", "method.params={}", f"model.name={args.model}", "train.device=cpu",
            "train.threads=1", f"seed={args.seed}"]
    over += [f"train.rounds={args.rounds}"] if args.rounds else []
    over += ["train.memorization=false"] if args.fedcore_eval == "test" else []
    return load_config(args.config, over + args.set)


def fedcore_worker(args) -> None:
    """One `run_experiment` with a callback that stamps every round (the fedcore side's process)."""
    t0 = time.perf_counter()
    from fedcore.engine.callbacks import Callback
    from fedcore.run import run_experiment

    class Stamp(Callback):
        def __init__(self) -> None:
            self.evals: list[dict] = []

        def after_round(self, rnd, stage, metrics):
            if "test/acc" in metrics:
                self.evals.append({"round": rnd, "acc": metrics["test/acc"], "t": time.perf_counter() - t0})

    cfg = config(args)
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"executor": args.executor})})
    stamp = Stamp()
    t_run = time.perf_counter()
    run_experiment(cfg, Path(args.worker_out).with_suffix(".run"), data=args.data, callbacks=[stamp])
    Path(args.worker_out).write_text(json.dumps({"evals": stamp.evals, "t_import": t_run - t0,
                                                 "t_end": time.perf_counter() - t0}))


def summarize(name: str, wall: float, rss: float, res: dict) -> dict:
    accs = [e["acc"] for e in res["evals"]]
    ts = [e["t"] for e in res["evals"]]
    gaps = [b - a for a, b in zip(ts[1:], ts[2:], strict=False)]
    return {"name": name, "wall_s": wall, "s_per_round": statistics.median(gaps) if gaps else float("nan"),
            "first_round_at_s": ts[0] if ts else float("nan"), "last10": statistics.fmean(accs[-10:]),
            "best": max(accs), "rounds": len(accs), "peak_rss_mib": rss}


def run_all(args) -> dict:
    out = Path(args.out) / args.model
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(HERE))
    art, npz, cfg = prepare(args, out)
    t = cfg.train
    rows = []
    if not args.skip_flower:
        flower = [sys.executable, str(HERE / "flower_fedavg.py"), "--data", str(npz), "--out", str(out / "flower.json"),
                  "--model", cfg.model.name, "--width", str(cfg.model.width), "--model-params",
                  json.dumps(cfg.model.params), "--rounds", str(t.rounds), "--epochs", str(t.local_epochs),
                  "--batch-size", str(t.batch_size), "--optimizer", t.optimizer, "--lr", str(t.lr),
                  "--momentum", str(t.momentum), "--weight-decay", str(t.weight_decay), "--seed", str(cfg.seed)]
        flower += ["--fused-adam"] if t.fused_adam else []  # the same optimizer kernel on both sides
        env = {"PYTHONPATH": os.pathsep.join(p for p in (args.flwr_path, str(REPO)) if p)}
        wall, rss = timed(flower, env, out / "flower.log")
        rows.append(summarize("flower", wall, rss, json.loads((out / "flower.json").read_text())))
    for executor in ("sequential", "batched"):
        res = out / f"fedcore_{executor}.json"
        cmd = [sys.executable, str(HERE / "vs_flower.py"), "--worker", "fedcore", "--executor", executor, "--data",
               str(art), "--worker-out", str(res), "--model", args.model, "--config", args.config, "--seed",
               str(args.seed), "--fedcore-eval", args.fedcore_eval]
        cmd += ["--rounds", str(args.rounds)] if args.rounds else []
        cmd += [x for s in args.set for x in ("-s", s)]
        wall, rss = timed(cmd, {"PYTHONPATH": str(REPO)}, out / f"fedcore_{executor}.log")
        rows.append(summarize(f"fedcore_{executor}", wall, rss, json.loads(res.read_text())))
    return {"model": args.model, "config": args.config, "rounds": t.rounds, "rows": rows}


def report(result: dict) -> dict:
    by = {r["name"]: r for r in result["rows"]}
    line = {"model": result["model"], "rounds": result["rounds"]}
    for name, r in by.items():
        line[f"{name}_s"] = r["wall_s"]
    line["flower_s"] = by.get("flower", {}).get("wall_s")
    line["acc_flower"] = by.get("flower", {}).get("last10")
    line["acc_fedcore"] = by["fedcore_batched"]["last10"]
    line["acc_fedcore_sequential"] = by["fedcore_sequential"]["last10"]
    if line["flower_s"]:
        line["flower_over_batched"] = line["flower_s"] / line["fedcore_batched_s"]
        gap = abs(line["acc_flower"] - line["acc_fedcore"])
        if gap > 0.01:
            line["gap_note"] = (
                f"last-10 differs by {gap * 100:.1f} points. Same algorithm, data, init and hyper-parameters; what "
                "differs is the batch order (Flower's clients draw their shuffles from their own generators, "
                "fedcore's from the engine's per-client ones). For scale: fedcore's two executors, on identical "
                f"shuffles, differ by {abs(line['acc_fedcore'] - line['acc_fedcore_sequential']) * 100:.1f} points "
                "(float rounding only).")
    line["rows"] = result["rows"]
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/fmnist/fedsir_09.yaml")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--rounds", type=int, default=None, help="train.rounds (default: the config's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-s", "--set", action="append", default=[], help="extra config override for both, key=value")
    ap.add_argument("--out", default="runs/bench-peers")
    ap.add_argument("--flwr-path", default=os.environ.get("FLWR_PATH", ""),
                    help="folder with flwr[simulation] (pip --target); empty: flwr must be importable")
    ap.add_argument("--fedcore-eval", choices=["test", "full"], default="test",
                    help="test: fedcore evaluates what Flower does (test split); full: also memorization")
    ap.add_argument("--skip-flower", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--worker", choices=["fedcore"], help=argparse.SUPPRESS)
    ap.add_argument("--executor", default="batched", help=argparse.SUPPRESS)
    ap.add_argument("--data", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return fedcore_worker(args)
    line = report(run_all(args))
    if args.json:
        print(json.dumps(line), flush=True)
        return
    print(f"# {line['model']}, {args.config}, {line['rounds']} rounds, one thread each")
    print("| framework | wall s | s/round (later rounds) | first round done at s | last-10 acc | best acc "
          "| peak RSS MiB |")
    print("|---|---|---|---|---|---|---|")
    for r in line["rows"]:
        print(f"| {r['name']} | {r['wall_s']:.1f} | {r['s_per_round']:.2f} | {r['first_round_at_s']:.1f} | "
              f"{r['last10']:.4f} | {r['best']:.4f} | {r['peak_rss_mib']:.0f} |")
    if "flower_over_batched" in line:
        print(f"Flower / fedcore batched wall: {line['flower_over_batched']:.2f}x")
    if "gap_note" in line:
        print(line["gap_note"])


if __name__ == "__main__":
    main()

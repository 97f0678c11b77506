"""Speed-up of one experiment on 2 torch.distributed processes (gloo, CPU) against 1, same work.

Both variants run the same config under torchrun (`--standalone --nproc-per-node N`): with
N = 1 the run is the plain sequential one-process run (no process group), with N = 2 each
rank trains its share of every round through the distributed executor. The script checks
that both wrote the same final params bit for bit and the same metrics (apart from the
`executor` field), and stops otherwise; then it prints each variant's wall time (the whole
torchrun process, interpreter start and imports included) and the time rank 0 spent inside
`run_experiment` (data, rounds, evaluation, outputs), and the ratios 1-process / 2-process.
It also prints the CPU time each rank spent inside `run_experiment` (the busiest rank for 2
processes): on a machine whose cores are shared with other jobs the wall-clock ratio measures
the contention, while 1-process CPU / busiest-rank CPU estimates the speed-up on free cores.

    python benchmarks/distributed_speedup.py                      # docs/performance.md
    python benchmarks/distributed_speedup.py --rounds 4 --clients 10

The workload is FedAvg with the small CNN on digits, every client in every round, so a
round is mostly local training, the part the ranks split. Not a test: timings depend on the
machine; with 2 processes on 2 shared cores the figure is noisy.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"


def overrides(args: argparse.Namespace) -> list[str]:
    return [f"model.name={args.model}", f"partition.num_clients={args.clients}", "train.client_fraction=1.0",
            f"train.local_epochs={args.epochs}", f"train.rounds={args.rounds}", "train.device=cpu",
            "train.executor=sequential", "train.threads=1", "tracking.backend=none"]


def worker(args: argparse.Namespace) -> None:
    """One rank: run the experiment, then print its wall and CPU time inside run_experiment as JSON."""
    from fedcore.engine.distributed import init_distributed, shutdown
    from fedcore.registries import load_config
    from fedcore.run import run_experiment

    cfg = load_config(CONFIG, overrides(args))
    info = init_distributed(torch.device("cpu"))
    try:
        start, cpu = time.perf_counter(), time.process_time()
        run_experiment(cfg, args.out, dist=info)
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        shutdown(info)
    print("RESULT " + json.dumps({"rank": 0 if info is None else info.rank, "run_s": elapsed, "cpu_s": cpu}),
          flush=True)


def launch(nproc: int, out: Path, args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           __file__, "--worker", "--out", str(out), "--model", args.model, "--clients", str(args.clients),
           "--epochs", str(args.epochs), "--rounds", str(args.rounds)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    wall = time.perf_counter() - start
    if proc.returncode:
        sys.exit(f"{nproc}-process run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    ranks = [json.loads(ln.removeprefix("RESULT ")) for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    main = next(r for r in ranks if r["rank"] == 0)
    return {"wall_s": wall, "run_s": main["run_s"], "cpu_s": max(r["cpu_s"] for r in ranks)}


def same_result(one: Path, two: Path) -> bool:
    p1, p2 = torch.load(one / "model.pt"), torch.load(two / "model.pt")
    m1, m2 = (json.loads((d / "metrics.json").read_text()) for d in (one, two))
    m1.pop("executor"), m2.pop("executor")
    return p1.keys() == p2.keys() and all(torch.equal(p1[k], p2[k]) for k in p1) and m1 == m2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--model", default="cnn")
    ap.add_argument("--clients", type=int, default=20)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    with tempfile.TemporaryDirectory(prefix="fedcore-dist-bench-") as tmp:
        times = {n: launch(n, Path(tmp) / f"n{n}", args) for n in (1, 2)}
        if not same_result(Path(tmp) / "n1", Path(tmp) / "n2"):
            sys.exit("the 2-process run differs from the 1-process run; not timing a wrong result")
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, 1 thread per process, "
          f"{args.model} on digits, {args.clients} clients x {args.epochs} local epochs x {args.rounds} rounds, "
          "FedAvg, every client every round; final params and metrics equal: yes")
    print("| processes | wall s | run_experiment s (rank 0) | run_experiment CPU s (busiest rank) |")
    print("|---|---|---|---|")
    for n, t in times.items():
        print(f"| {n} | {t['wall_s']:.1f} | {t['run_s']:.1f} | {t['cpu_s']:.1f} |")
    print(f"speed-up 1 -> 2 processes: wall {times[1]['wall_s'] / times[2]['wall_s']:.2f}x, "
          f"run_experiment {times[1]['run_s'] / times[2]['run_s']:.2f}x, "
          f"CPU of the busiest rank {times[1]['cpu_s'] / times[2]['cpu_s']:.2f}x")


if __name__ == "__main__":
    main()

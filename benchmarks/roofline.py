"""How close a round's training comes to one CPU thread's FP32 peak: measured peak, counted FLOPs, achieved fraction.

1. Peak: the sustained FP32 GFLOP/s of a large square GEMM (`--gemm` n, median of timed repeats of at
   least `--seconds` each) on the threads torch has (1 by default), and of the preset CNN's convolution
   shapes, forward and backward, per client (batch B) and stacked as the batched executor runs them
   (K clients side by side along the channels, one convolution with K times the groups).
2. Work: the FLOPs of one training round of the preset (`configs/fmnist/fedsir_09.yaml`: FedAvg, 10
   clients, ~1000 images each, Adam, batch 32), counted by `torch.utils.flop_counter.FlopCounterMode`
   on the sequential executor, i.e. the useful work (the batched executor's count is printed too: it
   adds the padding of short batches).
3. Achieved: that count over each executor's training time for the round (engine only, no evaluation),
   as a fraction of the GEMM peak.

    python benchmarks/roofline.py                  # MLP and CNN on the preset, a table
    python benchmarks/roofline.py --json           # one line: peak_gflops, mlp_batched_frac, cnn_batched_frac

FlopCounterMode counts matrix products and convolutions (mm, addmm, bmm, baddbmm, convolution and
their backwards), 2 FLOPs a multiply-add; elementwise ops, norms, the loss and the optimizer step are
not counted: they are memory-bound, and what the peak measures is the arithmetic a GEMM can reach.
Not a test: the numbers depend on the machine (tests/benchmarks/test_roofline.py checks the count).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from round_throughput import engine_run  # noqa: E402  (a sibling script, not a package)

from fedcore.data.build import build  # noqa: E402
from fedcore.registries import load_config  # noqa: E402

PRESET = "configs/fmnist/fedsir_09.yaml"


def mlp_step_flops(in_dim: int, width: int, classes: int, batch: int) -> int:
    """Hand count of one SGD step of fedcore's MLP (in -> width -> width -> classes) on `batch` samples:
    the forward GEMMs, the weight gradients (the same sizes again) and the input gradients of the
    second and third layers (the first layer's input is data, which needs no gradient)."""
    fwd = 2 * batch * (in_dim * width + width * width + width * classes)
    return 2 * fwd + 2 * batch * (width * width + width * classes)


def count_flops(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def _timed(fn, seconds: float, reps: int = 5) -> float:
    """Median seconds per call over `reps` timed blocks of at least `seconds` each."""
    fn()
    per_call = []
    for _ in range(reps):
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            dt = time.perf_counter() - t0
            if dt >= seconds:
                break
        per_call.append(dt / n)
    return statistics.median(per_call)


def gemm_gflops(n: int, seconds: float) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    return 2 * n**3 / _timed(lambda: torch.mm(a, b, out=out), seconds) / 1e9


def conv_shapes(model: torch.nn.Module, in_shape: tuple[int, ...]) -> list[dict]:
    """Every Conv2d of `model` with the shape of its input, from one forward pass."""
    shapes = []

    def hook(m, inputs, output):
        shapes.append({"c_in": m.in_channels, "c_out": m.out_channels, "hw": list(inputs[0].shape[2:]),
                       "k": list(m.kernel_size), "padding": list(m.padding), "stride": list(m.stride)})

    handles = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        model(torch.zeros(1, *in_shape))
    for h in handles:
        h.remove()
    return shapes


def conv_gflops(shape: dict, batch: int, k: int, seconds: float) -> float:
    """Forward + backward GFLOP/s of one conv shape for `k` clients stacked (k=1: one client)."""
    x = torch.randn(batch, k * shape["c_in"], *shape["hw"], requires_grad=shape["c_in"] > 1)
    w = torch.randn(k * shape["c_out"], shape["c_in"], *shape["k"], requires_grad=True)

    def step():
        out = F.conv2d(x, w, None, shape["stride"], shape["padding"], 1, k)
        out.backward(torch.ones_like(out))

    flops = count_flops(step)
    return flops / _timed(step, seconds, reps=3) / 1e9


def preset(model: str, epochs: int | None, extra: list[str]):
    over = ["method.name=fedavg", "method.params={}", "train.rounds=1", f"model.name={model}", "train.device=cpu"]
    over += [f"train.local_epochs={epochs}"] if epochs else []
    return load_config(PRESET, over + extra)


def round_row(model: str, args, peak: float) -> dict:
    cfg = preset(model, args.epochs if model == "mlp" else args.cnn_epochs, args.set)
    fed = build(cfg)
    device = torch.device("cpu")
    row: dict = {"model": model, "local_epochs": cfg.train.local_epochs, "clients": fed.num_clients}
    row["flops_round"] = count_flops(lambda: engine_run(cfg, fed, device, "sequential"))
    row["flops_round_batched"] = count_flops(lambda: engine_run(cfg, fed, device, "batched"))
    for executor in ("sequential", "batched"):
        engine_run(cfg, fed, device, executor)  # warm: kernel choice, the drawn-batch tables' first allocation
        row[f"{executor}_s"] = min(engine_run(cfg, fed, device, executor)[1] for _ in range(args.repeats))
        row[f"{executor}_gflops"] = row["flops_round"] / row[f"{executor}_s"] / 1e9
        row[f"{executor}_frac"] = row[f"{executor}_gflops"] / peak
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gemm", type=int, default=2048, help="side of the square FP32 GEMM that measures the peak")
    ap.add_argument("--seconds", type=float, default=1.0, help="length of one timed block")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=None, help="MLP local epochs (default: the preset's 5)")
    ap.add_argument("--cnn-epochs", type=int, default=1, help="CNN local epochs (1: a round of ~0.5 TFLOP)")
    ap.add_argument("--repeats", type=int, default=2, help="timed rounds per executor (the fastest is kept)")
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("-s", "--set", action="append", default=[], help="extra config override, key=value")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    peak = gemm_gflops(args.gemm, args.seconds)
    cnn = build_cnn()
    convs = []
    for shape in conv_shapes(cnn, (1, 28, 28)):
        convs.append({**shape, "gflops_1": conv_gflops(shape, 32, 1, args.seconds / 2),
                      "gflops_10": conv_gflops(shape, 32, 10, args.seconds / 2)})
    rows = [round_row(m, args, peak) for m in args.models.split(",")]
    out = {"peak_gflops": peak, "gemm_n": args.gemm, "threads": torch.get_num_threads(), "convs": convs,
           "rounds": rows, "torch": torch.__version__}
    for r in rows:
        out[f"{r['model']}_batched_frac"] = r["batched_frac"]
        out[f"{r['model']}_sequential_frac"] = r["sequential_frac"]
    if args.json:
        print(json.dumps(out), flush=True)
        return
    report(out)


def build_cnn() -> torch.nn.Module:
    from fedcore.models.build import build_model

    return build_model(preset("cnn", None, []).model, (1, 28, 28), 10)


def report(out: dict) -> None:
    print(f"# {out['threads']} thread(s), torch {out['torch']}: FP32 GEMM {out['gemm_n']}^3 "
          f"{out['peak_gflops']:.1f} GFLOP/s (the peak below)")
    print("| conv (c_in -> c_out, HxW, batch 32) | 1 client GFLOP/s | 10 stacked GFLOP/s | of peak (1 / 10) |")
    print("|---|---|---|---|")
    for c in out["convs"]:
        print(f"| {c['c_in']} -> {c['c_out']}, {c['hw'][0]}x{c['hw'][1]} | {c['gflops_1']:.1f} | "
              f"{c['gflops_10']:.1f} | {c['gflops_1'] / out['peak_gflops']:.0%} / "
              f"{c['gflops_10'] / out['peak_gflops']:.0%} |")
    print("| model | local epochs | GFLOP a round (seq / batched count) | sequential s | batched s "
          "| sequential GFLOP/s (of peak) | batched GFLOP/s (of peak) |")
    print("|---|---|---|---|---|---|---|")
    for r in out["rounds"]:
        print(f"| {r['model']} | {r['local_epochs']} | {r['flops_round'] / 1e9:.1f} / "
              f"{r['flops_round_batched'] / 1e9:.1f} | {r['sequential_s']:.2f} | {r['batched_s']:.2f} | "
              f"{r['sequential_gflops']:.1f} ({r['sequential_frac']:.0%}) | "
              f"{r['batched_gflops']:.1f} ({r['batched_frac']:.0%}) |")


if __name__ == "__main__":
    main()

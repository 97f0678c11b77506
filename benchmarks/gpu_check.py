"""The first run on a GPU: batched against sequential on one device, bf16 autocast off and on, and a short FedAvg run.

Each model (the MLP, the GroupNorm CNN, a CIFAR-shaped ResNet-18 with GroupNorm: the batched executor
refuses BatchNorm) trains on synthetic uint8 images through the engine's round loop, once per executor,
after a warm-up run of the same shape (kernel selection, cuDNN autotuning and lazy imports stay out of
the timings). `engine_run` synchronizes CUDA before it stops the clock, so the times are the device's.
Then one Fashion-MNIST FedAvg run of `--fedavg-rounds` rounds through `run_experiment` (the whole
run: data, training, evaluation, outputs), and the same run with `train.fused_adam`. Everything goes
out as one JSON line on stdout.

    bash benchmarks/gpu_check.sh                       # CUDA, sizes for a ~5 minute check
    bash benchmarks/gpu_check.sh --device cpu --tiny   # what tests/test_gpu_check.py runs

bf16 rows run the same work under `torch.autocast(dtype=torch.bfloat16)`: parameters, gradients and the
optimizer stay float32, so the batched-sequential difference there is bf16 rounding, reported, not checked.
The float32 rows stop the script when the two executors differ by more than 1e-4 (docs/performance.md,
Equality: rounding of a stacked GEMM against one GEMM per client, amplified by training).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from round_throughput import engine_run, max_diff  # noqa: E402  (a sibling script, not a package)

import fedcore.data.build as build_mod  # noqa: E402
from fedcore.data.datasets import RawDataset  # noqa: E402
from fedcore.registries import load_config  # noqa: E402
from fedcore.run import run_experiment  # noqa: E402

# model name, extra config, image shape (C, H, W)
MODELS = {
    "mlp": ([], (1, 28, 28)),
    "cnn": (["model.params.norm=group"], (1, 28, 28)),
    "resnet18_cifar": (["model.params.norm=group"], (3, 32, 32)),
}
FLOAT32_TOL = 1e-4


def synthetic(n_train: int, n_test: int, shape: tuple[int, int, int], seed: int = 0) -> RawDataset:
    """Random images and labels: the check times the device, not learning."""
    rng = np.random.default_rng(seed)
    return RawDataset(name="synthetic", x_train=rng.integers(0, 256, (n_train, *shape), dtype=np.uint8),
                      y_train=rng.integers(0, 10, n_train), x_test=rng.integers(0, 256, (n_test, *shape),
                                                                                  dtype=np.uint8),
                      y_test=rng.integers(0, 10, n_test), num_classes=10, mean=(0.5,) * shape[0],
                      std=(0.25,) * shape[0])


def synthetic_config(args, model: str, steps: int, rounds: int):
    extra, _ = MODELS[model]
    over = [f"model.name={model}", f"partition.num_clients={args.clients}", "partition.kind=iid",
            "noise.type=none", f"train.rounds={rounds}", f"train.local_steps={steps}",
            f"train.batch_size={args.batch}", f"train.device={args.device}", "train.optimizer=sgd",
            "train.lr=0.01", *extra]
    return load_config("configs/quickstart.yaml", over)


def autocast(device: torch.device, bf16: bool):
    return torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()


def time_model(args, model: str, bf16: bool) -> dict:
    """Batched and sequential on the same synthetic work; the warm-up run is one round of one step."""
    shape = MODELS[model][1][:1] + (args.tiny_px,) * 2 if args.tiny else MODELS[model][1]
    n_train = args.clients * args.batch * args.steps
    raw = synthetic(n_train, args.batch * 4, shape)
    real = build_mod.load_dataset
    build_mod.load_dataset = lambda cfg: raw
    try:
        fed = build_mod.build(synthetic_config(args, model, args.steps, args.rounds))
        warm = build_mod.build(synthetic_config(args, model, 1, 1))
    finally:
        build_mod.load_dataset = real
    device = torch.device(args.device)
    row: dict = {"model": model, "bf16": bf16, "clients": args.clients, "local_steps": args.steps,
                 "rounds": args.rounds, "batch": args.batch, "image": list(shape)}
    with autocast(device, bf16):
        for executor in ("batched", "sequential"):
            engine_run(synthetic_config(args, model, 1, 1), warm, device, executor)
        bat, row["batched_s"], _, _ = engine_run(synthetic_config(args, model, args.steps, args.rounds), fed,
                                                 device, "batched")
        seq, row["sequential_s"], _, _ = engine_run(synthetic_config(args, model, args.steps, args.rounds), fed,
                                                    device, "sequential")
    row["speedup"] = row["sequential_s"] / row["batched_s"]
    row["client_steps_per_s_batched"] = args.clients * args.steps * args.rounds / row["batched_s"]
    row["max_param_diff"] = max_diff(bat, seq)
    if device.type == "cuda":
        row["peak_mem_mib"] = torch.cuda.max_memory_allocated() / 2**20
        torch.cuda.reset_peak_memory_stats()
    if not bf16 and row["max_param_diff"] > FLOAT32_TOL:
        raise SystemExit(f"batched and sequential differ by {row['max_param_diff']:.2e} > {FLOAT32_TOL} "
                         f"on {model} (float32): {row}")
    return row


def fedavg_run(args, fused_adam: bool = False) -> dict:
    """One FedAvg run of the Fashion-MNIST preset, the whole `run_experiment` timed (fused_adam: with
    train.fused_adam, torch's fused Adam kernel, when the preset trains with Adam)."""
    over = ["method.name=fedavg", "method.params={}", f"train.rounds={args.fedavg_rounds}",
            f"train.device={args.device}", "train.threads=1", f"train.fused_adam={str(fused_adam).lower()}"]
    over += [f"data.root={args.data_root}"] if args.data_root else []
    cfg = load_config(args.fedavg_config, over)
    with tempfile.TemporaryDirectory() as out:
        t = time.perf_counter()
        res = run_experiment(cfg, Path(out) / "run")
        if args.device == "cuda":
            torch.cuda.synchronize()
        wall = time.perf_counter() - t
    return {"config": args.fedavg_config, "rounds": args.fedavg_rounds, "wall_s": wall,
            "s_per_round": wall / max(args.fedavg_rounds, 1), "acc": res.summary.get("final/acc"),
            "acc_best": res.summary.get("final/acc_best"), "executor": "auto"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--steps", type=int, default=20, help="local steps per client and round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--models", default="mlp,cnn,resnet18_cifar")
    ap.add_argument("--bf16-models", default=None, help="models also run under bf16 autocast (default: all)")
    ap.add_argument("--fedavg-config", default="configs/fmnist/fedsir_09.yaml")
    ap.add_argument("--fedavg-rounds", type=int, default=10)
    ap.add_argument("--data-root", default=None, help="data.root of the FedAvg run (default: the config's)")
    ap.add_argument("--tiny", action="store_true",
                    help="smoke sizes: 2 clients, 1 step, 1 round, batch 4, 12x12 images; FedAvg: quickstart, 1 round")
    args = ap.parse_args()
    if args.tiny:
        args.clients, args.steps, args.rounds, args.batch = 2, 1, 1, 4
        args.fedavg_config, args.fedavg_rounds = "configs/quickstart.yaml", 1
    args.tiny_px = 12  # smoke images: a CPU bf16 ResNet-18 on 32x32 takes half a minute to warm up
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device visible to torch; use --device cpu for the smoke run")
    torch.manual_seed(0)
    t0 = time.perf_counter()
    out: dict = {"device": args.device, "torch": torch.__version__, "machine": platform.machine(),
                 "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
                 "threads": torch.get_num_threads(), "synthetic": []}
    for model in args.models.split(","):
        for bf16 in (False, True) if model in (args.bf16_models or args.models).split(",") else (False,):
            out["synthetic"].append(time_model(args, model, bf16))
            print(f"gpu_check: {model} bf16={bf16} done at {time.perf_counter() - t0:.0f} s", file=sys.stderr,
                  flush=True)
    for key, fused in (("fedavg", False), ("fedavg_fused_adam", True)):
        try:  # the dataset may be missing on a lent machine: keep the synthetic rows either way
            out[key] = fedavg_run(args, fused)
        except Exception as err:  # noqa: BLE001
            out[key] = {"config": args.fedavg_config, "error": f"{type(err).__name__}: {err}"[:500]}
    out["total_s"] = time.perf_counter() - t0
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()

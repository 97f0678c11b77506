"""Is the batched executor's Adam drift float rounding? The same run under torch's Adam variants.

FedAvg with Adam (lr 0.003) and weak augmentation on the quickstart data (its noise scene), 6
clients, two rounds: the sequential executor with torch.optim.Adam as configured, with
foreach=True and with fused=True (kernels that round differently by about one ulp per step),
and the batched executor. If torch's own variants part as far as batched and sequential do,
on the same weights, the drift is amplified rounding, not a different update
(docs/performance.md, Equality). Takes about a minute on one CPU thread.

    python benchmarks/adam_drift.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

import fedcore.train.local as local
from fedcore.data.build import build
from fedcore.registries import load_config
from fedcore.run import run_experiment

SCENE = ["train.device=cpu", "train.rounds=2", "partition.num_clients=6", "train.local_epochs=1",
         "method.name=fedavg", "train.optimizer=adam", "train.lr=0.003", "train.augment=weak", "train.threads=1"]


def run(tmp: Path, art: Path, executor: str, **adam_kw) -> dict[str, torch.Tensor]:
    """Final global params; adam_kw: extra torch.optim.Adam arguments for the sequential loop."""
    orig = local.make_optimizer

    def make(params, spec):
        if spec.kind == "adam":
            return torch.optim.Adam(params, lr=spec.lr, weight_decay=spec.weight_decay, **adam_kw)
        return orig(params, spec)

    local.make_optimizer = make
    try:
        cfg = load_config("configs/quickstart.yaml", [*SCENE, f"train.executor={executor}"])
        return run_experiment(cfg, tmp / f"{executor}-{sorted(adam_kw)}", data=art).state.params
    finally:
        local.make_optimizer = orig


def compare(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> str:
    d = {k: (a[k] - b[k]).abs() for k in a}
    flat = torch.cat([v.flatten() for v in d.values()])
    worst = max(d, key=lambda k: d[k].max())
    return (f"max {flat.max().item():.2e} | >1e-7: {(flat > 1e-7).sum().item()}, >1e-5: {(flat > 1e-5).sum().item()} "
            f"of {flat.numel()} | worst {worst}[{int(d[worst].argmax())}]")


def main() -> None:
    torch.set_num_threads(1)
    tmp = Path(tempfile.mkdtemp())
    art = build(load_config("configs/quickstart.yaml", SCENE)).save(tmp / "art")
    seq = run(tmp, art, "sequential")
    rows = {"Adam vs Adam(foreach=True)": run(tmp, art, "sequential", foreach=True),
            "Adam vs Adam(fused=True)": run(tmp, art, "sequential", fused=True),
            "Adam vs batched (StackedAdam)": run(tmp, art, "batched")}
    for name, params in rows.items():
        print(f"{name}: {compare(seq, params)}")


if __name__ == "__main__":
    main()

"""FedAvg in Flower's simulation engine on the work exported by benchmarks/peer_data.py (the Flower side of vs_flower).

Run by benchmarks/vs_flower.py in its own process, with flwr[simulation] importable (the `bench` extra,
or PYTHONPATH to a `pip install --target` folder). The client step is what fedcore's sequential executor
does for FedAvg: a fresh torch.optim optimizer every round, `epochs` passes of shuffled batches, a lone
trailing sample skipped, the model rebuilt by fedcore's own `build_model` and loaded with the exported
initial weights. The server is Flower's message-API FedAvg (weighted by num-examples, every client every
round) with a centralized test-set evaluation after each round (round 0, the initial model, is dropped).
One Ray worker with one CPU and one torch thread: the thread budget of a one-thread fedcore run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

T0 = time.perf_counter()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402
from flwr.serverapp import Grid, ServerApp  # noqa: E402
from flwr.serverapp.strategy import FedAvg  # noqa: E402
from flwr.simulation import run_simulation  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peer_data  # noqa: E402

from fedcore.config import ModelConfig  # noqa: E402
from fedcore.models.build import build_model  # noqa: E402

ARGS = argparse.Namespace()
DATA: dict = {}


def make_model() -> torch.nn.Module:
    model = build_model(ModelConfig(name=ARGS.model, width=ARGS.width, params=json.loads(ARGS.model_params)),
                        tuple(DATA["x_train"].shape[1:]), int(DATA["num_classes"]))
    return model


def local_train(model: torch.nn.Module, cid: int, rnd: int) -> tuple[float, int]:
    x, y = peer_data.client_tensors(DATA, cid)
    gen = torch.Generator().manual_seed(ARGS.seed * 1_000_003 + rnd * 1009 + cid)
    opt = (torch.optim.Adam(model.parameters(), lr=ARGS.lr, weight_decay=ARGS.weight_decay,
                            fused=ARGS.fused_adam or None) if ARGS.optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=ARGS.lr, momentum=ARGS.momentum,
                                weight_decay=ARGS.weight_decay))
    model.train()
    total, steps = 0.0, 0
    for _ in range(ARGS.epochs):
        perm = torch.randperm(len(y), generator=gen)
        for s in range(0, len(y), ARGS.batch_size):
            idx = perm[s:s + ARGS.batch_size]
            if len(idx) < 2 <= len(y):
                continue  # a lone trailing sample, as fedcore's loop skips it
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            total, steps = total + float(loss), steps + 1
    return total / max(steps, 1), len(y)


client = ClientApp()


@client.train()
def train(msg: Message, context: Context) -> Message:
    torch.set_num_threads(1)
    _ensure_data()
    model = make_model()
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    rnd = int(msg.content["config"]["server-round"])
    loss, n = local_train(model, int(context.node_config["partition-id"]), rnd)
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord({"train_loss": loss, "num-examples": n})})
    return Message(content=content, reply_to=msg)


server = ServerApp()
EVALS: list[dict] = []


def central_eval(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    model = make_model()
    model.load_state_dict(arrays.to_torch_state_dict())
    model.eval()
    with torch.no_grad():
        x, y = peer_data.normalize(DATA, DATA["x_test"]), torch.from_numpy(DATA["y_test"])
        pred = torch.cat([model(x[s:s + 1024]).argmax(1) for s in range(0, len(y), 1024)])
    acc = float((pred == y).float().mean())
    EVALS.append({"round": server_round, "acc": acc, "t": time.perf_counter() - T0})
    return MetricRecord({"accuracy": acc})


@server.main()
def main_server(grid: Grid, context: Context) -> None:
    torch.set_num_threads(1)
    init = {k: torch.from_numpy(v) for k, v in DATA["init"].items()}
    n = len(DATA["clients"])
    strategy = FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_train_nodes=n, min_available_nodes=n)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(init), num_rounds=ARGS.rounds,
                   train_config=ConfigRecord({}), evaluate_fn=central_eval)


def _ensure_data() -> None:
    if not DATA:  # in a Ray worker: the module is imported afresh, the arguments come from the environment
        import os

        ARGS.__dict__.update(json.loads(os.environ["FEDCORE_FLOWER_ARGS"]))
        DATA.update(peer_data.load(ARGS.data))


def main() -> None:
    import os

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--model-params", default="{}")
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fused-adam", action="store_true", help="torch's fused Adam, as fedcore's train.fused_adam")
    args = ap.parse_args()
    ARGS.__dict__.update(vars(args))
    os.environ["FEDCORE_FLOWER_ARGS"] = json.dumps(vars(args))  # Ray workers inherit the driver's environment
    torch.set_num_threads(1)
    DATA.update(peer_data.load(args.data))
    t_sim = time.perf_counter()
    run_simulation(server_app=server, client_app=client, num_supernodes=len(DATA["clients"]),
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0},
                                   "init_args": {"num_cpus": 1, "include_dashboard": False}})
    Path(args.out).write_text(json.dumps({"evals": [e for e in EVALS if e["round"] > 0],
                                          "t_import": t_sim - T0, "t_end": time.perf_counter() - T0}))


if __name__ == "__main__":
    main()

"""A rank that dies: run by torchrun from tests/engine/test_distributed_runs.py.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m tests.engine.dist_kill \
        CONFIG OUT DATA KILL_RANK KILL_ROUND [dotted overrides...]

Every rank runs the experiment as `fedcore run` would; rank KILL_RANK kills itself with SIGKILL
(no cleanup, like an OOM kill or a lost node) right after round KILL_ROUND.
"""

import os
import signal
import sys

from fedcore.engine.callbacks import Callback
from fedcore.engine.distributed import init_distributed, shutdown
from fedcore.models import resolve_device
from fedcore.registries import load_config
from fedcore.run import run_experiment


class Die(Callback):
    def __init__(self, at: int) -> None:
        self.at = at

    def after_round(self, rnd, stage, metrics):
        if rnd == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str]) -> None:
    config, out, data, kill_rank, kill_round, *sets = argv
    cfg = load_config(config, sets)
    info = init_distributed(resolve_device(cfg.train.device))
    cbs = [Die(int(kill_round)) if info.rank == int(kill_rank) else Callback()]
    try:
        run_experiment(cfg, out, data=data, dist=info, callbacks=cbs)
    finally:
        shutdown(info)


if __name__ == "__main__":
    main(sys.argv[1:])

"""Launch one run over several local processes with torchrun (`fedcore run --nproc N`)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence


def torchrun_argv(nproc: int, module: str, args: Sequence[str]) -> list[str]:
    """`torchrun --standalone --nproc-per-node N -m module args...` through this interpreter.

    --standalone: one node, a free rendezvous port; several nodes are torchrun's (or a
    Kubeflow TrainJob's) business, with the same `-m fedcore run` command.
    """
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "-m", module, *args]


def launch(nproc: int, module: str, args: Sequence[str]) -> int:
    """Run the ranks and wait; torchrun's exit code (non-zero when any rank failed)."""
    return subprocess.run(torchrun_argv(nproc, module, args), check=False).returncode

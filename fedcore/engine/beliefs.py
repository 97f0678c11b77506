"""The method's latest beliefs about the noise: client verdicts, rate estimates, working labels.

`BeliefLog` sits between the loop and the scorer: it keeps the latest `Estimates` a method
reported (later rounds win, client by client) and passes them on to be scored. Written at
the end of a run, they are what a stage decided: a pipeline's identify task publishes
the verdicts, a relabel task the labels. Nothing here reads ground truth.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from fedcore.engine.types import Estimates
from fedcore.io import atomic_write_bytes

BELIEFS_FILE = "beliefs.json"
LABELS_FILE = "labels.npz"


class BeliefLog:
    """A scorer wrapper: `log(est, rnd)` records `est`, then returns `scorer(est, rnd)`."""

    def __init__(self, scorer: Callable[[Estimates, int], dict[str, float]] | None = None) -> None:
        self.scorer = scorer
        self.client_noisy: dict[int, bool] = {}
        self.client_rate: dict[int, float] = {}
        self.labels: dict[int, np.ndarray] = {}
        self.rounds: dict[str, int] = {}  # what -> last round it was reported

    def __call__(self, est: Estimates, rnd: int) -> dict[str, float]:
        for what, new, into in (("verdicts", est.client_noisy, self.client_noisy),
                                ("rates", est.client_rate, self.client_rate)):
            if new:
                into.update({int(c): v for c, v in new.items()})
                self.rounds[what] = rnd
        if est.labels:
            self.labels.update({int(c): np.asarray(v) for c, v in est.labels.items()})
            self.rounds["labels"] = rnd
        return self.scorer(est, rnd) if self.scorer is not None else {}

    def summary(self, given: list[np.ndarray] | None = None) -> dict[str, Any]:
        """JSON-able beliefs; with each client's given labels, how many samples each relabeled."""
        out: dict[str, Any] = {
            "rounds": dict(self.rounds),
            "noisy_clients": sorted(c for c, v in self.client_noisy.items() if v),
            "client_noisy": {str(c): bool(v) for c, v in sorted(self.client_noisy.items())},
            "client_rate": {str(c): float(v) for c, v in sorted(self.client_rate.items())},
        }
        if self.labels and given is not None:
            out["relabeled"] = {str(c): int(np.sum(np.asarray(given[c]) != lab))
                                for c, lab in sorted(self.labels.items())}
        return out

    def write(self, out_dir: Path, given: list[np.ndarray] | None = None) -> None:
        """beliefs.json, plus labels.npz (`client_07`: that client's working labels) when relabeled."""
        atomic_write_bytes(out_dir / BELIEFS_FILE, json.dumps(self.summary(given), indent=2).encode())
        if self.labels:
            buf = io.BytesIO()
            np.savez_compressed(buf, **{f"client_{c:02d}": v for c, v in sorted(self.labels.items())})
            atomic_write_bytes(out_dir / LABELS_FILE, buf.getvalue())
        else:  # a run resumed into the same folder must not show an earlier process's labels
            (out_dir / LABELS_FILE).unlink(missing_ok=True)

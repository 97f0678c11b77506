"""The bench's choice rule, as a pure function of result rows.

The choice per scene is the method whose TUNED setting has the best mean validation score
(`val_acc_last10`: the clients' noisy held-out split) over the reporting seeds. Test numbers
never enter it: a rule that peeked at test would pick the method that got lucky on the split
every table reports. A method takes part only with a validation score on every reporting seed
(a diverged seed leaves it out, rather than averaging it over the seeds that happened to train).
Equal means go to the method named first in alphabetical order, so that reruns agree.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

SCORE = "val_acc_last10"


def choose(rows: Iterable[Mapping[str, Any]], seeds: Iterable[int]) -> dict[str, Any]:
    """{choice, runner_up, margin, means, left_out} from rows with method, setting, seed and SCORE.

    means: each eligible method's tuned mean over `seeds`; margin: choice's mean minus the
    runner-up's (None without a runner-up); left_out: methods missing a score on some seed."""
    wanted = set(seeds)
    scores: dict[str, dict[int, float]] = {}
    methods: set[str] = set()
    for r in rows:
        if r.get("setting") != "tuned":
            continue
        methods.add(r["method"])
        if r["seed"] in wanted and r.get(SCORE) is not None:
            scores.setdefault(r["method"], {})[r["seed"]] = float(r[SCORE])
    means = {m: statistics.fmean(s.values()) for m, s in scores.items() if set(s) == wanted}
    ranked = sorted(means, key=lambda m: (-means[m], m))
    choice = ranked[0] if ranked else None
    runner_up = ranked[1] if len(ranked) > 1 else None
    margin = means[choice] - means[runner_up] if runner_up is not None else None
    return {"choice": choice, "runner_up": runner_up, "margin": margin,
            "means": {m: means[m] for m in ranked}, "left_out": sorted(methods - set(means))}

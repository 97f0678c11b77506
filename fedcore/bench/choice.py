"""The bench's choice rule, as a pure function of result rows.

The choice per scene is a method at a setting: among every method's default AND tuned setting, the
one with the best mean validation score (`val_acc_last10`: the clients' noisy held-out split) over
the reporting seeds. A default can win: a tune spends its budget on the tuning seed, and a method
whose preset is already good may end its tune at a setting that does worse on the reporting seeds.
Test numbers never enter the rule: a rule that peeked at test would pick the method that got lucky
on the split every table reports. A (method, setting) takes part only with a validation score on
every reporting seed (a diverged seed leaves it out, rather than averaging it over the seeds that
happened to train). Equal means go to the method named first in alphabetical order, then to its
default (a tune that kept its default setting reruns it: the same setting, named the simpler way),
so that reruns agree. The runner-up is the best other METHOD, so the margin says how far ahead of
the next method the choice is, not how far ahead of its own other setting.

Bench records written before the rule read both settings (no `among` in the scene) were chosen
among tuned rows only; `among=("tuned",)` recomputes them.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SCORE = "val_acc_last10"
SETTINGS = ("default", "tuned")
OLD_RULE = ("tuned",)  # what a record without `among` was chosen among


def label(row: str, setting: str) -> str:
    """'fedprox (tuned)': a candidate as bench.json's means and left_out name it (the report's groups too)."""
    return f"{row} ({setting})"


def among_of(scene: Mapping[str, Any]) -> tuple[str, ...]:
    """The settings a bench.json scene's choice was made among (a record says so, or predates both)."""
    return tuple(scene.get("among") or OLD_RULE)


def choose(rows: Iterable[Mapping[str, Any]], seeds: Iterable[int],
           among: Sequence[str] = SETTINGS) -> dict[str, Any]:
    """{choice, choice_setting, runner_up, runner_up_setting, margin, means, left_out, among} from rows
    with method, setting, seed and SCORE.

    means: each eligible candidate's mean over `seeds`, as label(row, setting), best first; margin:
    the choice's mean minus the runner-up's (None without another method); left_out: the candidates
    missing a score on some seed."""
    wanted = set(seeds)
    scores: dict[tuple[str, str], dict[int, float]] = {}
    seen: set[tuple[str, str]] = set()
    for r in rows:
        if r.get("setting") not in among:
            continue
        key = (r["method"], r["setting"])
        seen.add(key)
        if r["seed"] in wanted and r.get(SCORE) is not None:
            scores.setdefault(key, {})[r["seed"]] = float(r[SCORE])
    means = {k: statistics.fmean(s.values()) for k, s in scores.items() if set(s) == wanted}
    ranked = sorted(means, key=lambda k: (-means[k], k[0], list(among).index(k[1])))
    choice = ranked[0] if ranked else None
    runner = next((k for k in ranked if choice is not None and k[0] != choice[0]), None)
    margin = means[choice] - means[runner] if choice is not None and runner is not None else None
    return {"choice": choice and choice[0], "choice_setting": choice and choice[1],
            "runner_up": runner and runner[0], "runner_up_setting": runner and runner[1], "margin": margin,
            "means": {label(*k): means[k] for k in ranked}, "left_out": sorted(label(*k) for k in seen - set(means)),
            "among": list(among)}

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
    """{choice, choice_setting, runner_up, runner_up_setting, margin, means, left_out, among, seeds} from
    rows with method, setting, seed and SCORE.

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
            "among": list(among), "seeds": sorted(wanted)}


def choice_seeds(scene: Mapping[str, Any]) -> list[int]:
    """The seeds the choice's validation mean is over: the reporting seeds (a record from before they were
    kept: the seeds of the choice's rows with a score)."""
    if scene.get("seeds") is not None:
        return list(scene["seeds"])
    setting = scene.get("choice_setting") or among_of(scene)[-1]
    return sorted({r["seed"] for r in scene.get("rows", []) if r["method"] == scene.get("choice")
                   and r.get("setting") == setting and r.get(SCORE) is not None})


def choice_line(name: str, scene: Mapping[str, Any]) -> str:
    """'quickstart: fedsir at its tuned setting (val acc last-10 91.2%), runner-up fednoro (default) by 0.4
    points': `choice_reason` after the scene's name, '(so far)' for a scene with work left."""
    return f"{name}{' (so far)' if scene.get('still_to_run') else ''}: {choice_reason(scene)}"


def choice_reason(scene: Mapping[str, Any]) -> str:
    """Why the scene's method was chosen, in % like the tables, with a warning where one reporting
    seed leaves no spread to weigh the margin against."""
    if scene["choice"] is None:
        return "no method has a validation score on every reporting seed at either setting"
    setting = scene.get("choice_setting") or among_of(scene)[-1]  # a record from before settings: tuned
    means = scene["means"]
    mean = means.get(label(scene["choice"], setting), means.get(scene["choice"]))
    text = f"{scene['choice']} at its {setting} setting (val {scene.get('metric', 'acc')} last-10 {100 * mean:.1f}%)"
    if scene["runner_up"] is not None:
        other = f" ({scene['runner_up_setting']})" if scene.get("runner_up_setting") else ""
        text += f", runner-up {scene['runner_up']}{other} by {points(scene['margin'])} points"
        if len(choice_seeds(scene)) == 1:
            text += (" on one reporting seed, which cannot tell that margin from seed-to-seed spread (give the "
                     "grid more seeds)")
        elif ahead := runner_up_ahead(scene):
            text += f", which is ahead on seed{'s' * (len(ahead) > 1)} {', '.join(map(str, ahead))}"
    if "among" not in scene:
        text += "; chosen among tuned settings only (the rule of this record's time)"
    if scene["left_out"]:
        text += f"; left out (a seed without a score): {', '.join(scene['left_out'])}"
    return text


def points(margin: float) -> str:
    """A margin in points, with a second decimal under 0.1 (a 0.03-point lead does not read '0.0')."""
    return f"{100 * margin:.1f}" if abs(100 * margin) >= 0.1 else f"{100 * margin:.2f}"


def runner_up_ahead(scene: Mapping[str, Any]) -> list[int]:
    """The reporting seeds on which the runner-up's validation score is at least the choice's: a lead
    on the mean that some seeds reverse is within the seeds' spread."""
    def scores(method: str | None, setting: str | None) -> dict[int, float]:
        return {r["seed"]: float(r[SCORE]) for r in scene.get("rows", []) if r["method"] == method
                and r.get("setting") == (setting or among_of(scene)[-1]) and r.get(SCORE) is not None}

    mine = scores(scene["choice"], scene.get("choice_setting"))
    rival = scores(scene["runner_up"], scene.get("runner_up_setting"))
    return [s for s in choice_seeds(scene) if s in mine and s in rival and rival[s] >= mine[s]]

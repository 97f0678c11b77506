"""The tune's TPE sampler, and how a resumed tune continues its stream.

Optuna keeps a sampler's generator in the process, not in the study, so a tune that resumes (after a
kill, or with a larger --trials) would restart it from the seed and draw the first trials' points
again. Each counted trial therefore keeps the generators' state after its draw (user attr
`sampler_state`), and a resumed tune restores the last one: it draws exactly the points the same
tune run in one go would have drawn, so a grid killed and resumed ends with the same table.
"""

from __future__ import annotations

import base64

import numpy as np
import optuna

SAMPLER_STATE = "sampler_state"  # a trial's user attr: the sampler's generators after its draw


def resume_sampler(study, seed: int) -> None:
    """Continue the sampler's stream where the tune's last counted trial left it: a trial killed
    mid-run is drawn again, then the points an uninterrupted tune would have drawn (the sampler
    ignores failed trials, so it sees the same history). A study from before the state was kept
    gets a generator seeded past the trials it holds, so it draws no point twice."""
    trials = study.get_trials(deepcopy=False)
    done = [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    if not done:  # nothing counted yet: the seed's own stream, from its start
        return
    state = done[-1].user_attrs.get(SAMPLER_STATE)
    if state is None or not restore_sampler_state(study.sampler, state):
        study.sampler = new_sampler(resumed_seed(seed, len(trials)))


def new_sampler(seed: int):
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=4)


def _generators(sampler) -> list | None:
    """The numpy generators TPE draws from (its own, and its startup RandomSampler's); None where
    an Optuna version keeps them elsewhere, so that resuming falls back rather than guesses."""
    try:
        return [sampler._rng.rng, sampler._random_sampler._rng.rng]
    except AttributeError:
        return None


def sampler_state(sampler) -> list[dict] | None:
    """The sampler's generator states, JSON-safe (Optuna user attrs are JSON)."""
    if (gens := _generators(sampler)) is None:
        return None
    states = []
    for g in gens:
        kind, keys, pos, has_gauss, gauss = g.get_state(legacy=True)
        states.append({"kind": kind, "keys": base64.b64encode(np.asarray(keys, "<u4").tobytes()).decode(),
                       "pos": int(pos), "has_gauss": int(has_gauss), "gauss": float(gauss)})
    return states


def restore_sampler_state(sampler, states: list[dict]) -> bool:
    """Put `sampler_state`'s output back; False (nothing changed) if it does not fit this sampler."""
    gens = _generators(sampler)
    if gens is None or len(gens) != len(states):
        return False
    for g, s in zip(gens, states, strict=True):
        keys = np.frombuffer(base64.b64decode(s["keys"]), "<u4").astype(np.uint32)
        g.set_state((s["kind"], keys, s["pos"], s["has_gauss"], s["gauss"]))
    return True


def resumed_seed(seed: int, held: int) -> int:
    """The sampler's seed for a process that opens a study already holding `held` trials: one per
    (seed, held); `seed` itself for a fresh study."""
    return (seed * 1_000_003 + held) % 2**32 if held else seed

"""The keys in which two configs differ, named for a user (pure: no I/O, no fedcore imports).

Errors that refuse a mismatch (a resume with another config, a tune dir holding another tune)
used to print two config hashes, which a user never sees anywhere else; these name the keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def flatten(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as dotted keys -> leaf values; lists are leaves, an empty dict has no keys."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, path + "."))
        else:
            out[path] = value
    return out


def config_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(dotted key, value in `before`, value in `after`) for every key whose values differ, sorted
    by key; a key one side lacks reads None there (a config leaves unset keys out or null)."""
    a, b = flatten(before), flatten(after)
    return [(k, a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    return value if isinstance(value, str) else json.dumps(value)


def describe_diff(before: Mapping[str, Any], after: Mapping[str, Any], was: str = "before", limit: int = 4) -> str:
    """e.g. 'method.name: fedprox (run) vs fedavg; train.lr: 0.05 (run) vs 0.1', `was` naming
    where `before` comes from; past `limit` keys the rest are only named."""
    diff = config_diff(before, after)
    if not diff:
        return "no key differs"
    shown = [f"{k}: {_show(x)} ({was}) vs {_show(y)}" for k, x, y in diff[:limit]]
    rest = [k for k, _, _ in diff[limit:]]
    return "; ".join(shown) + (f"; and {len(rest)} more ({', '.join(rest)})" if rest else "")


def resume_mismatch(recorded: Mapping[str, Any] | None, current: Mapping[str, Any]) -> str:
    """What a checkpoint's recorded config (None: a checkpoint from before they recorded one)
    differs in from the config resuming it (both `ExperimentConfig.resume_dict()`)."""
    if recorded is None:
        return "it predates checkpoints that record their config, so the keys cannot be named"
    return describe_diff(recorded, current, "run")

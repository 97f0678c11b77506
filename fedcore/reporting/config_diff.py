"""The keys in which two configs differ, named for a user (no I/O; the schema only for its defaults).

Errors that refuse a mismatch (a resume with another config, a tune dir holding another tune)
used to print two config hashes, which a user never sees anywhere else; these name the keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from fedcore.config import late_defaults


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


def config_diff(before: Mapping[str, Any], after: Mapping[str, Any],
                defaults: Mapping[str, Any] | None = None) -> list[tuple[str, Any, Any]]:
    """(dotted key, value in `before`, value in `after`) for every key whose values differ, sorted
    by key; a key one side lacks reads its value in `defaults` (nested like the configs), else None
    (a config leaves unset keys out or null)."""
    a, b, d = flatten(before), flatten(after), flatten(defaults or {})
    a, b = ({k: side.get(k, d.get(k)) for k in a.keys() | b.keys()} for side in (a, b))
    return [(k, a[k], b[k]) for k in sorted(a) if a[k] != b[k]]


def _show(value: Any) -> str:
    if value is None:
        return "unset"
    return value if isinstance(value, str) else json.dumps(value)


def describe_diff(before: Mapping[str, Any], after: Mapping[str, Any], was: str = "before", limit: int = 4,
                  defaults: Mapping[str, Any] | None = None) -> str:
    """e.g. 'method.name: fedprox (run) vs fedavg; train.lr: 0.05 (run) vs 0.1', `was` naming
    where `before` comes from; past `limit` keys the rest are only named. `defaults`: as in config_diff."""
    diff = config_diff(before, after, defaults)
    if not diff:
        return "no key differs"
    shown = [f"{k}: {_show(x)} ({was}) vs {_show(y)}" for k, x, y in diff[:limit]]
    rest = [k for k, _, _ in diff[limit:]]
    return "; ".join(shown) + (f"; and {len(rest)} more ({', '.join(rest)})" if rest else "")


def resume_mismatch(recorded: Mapping[str, Any] | None, current: Mapping[str, Any], was: str = "run") -> str:
    """What a checkpoint's recorded config (None: a checkpoint from before they recorded one)
    differs in from the config resuming it (both `ExperimentConfig.resume_dict()`); also what a
    dataset artifact's recorded federation differs in (`data_identity()`, was="artifact")."""
    if recorded is None:
        return "it predates checkpoints that record their config, so the keys cannot be named"
    # A resume_dict leaves out a later field at its default (data.validation, train.grad_clip): the
    # side without it holds that default, not "unset".
    return describe_diff(recorded, current, was, defaults=late_defaults())

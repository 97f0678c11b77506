"""The served model of a run whose MLflow was down at its end: kept in the journal, logged by sync.

`TrackingCallback` logs the final model as an MLflow LoggedModel from the live module. When
that upload fails because an endpoint is down, the module cannot wait in a JSON journal, so
it is exported (torch.export, the pt2 format MLflow itself logs) into the journal's files with
its input example; `fedcore tracking sync` loads it back and logs it to the same run, with the
`model.id` / `model.uri` tags the run would have had.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedcore.tracking.journal import Journal

OP = "model"


def keep_served(journal: Journal, model: Any, example: Any, name: str, step: int) -> dict[str, Any]:
    """Export `model` (with its example batch) into the journal; returns the op to append."""
    import torch  # lazy: torch, only to log a model or tensor

    x = np.ascontiguousarray(example, dtype=np.float32)
    program = torch.export.export(model.eval(), (torch.from_numpy(x),))
    path = journal.new_file(f"{name}.pt2")
    torch.export.save(program, path)
    example_path = path.with_suffix(".example.npy")
    np.save(example_path, x)
    return {"op": OP, "path": journal.rel(path), "example": journal.rel(example_path), "name": name, "step": step}


def replay_served(inner: Any, journal: Journal, op: dict[str, Any]) -> str:
    """Log the journaled model to `inner`'s open run and tag the run with it; returns its model id."""
    import torch  # lazy: torch, only to log a model or tensor

    from fedcore.tracking.inputs import describe  # lazy: loads torch, only to log a model or dataset

    module = torch.export.load(journal.resolve(op["path"])).module()
    example = np.load(journal.resolve(op["example"]))
    model_id = inner.log_model(module, example, op["name"], op["step"])
    inner.set_tags(describe(model_id))
    return model_id

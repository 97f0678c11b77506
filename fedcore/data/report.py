"""The noise-scene report: a JSON summary per client and the rich table the CLI prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from fedcore.data.federated import FederatedDataset


def scene_report(fed: FederatedDataset) -> dict[str, Any]:
    """Per-client size, classes held, noise flag/type/target/realized rate, plus totals."""
    t = fed.truth
    clients = []
    for cid, idx in enumerate(fed.client_indices):
        clients.append({
            "client": cid,
            "size": int(len(idx)),
            "classes": int(len(np.unique(t.y_true[idx], axis=0))) if t.y_true.ndim == 1 else int(
                (t.y_true[idx].sum(axis=0) > 0).sum()),
            "noisy": bool(t.is_noisy_client[cid]),
            "type": t.noise_type[cid],
            "target_rate": _f(t.target_rate[cid]),
            "realized_rate": _f(t.realized_rate[cid]),
        })
    return {
        "dataset": fed.meta["name"],
        "task": fed.meta["task"],
        "num_clients": fed.num_clients,
        "num_train": fed.meta["num_train"],
        "num_test": fed.meta["num_test"],
        "noisy_clients": int(np.sum(t.is_noisy_client)),
        "overall_noise_rate": _f(np.mean(t.is_noisy_sample)),
        "clients": clients,
        "notes": fed.meta.get("notes", []),
    }


def _f(x: float) -> float | None:
    x = float(x)
    return None if np.isnan(x) else round(x, 4)


def print_scene(fed: FederatedDataset, console: Console) -> None:
    rep = scene_report(fed)
    table = Table(title=f"{rep['dataset']}: {rep['num_clients']} clients, "
                        f"{rep['noisy_clients']} noisy, overall noise {rep['overall_noise_rate']:.3f}")
    for col in ("client", "size", "classes", "noisy?", "type", "target rate", "realized rate"):
        table.add_column(col, justify="right" if col not in ("type", "noisy?") else "left")
    for c in rep["clients"]:
        table.add_row(
            str(c["client"]), str(c["size"]), str(c["classes"]), "yes" if c["noisy"] else "no", c["type"],
            "-" if c["target_rate"] is None else f"{c['target_rate']:.3f}",
            "-" if c["realized_rate"] is None else f"{c['realized_rate']:.3f}",
        )
    console.print(table)
    for note in rep["notes"]:
        console.print(f"note: {note}")

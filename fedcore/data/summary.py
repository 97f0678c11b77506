"""The federation summary of `fedcore data inspect`, also stored in a prepared artifact's scene.json.

Per client: its name (the data's own, for natural clients), size and classes held; the label
histogram over every client; and, where trusted labels exist, how often the labels as given
agree with them (overall and per client). It describes the data for a person; methods never read it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fedcore.data.partition import class_histogram

# `fed` is a fedcore.data.federated.FederatedDataset; it is not imported here because federated.py
# stores this summary in its scene report (an import circle otherwise).
FederatedDataset = Any


def client_class_counts(fed: FederatedDataset) -> np.ndarray:
    """(K, C) samples per client and class of the labels the clients hold (multi-label: occurrences)."""
    return class_histogram(fed.y_train.numpy(), fed.client_indices, fed.num_classes)


def client_names(fed: FederatedDataset) -> list[str]:
    """The data's name of each client, or its index when the partition is synthetic."""
    return list(fed.meta.get("client_names") or [str(k) for k in range(fed.num_clients)])


def _agreement(fed: FederatedDataset) -> dict[str, Any] | None:
    """Share of trusted samples whose given label equals the trusted one; None without trusted labels."""
    known = fed.truth.y_true_known
    if known is None or fed.task != "single" or not np.asarray(known).any():
        return None
    given, true, known = fed.y_train.numpy(), fed.truth.y_true, np.asarray(known, bool)
    per = {}
    for name, p in zip(client_names(fed), fed.client_indices, strict=True):
        k = p[known[p]]
        per[name] = {"trusted": int(len(k)), "agree": round(float(np.mean(given[k] == true[k])), 4) if len(k) else None}
    return {"trusted": int(known.sum()), "agree": round(float(np.mean(given[known] == true[known])), 4),
            "clients": per}


def federation_summary(fed: FederatedDataset) -> dict[str, Any]:
    """Clients (name, size, classes held), the label histogram, and agreement with trusted labels."""
    counts = client_class_counts(fed)
    classes = list(fed.meta.get("class_names") or range(fed.num_classes))
    return {
        "clients": [{"client": name, "size": int(len(p)), "classes": int((row > 0).sum())}
                    for name, p, row in zip(client_names(fed), fed.client_indices, counts, strict=True)],
        "label_histogram": {str(c): int(n) for c, n in zip(classes, counts.sum(axis=0), strict=True)},
        "trusted_agreement": _agreement(fed),
        "num_test": int(fed.meta["num_test"]),
        "notes": list(fed.meta.get("notes", [])),
    }

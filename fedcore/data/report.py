"""The noise-scene report: a JSON summary per client and the rich table the CLI prints.

Multi-label datasets that know their true label correlation (extras['true_corr']) also get
the premise check of consensus methods (spec fedharmony.md, v2 notes): the mean distance
from the leave-one-out consensus of the clients' label correlations to the truth, against
the mean distance from a client's own, on the clean labels and on the annotated ones. It is
data-level (it reads the clean labels here, at prepare time); no method reaches it.
"""

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
        **({"premise": premise} if (premise := premise_check(fed)) else {}),
    }


def premise_check(fed: FederatedDataset) -> dict[str, Any] | None:
    """{'clean': ..., 'annotated': ...} from `stats.correlation.premise_distances`; None without a truth."""
    truth = (fed.meta.get("extras") or {}).get("true_corr")
    if fed.task != "multi" or truth is None:
        return None
    from fedcore.stats.correlation import phi_correlation, premise_distances

    sizes = [len(idx) for idx in fed.client_indices]
    out = {}
    for name, y in (("clean", fed.truth.y_true), ("annotated", fed.y_train.numpy())):
        corrs = [phi_correlation(np.asarray(y[idx], dtype=np.float64), eps=0.0).numpy() for idx in fed.client_indices]
        res = premise_distances(corrs, sizes, np.asarray(truth, dtype=np.float64))
        out[name] = {k: (_f(v) if isinstance(v, float) else [_f(x) for x in v]) for k, v in res.items()}
    return out


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
    for name, res in rep.get("premise", {}).items():
        verdict = "holds" if res["consensus"] < res["own"] else "FAILS"
        console.print(f"premise ({name} labels): leave-one-out consensus to true correlation {res['consensus']:.3f} "
                      f"vs a client's own {res['own']:.3f} (mean over clients): {verdict}")
    for note in rep["notes"]:
        console.print(f"note: {note}")

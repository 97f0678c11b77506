"""The noise-scene table the CLI prints (the JSON summary is `fedcore.data.federated.scene_report`)."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from fedcore.data.federated import FederatedDataset, scene_report


def print_scene(fed: FederatedDataset, console: Console) -> None:
    rep = scene_report(fed)
    overall = "unknown" if rep["overall_noise_rate"] is None else f"{rep['overall_noise_rate']:.3f}"
    table = Table(title=f"{rep['dataset']}: {rep['num_clients']} clients, "
                        f"{rep['noisy_clients']} noisy, overall noise {overall}")
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


def print_federation(summary: dict[str, Any], console: Console) -> None:
    """The federation summary (`fedcore.data.summary.federation_summary`) as a table and a few lines."""
    agree = summary["trusted_agreement"]
    table = Table(title=f"{len(summary['clients'])} clients, {sum(c['size'] for c in summary['clients'])} "
                        f"training samples, {summary['num_test']} test")
    for col in ("client", "size", "classes", *(("trusted", "agree %") if agree else ())):
        table.add_column(col, justify="left" if col == "client" else "right")
    for c in summary["clients"]:
        extra = []
        if agree:
            mine = agree["clients"].get(c["client"], {})
            extra = [str(mine.get("trusted", 0)), "-" if mine.get("agree") is None else f"{100 * mine['agree']:.1f}"]
        table.add_row(c["client"], str(c["size"]), str(c["classes"]), *extra)
    console.print(table)
    hist = summary["label_histogram"]
    console.print("labels: " + ", ".join(f"{name} {n}" for name, n in hist.items()))
    if agree:
        console.print(f"trusted labels: {agree['trusted']} samples; the labels as given agree with "
                      f"{agree['agree']:.1%} of them")
    else:
        console.print("trusted labels: none, so noise rates and detection cannot be scored")
    for note in summary["notes"]:
        console.print(f"note: {note}")

"""Compare tables: best round beside last-10, and 'beats FedAvg' judged against FedAvg's best round."""

from __future__ import annotations

from fedcore.reporting.compare import beats_fedavg, comparison_rows


def rec(method: str, setting: str, last10: float, best: float, rnd: float, seed: int = 0) -> dict:
    return {"method": method, "setting": setting, "group": f"{method} · {setting}", "seed": seed,
            "summary": {"final/acc_last10": last10, "final/acc_best": best, "final/acc_best_round": rnd}}


def test_beating_fedavg_needs_its_best_round_too():
    records = [rec("fedavg", "noisy", 0.30, 0.45, 12), rec("fedavg", "clean", 0.80, 0.82, 25),
               rec("a", "noisy", 0.40, 0.41, 30),      # above FedAvg's last-10, below its best: no
               rec("b", "noisy", 0.50, 0.52, 28),      # above both: yes
               rec("c", "clean", 0.81, 0.81, 20)]      # judged against FedAvg on clean labels
    header, rows = comparison_rows(records, by="group")
    assert header[-1] == "beats FedAvg (last10 − its best)" and "best round" in header
    verdict = {row[0]: row[-1] for row in rows}
    assert verdict == {"fedavg · noisy": "-", "fedavg · clean": "-", "a · noisy": "no -0.050",
                       "b · noisy": "yes +0.050", "c · clean": "no -0.010"}
    best_round = {row[0]: row[header.index("best round")] for row in rows}
    assert best_round["fedavg · noisy"] == "12"


def test_no_fedavg_reference_means_no_verdict_column():
    records = [rec("a", "noisy", 0.4, 0.5, 3), rec("b", "noisy", 0.5, 0.6, 4)]
    header, rows = comparison_rows(records, by="group")
    assert not header[-1].startswith("beats") and beats_fedavg(records[:1], records) == "-"


def test_verdict_uses_seed_means():
    records = [rec("fedavg", "s", 0.3, 0.40, 5, 0), rec("fedavg", "s", 0.3, 0.50, 7, 1),
               rec("m", "s", 0.44, 0.5, 9, 0), rec("m", "s", 0.48, 0.5, 9, 1)]
    assert beats_fedavg(records[2:], records) == "yes +0.010"  # 0.46 vs FedAvg's mean best 0.45
    header, rows = comparison_rows(records, by="group")
    assert rows[0][header.index("best round")] == "6"  # mean of 5 and 7, printed as a round

"""Compare tables: best round beside last-10, and 'beats FedAvg' judged against FedAvg's best round (in points)."""

from __future__ import annotations

from fedcore.reporting.compare import fedavg_margin
from fedcore.reporting.terminal import console_rows


def rec(method: str, setting: str, last10: float, best: float, rnd: float, seed: int = 0) -> dict:
    return {"method": method, "setting": setting, "group": f"{method} · {setting}", "seed": seed,
            "summary": {"final/acc_last10": last10, "final/acc_best": best, "final/acc_best_round": rnd}}


def test_beating_fedavg_needs_its_best_round_too():
    records = [rec("fedavg", "noisy", 0.30, 0.45, 12), rec("fedavg", "clean", 0.80, 0.82, 25),
               rec("a", "noisy", 0.40, 0.41, 30),      # above FedAvg's last-10, below its best: no
               rec("b", "noisy", 0.50, 0.52, 28),      # above both: yes
               rec("c", "clean", 0.81, 0.81, 20)]      # judged against FedAvg on clean labels
    header, rows = console_rows(records, by="group")
    assert header[-1] == "beats FedAvg (last10 − its best, points)" and "best round" in header
    verdict = {row[0]: row[-1] for row in rows}
    assert verdict == {"fedavg · noisy": "-", "fedavg · clean": "-", "a · noisy": "no -5.0",
                       "b · noisy": "yes +5.0", "c · clean": "no -1.0"}
    best_round = {row[0]: row[header.index("best round")] for row in rows}
    assert best_round["fedavg · noisy"] == "12"


def test_no_fedavg_reference_means_no_verdict_column():
    records = [rec("a", "noisy", 0.4, 0.5, 3), rec("b", "noisy", 0.5, 0.6, 4)]
    header, rows = console_rows(records, by="group")
    assert not header[-1].startswith("beats") and fedavg_margin(records[:1], records) is None


def test_verdict_uses_seed_means():
    records = [rec("fedavg", "s", 0.3, 0.40, 5, 0), rec("fedavg", "s", 0.3, 0.50, 7, 1),
               rec("m", "s", 0.44, 0.5, 9, 0), rec("m", "s", 0.48, 0.5, 9, 1)]
    assert abs(fedavg_margin(records[2:], records) - 0.01) < 1e-12  # 0.46 vs FedAvg's mean best 0.45
    header, rows = console_rows(records, by="group")
    assert rows[0][header.index("best round")] == "6"  # mean of 5 and 7, printed as a round


def budget_rec(method: str, rounds: int, epochs: int = 5, seed: int = 0, ran: int | None = None) -> dict:
    r = rec(method, "noisy", 0.3, 0.4, 9, seed)
    r.update(rounds=ran or rounds, config={"train.rounds": str(rounds), "train.local_epochs": str(epochs),
                                           "seed": str(seed), "method.name": method})
    return r


def test_compare_warns_when_rows_differ_in_training_rounds_or_local_epochs():
    from fedcore.reporting.compare import budget_notes, budget_of

    equal = [budget_rec("fedavg", 50), budget_rec("fedavg", 50, seed=1), budget_rec("fedcorr", 50)]
    assert budget_notes(equal) == [] and budget_of(equal[0]) == "50 rounds x 5 epochs"
    (note,) = budget_notes([*equal, budget_rec("fedcorr", 100, seed=1)])  # a run given 100 rounds
    assert note.startswith("warning:") and "(fedcorr [train.rounds=100]: 100 rounds x 5 epochs;" in note
    (note,) = budget_notes([budget_rec("fedavg", 50), budget_rec("dividemix", 50, epochs=2)])
    assert "dividemix: 50 rounds x 2 epochs" in note


def test_rounds_of_a_methods_extra_stages_are_not_a_budget_difference():
    from fedcore.reporting.compare import budget_notes, extra_rounds

    # The quickstart's rows: FedSIR runs 31 rounds (one identification round on top of 30), FedRG 43
    # (13 pretraining rounds); every method was given 30 training rounds.
    rows = [budget_rec(m, 30, ran=ran) for m, ran in (("fedavg", 30), ("fedprox", 30), ("fednoro", 30),
                                                      ("fedsir", 31), ("fedrg", 43))]
    assert budget_notes(rows) == [] and [extra_rounds(r) for r in rows] == [0, 0, 0, 1, 13]
    # One row given 40 training rounds: the warning names it, and only it.
    (note,) = budget_notes([*rows, budget_rec("fedgr", 40, ran=40)])
    named = note.split("(", 1)[1]
    assert "fedgr: 40 rounds x 5 epochs" in named and "the other rows: 30 rounds x 5 epochs" in named
    assert not any(f"{m}:" in named for m in ("fedavg", "fedprox", "fednoro", "fedsir", "fedrg"))


def test_the_compare_command_prints_the_budget_warning(tmp_path):
    import json

    import yaml
    from typer.testing import CliRunner

    from fedcore.cli import app

    for name, rounds in (("fedavg", 50), ("fedcorr", 100)):
        d = tmp_path / name
        d.mkdir()
        (d / "metrics.json").write_text(json.dumps({"method": name, "seed": 0, "rounds": rounds,
                                                    "summary": {"final/acc_last10": 0.3}}))
        (d / "config.yaml").write_text(yaml.safe_dump({"train": {"rounds": rounds, "local_epochs": 5},
                                                       "method": {"name": name}, "seed": 0}))
    out = CliRunner().invoke(app, ["compare", str(tmp_path / "fedavg"), str(tmp_path / "fedcorr")])
    assert out.exit_code == 0, out.output
    assert "differ in training budget" in out.output and "100 rounds x 5 epochs" in out.output


def test_the_report_page_states_each_rows_budget_and_warns_when_they_differ():
    from fedcore.reporting.compare import group_records
    from fedcore.reporting.report import page

    records = [budget_rec("fedavg", 50), budget_rec("fedcorr", 100)]
    text = page(group_records(records), records, "acc", [])
    assert "| budget |" in text and "| 100 rounds x 5 epochs |" in text
    assert "**warning: the rows differ in training budget" in text
    same = [budget_rec("fedavg", 50), budget_rec("fedcorr", 50), budget_rec("fedrg", 50, ran=63)]
    text = page(group_records(same), same, "acc", [])
    assert "warning" not in text and "| 50 rounds x 5 epochs (+13 in extra stages) |" in text


def test_a_benchmark_drawn_anew_with_each_seed_groups_its_seeds_but_a_fixed_one_splits():
    from fedcore.reporting.compare import group_records

    def rec(method, seed, data_seed, epochs="2"):
        return {"method": method, "seed": seed, "summary": {},
                "config": {"seed": str(seed), "data.params.seed": str(data_seed), "train.local_epochs": epochs}}

    tied = [rec("fedavg", s, s) for s in (0, 1, 2)]
    assert list(group_records(tied)) == ["fedavg"] and len(group_records(tied)["fedavg"]) == 3
    # data.params.seed held at 0 and 5 while the seed varies: two benchmarks, two groups.
    fixed = [rec("fedavg", s, 0) for s in (0, 1)] + [rec("fedavg", s, 5) for s in (0, 1)]
    assert sorted(group_records(fixed)) == ["fedavg [data.params.seed=0]", "fedavg [data.params.seed=5]"]
    # Only `*.seed` keys can be seed-tied: a local_epochs that happens to equal the seed still splits.
    odd = [rec("fedavg", 1, 1, epochs="1"), rec("fedavg", 2, 2, epochs="2")]
    assert sorted(group_records(odd)) == ["fedavg [train.local_epochs=1]", "fedavg [train.local_epochs=2]"]


def test_an_empty_section_does_not_repeat_the_keys_below_it_in_a_label():
    from fedcore.reporting.compare import differing_keys, group_records

    authors = {"method.name": "fedgr", "method.params": "{}", "seed": "0"}
    robust = {"method.name": "fedgr", "method.params.profile": "robust", "seed": "0"}
    assert differing_keys([authors, robust]) == ["method.params.profile"]
    recs = [{"method": "fedgr", "config": c, "summary": {}} for c in (authors, robust)]
    assert sorted(group_records(recs)) == ["fedgr [method.params.profile=-]", "fedgr [method.params.profile=robust]"]

"""The sweep table `make run` prints: one line per row within 100 columns, method names in full."""

from __future__ import annotations

from rich.console import Console

from fedcore.cli.quickstart import QUICKSTART_METHODS
from fedcore.reporting.detection_table import detection_lines
from fedcore.reporting.terminal import terminal_rows, terminal_table

NOISY = "sym U(0.7,1.0)"
# What each method logs beyond accuracy, as the quickstart's runs log it.
DETECTS = {"fedsir": {"last/detect/client_f1": 1.0, "last/relabel/precision": 0.921},
           "fednoro": {"last/detect/client_f1": 0.933},
           "fedcorr": {"last/detect/client_f1": 0.857, "last/relabel/precision": 0.75},
           "fedgr": {"last/noise/rate_pearson": 0.41, "last/detect/sample_f1": 0.62},
           "fedrg": {"last/detect/sample_f1": 0.511, "last/detect/sample_label_nmi": 0.024}}


def record(method: str, setting: str, last10: float, seed: int = 0) -> dict:
    summary = {"final/acc_last10": last10, "final/acc": last10 + 0.004, "final/acc_best": last10 + 0.012,
               "final/acc_best_round": 27.0, "final/acc_at_val_best": last10 - 0.006,
               "last/train/memorization": 0.071, **DETECTS.get(method, {})}
    return {"method": method, "setting": setting, "group": f"{method} · {setting}", "seed": seed,
            "summary": summary}


def quickstart_records(seeds: int = 1) -> list[dict]:
    noisy = [record(m, NOISY, 0.80 + 0.01 * i, seed=s) for s in range(seeds) for i, m in enumerate(QUICKSTART_METHODS)]
    return [*noisy, *(record("fedavg", "clean", 0.942, seed=s) for s in range(seeds))]


def rendered(records: list[dict], width: int = 100) -> list[str]:
    console = Console(width=width, record=True)
    console.print(terminal_table(records, title="sweep pipeline"))
    return console.export_text().splitlines()


def test_the_quickstart_table_fits_100_columns_one_line_per_row_names_in_full():
    lines = rendered(quickstart_records())
    assert max(len(line) for line in lines) <= 100
    for method in QUICKSTART_METHODS:
        (row,) = [line for line in lines if f" {method} · {NOISY} " in line]  # the whole label, once
        if method != "fedavg":
            assert "yes +" in row or "no -" in row  # the verdict and its delta, on the row's own line
    assert "…" not in "".join(lines)
    assert any("fedavg · clean" in line for line in lines)


def test_the_table_leaves_detection_columns_to_the_report_page():
    header, rows = terminal_rows(quickstart_records())
    assert header == ["method · setting", "last-10", "best", "round", "val-pick", "memorized", "vs FedAvg"]
    by_label = {row[0]: row for row in rows}
    # FedProx at 81.0 last-10 against FedAvg's best round of 81.2 (80.0 + 1.2): 0.2 points under it.
    assert by_label[f"fedprox · {NOISY}"][1:] == ["81.0", "82.2", "27", "80.4", "7.1", "no -0.2"]
    assert by_label[f"fedavg · {NOISY}"][-1] == "-"
    page = "\n".join(detection_lines({r["group"]: [r] for r in quickstart_records()}))
    assert "| group | noise-rate Pearson | client F1 | sample F1 | flags~label NMI | relabel precision | " \
           "memorized |" in page  # no column that no method logs (flags~noise NMI)
    assert f"| fedsir · {NOISY} | - | 100.0 | - | - | 92.1 | 7.1 |" in page
    assert f"| fedgr · {NOISY} | 0.41 |" in page and f"fedavg · {NOISY}" not in page  # FedAvg detects nothing


def test_three_seeds_show_mean_and_spread_still_one_line_per_row():
    records = quickstart_records(seeds=3)
    header, rows = terminal_rows(records)
    assert header[1] == "last-10" and rows[0][1] == "80.0±0.0"  # the title says 3 seeds; no seeds column
    lines = rendered(records)
    assert "mean±std over 3 seeds" in lines[0] and max(len(line) for line in lines) <= 100
    assert all(len([line for line in lines if f" {m} · {NOISY} " in line]) == 1 for m in QUICKSTART_METHODS)
    header, rows = terminal_rows(records[:-2])  # clean FedAvg with one seed, the others with three
    assert header[1] == "seeds" and [r[1] for r in rows if r[0] == "fedavg · clean"] == ["1"]


def test_the_console_table_prints_shares_in_percent_and_the_rest_as_they_are():
    from fedcore.reporting.terminal import console_rows

    recs = [{"method": "fedsir", "setting": NOISY, "group": "g", "seed": s,
             "summary": {"final/acc_last10": acc, "final/acc_best_round": 27.0, "last/noise/rate_pearson": 0.41,
                         "last/detect/client_f1": 0.5}} for s, acc in ((0, 0.80), (1, 0.90))]
    header, rows = console_rows(recs, by="method")
    assert header == ["method", "seeds", "acc last10 %", "best round", "rate r", "client F1 %"]
    mean, std = (0.80 + 0.90) / 2, 0.10 / 2 ** 0.5  # the sample std of two seeds
    assert rows == [["fedsir", "2", f"{100 * mean:.1f} ± {100 * std:.1f}", "27", "0.410 ± 0.000",
                     f"{100 * 0.5:.1f} ± 0.0"]]


def test_the_console_tables_verdict_is_in_points():
    from fedcore.reporting.terminal import console_rows

    recs = [record("fedavg", NOISY, 0.70), record("fedsir", NOISY, 0.80)]
    header, rows = console_rows(recs, by="group")
    margin = 0.80 - (0.70 + 0.012)  # fedsir's last-10 minus fedavg's best round
    assert header[-1] == "beats FedAvg (last10 − its best, points)"
    assert rows[1][-1] == f"yes {100 * margin:+.1f}" and rows[0][-1] == "-"

def test_the_legend_explains_only_the_columns_shown():
    # Issue 71: one experiment without validation or FedAvg showed no val-pick and no vs FedAvg
    # column, but its legend explained both.
    run = record("fedprox", NOISY, 0.8)
    del run["summary"]["final/acc_at_val_best"]
    text = " ".join(" ".join(rendered([run])).split())
    assert "best, round: the best round" in text and "memorized: noisy samples fitted" in text
    assert "val-pick" not in text and "vs FedAvg" not in text
    both = " ".join(" ".join(rendered(quickstart_records())).split())
    assert "val-pick: test acc at the round" in both and "vs FedAvg: last-10 minus" in both


def test_the_run_progress_line_reads_its_score_in_percent():
    from fedcore.reporting.progress import score_text

    assert score_text({"train/loss": 2.1, "test/acc": 0.16912}) == "acc 16.9%"
    assert score_text({"test/mAP": 0.402}) == "mAP 40.2%"
    assert score_text({"train/loss": 2.1}) is None  # a round without evaluation keeps the last score


def test_the_tune_progress_line_reads_its_best_in_percent():
    import io

    from rich.console import Console

    from fedcore.reporting.progress import trial_progress

    buf = io.StringIO()
    with trial_progress(4, 0, console=Console(file=buf, width=120, force_terminal=False)) as update:
        update(2, 0, 0.41234)
    assert "best 41.23%" in buf.getvalue()

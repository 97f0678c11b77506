"""The docs' bench tables are generated from the recorded bench runs by lab/bench_tables.py:
the committed ones are not stale, an edited number makes them so, and a bad marker is one line, exit 2."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("bench_tables", ROOT / "lab" / "bench_tables.py")
bt = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bt)
RECORD = "lab/records/quickstart.json"


def _tree(tmp_path: Path, page: str) -> Path:
    """A repo-shaped tmp tree with the quickstart record and one page."""
    (tmp_path / "lab/records").mkdir(parents=True)
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / RECORD, tmp_path / RECORD)
    (tmp_path / "docs/page.md").write_text(page, encoding="utf-8")
    return tmp_path


def test_the_committed_tables_match_the_records():
    assert bt.main(["--check", "--root", str(ROOT)]) == 0, "run .venv/bin/python lab/bench_tables.py"
    # The check has something to check: the quickstart's table in baselines.md is a generated block.
    assert f"<!-- bench-table {RECORD} -->" in (ROOT / "lab/results/baselines.md").read_text(encoding="utf-8")
    # and a user guide's worked example is one too: the script reads docs/ as well as lab/results/.
    assert "<!-- bench-table lab/records/crowd.json -->" in (ROOT / "docs/federation.md").read_text(encoding="utf-8")


def test_an_edited_number_is_stale_and_a_run_rewrites_only_the_block(tmp_path, capsys):
    page = f"# Title\n\nprose 1.0\n\n<!-- bench-table {RECORD} -->\nold table\n<!-- /bench-table -->\n\nafter\n"
    root = _tree(tmp_path, page)
    assert bt.main(["--check", "--root", str(root)]) == 1
    assert "stale: docs/page.md" in capsys.readouterr().err
    assert bt.main(["--root", str(root)]) == 0
    text = (root / "docs/page.md").read_text(encoding="utf-8")
    assert text.startswith("# Title\n\nprose 1.0\n\n") and text.endswith("<!-- /bench-table -->\n\nafter\n")
    assert "old table" not in text and "| **fedsir** (chosen, tuned) | 8 (3 pruned, 0 diverged) |" in text
    assert bt.main(["--check", "--root", str(root)]) == 0
    # A changed record changes the table: the block follows the record, not the page.
    rec = json.loads((root / RECORD).read_text())
    rec["scenes"]["quickstart"]["tuned"]["fedsir"]["n_trials"] = 9
    (root / RECORD).write_text(json.dumps(rec))
    assert bt.main(["--check", "--root", str(root)]) == 1


def test_a_summary_block_names_each_row_and_scene(tmp_path):
    root = _tree(tmp_path, f"<!-- bench-table {RECORD} --summary -->\n<!-- /bench-table -->\n")
    assert bt.main(["--root", str(root)]) == 0
    text = (root / "docs/page.md").read_text(encoding="utf-8")
    assert "| method (tuned, mean last-10) | quickstart |" in text
    assert "| fedsir | 86.3 ✓ |" in text and "| fedavg | 74.8 (reference) |" in text


def test_a_per_seed_block_is_the_scenes_seed_table(tmp_path):
    from fedcore.bench.tables import load_scenes, seed_table

    root = _tree(tmp_path, f"<!-- bench-table {RECORD} --per-seed -->\n<!-- /bench-table -->\n")
    assert bt.main(["--root", str(root)]) == 0
    text = (root / "docs/page.md").read_text(encoding="utf-8")
    table = seed_table(load_scenes([ROOT / RECORD])["quickstart"], "quickstart")
    assert text == f"<!-- bench-table {RECORD} --per-seed -->\n{table}\n<!-- /bench-table -->\n"
    assert "| FedAvg test-best (bar) | " in table


def test_bad_markers_are_one_line_and_exit_2(tmp_path, capsys):
    cases = {
        "<!-- bench-table lab/records/none.json -->\n<!-- /bench-table -->\n": "no bench results at",
        f"<!-- bench-table {RECORD} --scenes nope -->\n<!-- /bench-table -->\n": "scene nope not in",
        f"<!-- bench-table {RECORD} --bogus -->\n<!-- /bench-table -->\n": "cannot read",
        f"<!-- bench-table {RECORD} -->\nno end marker\n": "has no <!-- /bench-table -->",
    }
    for i, (page, msg) in enumerate(cases.items()):
        root = _tree(tmp_path / str(i), page)
        before = (root / "docs/page.md").read_text(encoding="utf-8")
        assert bt.main(["--root", str(root)]) == 2
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1 and err.startswith("bench_tables: docs/page.md")
        assert (root / "docs/page.md").read_text(encoding="utf-8") == before  # nothing written


def test_prose_may_quote_a_marker(tmp_path):
    page = f"Blocks look like `<!-- bench-table {RECORD} -->` in prose.\n"
    root = _tree(tmp_path, page)
    assert bt.main(["--check", "--root", str(root)]) == 0
    assert (root / "docs/page.md").read_text(encoding="utf-8") == page

"""The claims tables (lab/results/README.md, the README's results section) are generated from the
method pages by lab/claims_table.py and are not stale; a changed number makes them so."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("claims_table", ROOT / "lab" / "claims_table.py")
ct = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(ct)


def _copy_repo(tmp_path: Path) -> Path:
    """The files the script reads and writes, in a tmp tree of the repo's layout."""
    (tmp_path / "lab" / "results").mkdir(parents=True)
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    for name in (*ct.PAGES, "README"):
        shutil.copy(ROOT / "lab" / "results" / f"{name}.md", tmp_path / "lab" / "results" / f"{name}.md")
    return tmp_path


def test_the_committed_tables_match_the_pages():
    assert ct.main(["--check", "--root", str(ROOT)]) == 0, "run .venv/bin/python lab/claims_table.py"


def test_every_page_has_rows_the_results_page_carries_them_all_and_the_readme_counts_them():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    results = (ROOT / "lab" / "results" / "README.md").read_text(encoding="utf-8")
    claims = []
    for name in ct.PAGES:
        rows = ct.page_claims(name, (ROOT / "lab" / "results" / f"{name}.md").read_text(encoding="utf-8"))
        assert rows
        for row in rows:
            assert row["ours"].replace("|", "\\|") in results
            assert f"({name}.md#{row['anchor']})" in results
        held = sum(r["verdict"] == "yes" for r in rows)
        assert f"{rows[0]['seed']} {held} of {len(rows)}" in readme
        claims += rows
    held = sum(r["verdict"] == "yes" for r in claims)
    assert f"**{held} of the {len(claims)} claims**" in readme and "(lab/results/README.md)" in readme


def test_a_changed_number_makes_the_table_stale_a_flipped_verdict_the_readme_too(tmp_path, capsys):
    root = _copy_repo(tmp_path)
    assert ct.main(["--check", "--root", str(root)]) == 0
    page = root / "lab" / "results" / "fedsir.md"
    text = page.read_text(encoding="utf-8")
    assert text.count("79.8 ± 0.8") >= 2  # in the claims block and in the table it summarises
    page.write_text(text.replace("79.8 ± 0.8", "79.9 ± 0.8"), encoding="utf-8")

    assert ct.main(["--check", "--root", str(root)]) == 1
    err = capsys.readouterr().err
    assert "stale: lab/results/README.md" in err and "stale: README.md" not in err  # the count is the same

    assert ct.main(["--root", str(root)]) == 0
    assert ct.main(["--check", "--root", str(root)]) == 0
    assert "79.9 ± 0.8 vs FedNoRo 78.0 ± 0.5" in (root / "lab" / "results" / "README.md").read_text(encoding="utf-8")
    text = page.read_text(encoding="utf-8")
    page.write_text(text.replace("verdict: yes", "verdict: no", 1), encoding="utf-8")
    assert ct.main(["--check", "--root", str(root)]) == 1
    assert "stale: README.md" in capsys.readouterr().err
    assert ct.main(["--root", str(root)]) == 0
    assert "FedSIR 2 of 3" in (root / "README.md").read_text(encoding="utf-8")


def test_a_row_number_missing_from_its_page_is_refused(tmp_path, capsys):
    root = _copy_repo(tmp_path)
    page = root / "lab" / "results" / "fedgr.md"
    text = page.read_text(encoding="utf-8")
    block = ct.BLOCK.search(text).group(0)  # 91.7: a number the page lacks
    page.write_text(text.replace(block, block.replace("27.5 ± 3.3 vs FedAvg", "91.7 ± 3.3 vs FedAvg")),
                    encoding="utf-8")
    assert ct.main(["--check", "--root", str(root)]) == 2
    assert "fedgr.md: claim 1: ours number 91.7 appears nowhere else on the page" in capsys.readouterr().err


def test_the_readme_outside_the_markers_is_kept(tmp_path):
    root = _copy_repo(tmp_path)
    readme = root / "README.md"
    readme.write_text(readme.read_text(encoding="utf-8").replace(ct.END, ct.END + "\nmy own line"), encoding="utf-8")
    assert ct.main(["--root", str(root)]) == 0
    after = readme.read_text(encoding="utf-8")
    assert "\nmy own line" in after and after.count(ct.START) == 1
    assert "## Two commands" in after


@pytest.mark.parametrize("block, message", [
    ("<!-- claims\n- seed: X\n-->", "needs exactly the fields"),
    ("<!-- claims\n- {seed: A, claim: b, paper: '-', ours: '-', scene: s, verdict: maybe, anchor: a}\n-->",
     "verdict must be yes or no"),
    ("no block at all", "expected one <!-- claims ... --> block, found 0"),
])
def test_bad_blocks_get_one_clear_line(block, message):
    with pytest.raises(ct.ClaimsError, match=message):
        ct.page_claims("page", block)


def test_docs_and_the_results_pages_hold_prose_and_figures_only():
    scripts = [p.relative_to(ROOT) for d in ("docs", "lab/results") for p in (ROOT / d).rglob("*")
               if p.suffix in (".py", ".sh")]
    assert scripts == [], f"move them to lab/ (lab/notes/ for a note's one-off diagnostic): {scripts}"

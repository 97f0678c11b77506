"""refresh_texts: the write-or-check step of the scripts that generate docs (claims, bench tables)."""

from __future__ import annotations

from pathlib import Path

from lab.refresh_texts import refresh_texts


def test_check_names_stale_and_missing_files_and_writes_nothing(tmp_path: Path, capsys):
    fresh, stale, missing = tmp_path / "a.md", tmp_path / "b.md", tmp_path / "c.md"
    fresh.write_text("same\n")
    stale.write_text("old\n")
    wanted = {fresh: "same\n", stale: "new\n", missing: "made\n"}
    assert refresh_texts(wanted, tmp_path, check=True, script="gen.py") == 1
    err = capsys.readouterr().err
    assert "stale: b.md (run gen.py)" in err and "stale: c.md" in err and "a.md" not in err
    assert stale.read_text() == "old\n" and not missing.exists()


def test_write_rewrites_only_stale_files_and_leaves_no_temp(tmp_path: Path, capsys):
    fresh, stale = tmp_path / "a.md", tmp_path / "b.md"
    fresh.write_text("same\n")
    stale.write_text("old\n")
    before = fresh.stat().st_mtime_ns
    assert refresh_texts({fresh: "same\n", stale: "new\n"}, tmp_path, check=False, script="gen.py") == 0
    assert stale.read_text() == "new\n" and fresh.stat().st_mtime_ns == before
    assert capsys.readouterr().out == "wrote b.md\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.md", "b.md"]
    assert refresh_texts({fresh: "same\n", stale: "new\n"}, tmp_path, check=True, script="gen.py") == 0

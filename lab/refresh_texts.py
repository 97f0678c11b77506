"""The write-or-check step of the scripts that generate our pages (claims_table.py, bench_tables.py).

It lived in fedcore.io.files; only these scripts use it, so it is the lab's.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fedcore.io import atomic_write_bytes


def refresh_texts(files: dict[Path, str], root: Path, check: bool, script: str) -> int:
    """Bring generated text files to `files` (path -> wanted text); the scripts that write docs share it.

    With `check` nothing is written: each stale file is named on stderr and the result is 1 (0 when
    none is stale). Otherwise each stale file is rewritten atomically and named on stdout.
    """
    stale = [p for p, text in files.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if check:
        for p in stale:
            print(f"stale: {p.relative_to(root)} (run {script})", file=sys.stderr)
        return 1 if stale else 0
    for p in stale:
        atomic_write_bytes(p, files[p].encode("utf-8"))
        print(f"wrote {p.relative_to(root)}")
    return 0

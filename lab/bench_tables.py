"""Write the bench tables of the docs from the recorded bench runs, so no page's table is typed by hand.

Usage: .venv/bin/python lab/bench_tables.py [--check] [--root DIR]

A page marks each generated table with a pair of comment lines; the first names the records (bench.json
files kept under lab/records/, paths from the repository root) and `fedcore bench-table`'s
options:

    <!-- bench-table lab/records/quickstart.json -->
    ...the scene's table, ranking and FedAvg reference lines, written here...
    <!-- /bench-table -->

    <!-- bench-table lab/records/fmnist_fedrg.json lab/records/fmnist_fedgr.json --summary -->

Without `--summary` a block holds one scene (give `--scenes NAME` when a record has several), its
table or, with `--per-seed`, its per-seed table; the page keeps its own heading above it. Without
--check the script rewrites stale blocks; with --check it writes nothing and exits 1, naming the
stale pages. A block it cannot read exits 2 with one line.
"""

from __future__ import annotations

import argparse
import re
import shlex
import sys
from pathlib import Path

from fedcore.bench.tables import load_scenes, scene_body, scene_tables, seed_table, summary_table
from fedcore.errors import ConfigError

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling module, also when imported by file
from refresh_texts import refresh_texts  # noqa: E402

# A marker is a line of its own, so that prose may quote one.
BLOCK = re.compile(r"^(<!-- bench-table (?P<args>[^\n]*?) -->\n)(?P<body>.*?)^(<!-- /bench-table -->)$", re.S | re.M)
OPENER = re.compile(r"^<!-- bench-table ", re.M)


class BlockError(ValueError):
    """A marker the script cannot turn into a table."""


def render(args: str, root: Path) -> str:
    """The text a block with these arguments holds."""
    words = shlex.split(args)
    ap = argparse.ArgumentParser(prog="bench-table block", add_help=False, exit_on_error=False)
    ap.add_argument("records", nargs="+")
    ap.add_argument("--scenes", default="")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--per-seed", action="store_true")
    try:
        # parse_args would print its usage for an unknown option; the block's error is one line.
        opts, extra = ap.parse_known_args(words)
    except (argparse.ArgumentError, SystemExit):
        extra = [args]
    if extra:
        raise BlockError(f"cannot read '{args}' (records..., --scenes A,B, --summary, --per-seed)")
    try:
        scenes = scene_tables(load_scenes(root / r for r in opts.records),
                              [s for s in opts.scenes.split(",") if s])
    except ConfigError as err:
        raise BlockError(str(err)) from None
    if opts.summary:
        return summary_table(scenes) + "\n"
    if len(scenes) != 1:
        raise BlockError(f"'{args}' holds {len(scenes)} scenes; name one with --scenes")
    name, scene = next(iter(scenes.items()))
    return (seed_table(scene, name) if opts.per_seed else scene_body(scene, name)) + "\n"


def build(root: Path) -> dict[Path, str]:
    """Every page under docs/ and lab/results/ with a bench-table block, and its text with the blocks
    regenerated. (The user guides show worked examples from lab records, so docs/ is scanned too.)"""
    out: dict[Path, str] = {}
    pages = [*(root / "docs").rglob("*.md"), *(root / "lab" / "results").rglob("*.md")]
    for page in sorted(pages):
        text = page.read_text(encoding="utf-8")
        if not OPENER.search(text):
            continue

        def fill(m: re.Match, page: Path = page) -> str:
            try:
                return m.group(1) + render(m.group("args"), root) + m.group(4)
            except BlockError as err:
                raise BlockError(f"{page.relative_to(root)}: {err}") from None

        new = BLOCK.sub(fill, text)
        if len(OPENER.findall(new)) != len(BLOCK.findall(new)):
            raise BlockError(f"{page.relative_to(root)}: a <!-- bench-table ... --> line has no <!-- /bench-table -->")
        out[page] = new
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page's table is stale")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1], help="the repository")
    args = ap.parse_args(argv)
    try:
        pages = build(args.root)
    except BlockError as err:
        print(f"bench_tables: {err}", file=sys.stderr)
        return 2
    return refresh_texts(pages, args.root, args.check, "lab/bench_tables.py")


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Report import cycles among the modules of fedcore (or other packages), read statically.

Usage: python scripts/import_cycles.py [--runtime-only] [--edges] [PACKAGE_DIR ...]
(default PACKAGE_DIR: fedcore). Exit status 1 when a cycle exists, 0 when there is none.

How imports are read (with `ast`, nothing is imported):
- every `import` and `from ... import` in a module counts, at module level or inside a
  function, class, `try` or `if`: a function-level import still ties the two files together
  for a reader, and runs as soon as the function is called;
- imports under `if TYPE_CHECKING:` count too (a type a module names is a dependency a
  reader must follow). `--runtime-only` leaves them out, to see only what runs;
- `from a.b import c` points at module `a.b.c` when that file exists, else at `a.b`;
  importing `a.b.c` also runs the `__init__` of `a` and `a.b`, so those packages count as
  targets too, except packages that contain the importing module (Python is already
  running their `__init__` by then). A package named explicitly always counts, even the
  importer's own (`from . import name` reads that package's `__init__`);
- only edges between modules inside the given package directories count; third-party and
  standard-library imports are ignored.

Imports made by name at run time (`importlib.import_module("fedcore.methods." + name)`, the
plugin discovery of the method and dataset registries) are not statements, so they are not
seen. A cycle is a strongly connected component of more than one module; each is printed with
one shortest loop through it, e.g. `a -> b -> a`.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import deque
from pathlib import Path


def module_names(pkg_dir: Path) -> dict[str, Path]:
    """Dotted name -> file for every module under `pkg_dir` (a package folder)."""
    root = pkg_dir.resolve().parent
    out = {}
    for f in sorted(pkg_dir.resolve().rglob("*.py")):
        parts = list(f.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports(tree: ast.AST, runtime_only: bool) -> list[tuple[int, str, list[str]]]:
    """(level, module, names) of every import statement, walking into functions and blocks."""
    found: list[tuple[int, str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        if runtime_only and isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((0, a.name, []) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module or "", [a.name for a in node.names]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def absolute(importer: str, is_pkg: bool, level: int, module: str) -> str:
    if not level:
        return module
    base = importer.split(".") if is_pkg else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, module] if module else base)


def targets(importer: str, is_pkg: bool, stmt: tuple[int, str, list[str]], known: set[str]) -> set[str]:
    """The known modules one import statement runs (see the module docstring)."""
    level, module, names = stmt
    base = absolute(importer, is_pkg, level, module)
    named = {f"{base}.{n}" for n in names if f"{base}.{n}" in known}
    hit = set(named)
    if base in known and (not names or len(named) < len(names)):
        hit.add(base)
    parts = base.split(".")
    # Parent packages run first, unless the importer sits inside them (they are mid-import).
    for i in range(1, len(parts) + 1):
        pkg = ".".join(parts[:i])
        if pkg in known and not (importer == pkg or importer.startswith(pkg + ".")):
            hit.add(pkg)
    hit.discard(importer)  # a package's __init__ naming its own attributes
    return hit


def build_graph(pkg_dirs: list[Path], runtime_only: bool = False) -> dict[str, set[str]]:
    files: dict[str, Path] = {}
    for d in pkg_dirs:
        files.update(module_names(d))
    known = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_pkg = path.name == "__init__.py"
        graph[name] = set()
        for stmt in imports(tree, runtime_only):
            graph[name] |= targets(name, is_pkg, stmt, known)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; only components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    comps: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    comps.append(sorted(comp))
    return sorted(comps)


def shortest_loop(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """A shortest path start -> ... -> start inside one component (breadth-first)."""
    start, inside = comp[0], set(comp)
    prev: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(graph[node] & inside):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [*reversed(path), start]
            if nxt not in prev:
                prev[nxt] = node
                queue.append(nxt)
    return [start, start]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("packages", nargs="*", type=Path, help="package folders (default: fedcore)")
    ap.add_argument("--runtime-only", action="store_true", help="ignore imports under `if TYPE_CHECKING:`")
    ap.add_argument("--edges", action="store_true", help="also print every edge found")
    args = ap.parse_args(argv)
    pkgs = args.packages or [Path(__file__).resolve().parents[1] / "fedcore"]
    for p in pkgs:
        if not (p / "__init__.py").is_file():
            ap.error(f"'{p}' is not a package folder (no __init__.py)")
    graph = build_graph(pkgs, args.runtime_only)
    if args.edges:
        for name in sorted(graph):
            for dep in sorted(graph[name]):
                print(f"{name} -> {dep}")
    comps = strongly_connected(graph)
    edges = sum(len(v) for v in graph.values())
    for comp in comps:
        print(f"cycle among {len(comp)} modules: {' -> '.join(shortest_loop(graph, comp))}")
        print(f"  members: {', '.join(comp)}")
    print(f"{len(graph)} modules, {edges} import edges, {len(comps)} cycle(s)")
    return 1 if comps else 0


if __name__ == "__main__":
    sys.exit(main())

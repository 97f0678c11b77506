#!/usr/bin/env python3
"""Report import cycles among the modules of fedcore (or other packages), read statically; with
--order, imports that run up the package order too; with --lazy, imports inside functions that
give no reason.

Usage: python scripts/import_cycles.py [--runtime-only] [--edges] [--order [--order-doc DOC]] [--lazy]
                                       [PACKAGE_DIR ...]
(default PACKAGE_DIR: fedcore). Exit status 1 when a cycle, an upward import or an unexplained
function-level import is found, 0 when there is none.

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

The package order (--order) is the fenced block under "## Package order" in docs/dev/layout.md,
one entry a line, top first, the first word of each line a dotted prefix (`fedcore.cli`,
`pipelines`, `fedcore.errors`, `fedcore` for the root package's own `__init__`). A module belongs to
the longest entry it starts with; a root that has entries of its own below it (`fedcore`) matches
only itself. Each edge must point strictly down the list, or stay inside one entry; a module of an
ordered root that no entry holds is reported too, so a new package must be placed.

--lazy: an import inside a function (or lambda) body must carry `# lazy: <reason>` on one of its
lines. Imports belong at the top of the module, where a reader sees what it depends on; a
function-level one is for start-up time (the CLI) or an optional or heavy library only one path
needs, and says which.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "dev" / "layout.md"


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


def read_order(doc: Path) -> list[str]:
    """The entries of the package order: the first word of each line of the first fenced block
    after the line "## Package order" of `doc` (docs/dev/layout.md), top first."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    try:
        start = lines.index("## Package order")
        fence = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
        end = next(i for i in range(fence + 1, len(lines)) if lines[i].startswith("```"))
    except (ValueError, StopIteration):
        raise SystemExit(f"{doc}: no fenced block under '## Package order'") from None
    order = [line.split()[0] for line in lines[fence + 1:end] if line.strip()]
    if len(set(order)) != len(order):
        raise SystemExit(f"{doc}: an entry of the package order appears twice")
    return order


def entry_of(module: str, order: list[str]) -> str | None:
    """The order's entry holding `module` (see the module docstring); None when none does."""
    best = None
    for e in order:
        subdivided = any(o.startswith(e + ".") for o in order)
        if module == e or (not subdivided and module.startswith(e + ".")):
            best = e if best is None or len(e) > len(best) else best
    return best


def upward(graph: dict[str, set[str]], order: list[str]) -> list[str]:
    """'importer -> imported (why)' for every edge that does not point down the order, and every
    module of an ordered root that no entry holds."""
    rank = {e: i for i, e in enumerate(order)}
    roots = {e.split(".")[0] for e in order}
    found = [f"{m}: not in the package order" for m in sorted(graph)
             if m.split(".")[0] in roots and entry_of(m, order) is None]
    for name in sorted(graph):
        a = entry_of(name, order)
        for dep in sorted(graph[name]):
            b = entry_of(dep, order)
            if a is not None and b is not None and a != b and rank[a] > rank[b]:
                found.append(f"{name} -> {dep} ({a} sits below {b})")
    return found


def _function_imports(tree: ast.AST) -> list[ast.stmt]:
    found: list[ast.stmt] = []

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if inside and isinstance(child, ast.Import | ast.ImportFrom):
                found.append(child)
            visit(child, inside or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda))

    visit(tree, False)
    return found


LAZY = "# lazy:"


def lazy_without_reason(pkg_dirs: list[Path]) -> list[str]:
    """'module:line: statement' for every import inside a function without `# lazy: <reason>`."""
    found = []
    for d in pkg_dirs:
        for name, path in module_names(d).items():
            text = path.read_text(encoding="utf-8")
            lines = text.splitlines()
            for node in _function_imports(ast.parse(text, filename=str(path))):
                own = lines[node.lineno - 1:node.end_lineno]
                if not any(LAZY in line and line.split(LAZY, 1)[1].strip() for line in own):
                    found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


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
    ap.add_argument("--order", action="store_true", help="also report imports that run up the package order")
    ap.add_argument("--order-doc", type=Path, default=DOC, metavar="DOC",
                    help=f"where the order is written (default {DOC.relative_to(REPO)})")
    ap.add_argument("--lazy", action="store_true", help="also report function-level imports without '# lazy: why'")
    args = ap.parse_args(argv)
    pkgs = args.packages or [REPO / "fedcore"]
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
    bad = len(comps)
    if args.order:
        up = upward(graph, read_order(args.order_doc))
        for u in up:
            print(f"upward: {u}")
        print(f"{len(up)} upward import(s)")
        bad += len(up)
    if args.lazy:
        lazy = lazy_without_reason(pkgs)
        for u in lazy:
            print(f"no reason: {u}")
        print(f"{len(lazy)} function-level import(s) without '{LAZY} <reason>'")
        bad += len(lazy)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

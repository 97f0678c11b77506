"""A small Dockerfile reader for the image tests: instructions, stages, ARG defaults,
and .dockerignore matching. Enough for our files; not a full BuildKit parser."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field


@dataclass
class Stage:
    image: str  # FROM argument with global ARG defaults substituted
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, op: str) -> list[str]:
        return [args for name, args in self.instructions if name == op]


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs; continuation lines joined, comments dropped."""
    out, buf = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):  # comment inside a continued instruction
            continue
        buf += (" " if buf else "") + line
        if buf.endswith("\\"):
            buf = buf[:-1].rstrip()
            continue
        op, _, args = buf.partition(" ")
        out.append((op.upper(), args.strip()))
        buf = ""
    return out


def _substitute(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: values.get(m[1] or m[2], m[0]), text)


def stages(text: str) -> list[Stage]:
    """Build stages in order; ARGs declared before the first FROM feed the FROM lines."""
    global_args: dict[str, str] = {}
    result: list[Stage] = []
    for op, args in instructions(text):
        if op == "ARG" and not result:
            name, _, default = args.partition("=")
            global_args[name] = default
        elif op == "FROM":
            parts = [p for p in args.split() if not p.startswith("--")]
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            result.append(Stage(_substitute(parts[0], global_args), name))
        elif result:
            result[-1].instructions.append((op, args))
    return result


def ignored(path: str, dockerignore: str) -> bool:
    """Whether a context path is excluded: last matching pattern wins, `!` re-includes,
    a pattern matching a directory covers everything below it."""
    patterns = [p.strip() for p in dockerignore.splitlines() if p.strip() and not p.startswith("#")]
    verdict = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        if pat.startswith("**/"):
            hit = any(fnmatch.fnmatchcase(part, pat[3:]) for part in parts)
        else:
            hit = any(fnmatch.fnmatchcase(prefix, pat) for prefix in prefixes)
        if hit:
            verdict = not negate
    return verdict

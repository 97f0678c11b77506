"""YAML for experiment configs: plain data only, within limits, so that a hostile or broken file
fails with one line instead of a traceback, a hang or gigabytes of memory.

On top of `yaml.safe_load` (which already builds no Python objects):

- values are JSON-like: mappings, lists, strings, numbers, booleans, null. YAML 1.1 dates stay
  strings (`seed: 2024-01-01` is then refused by the schema, not turned into a date), and the
  tags `!!binary`, `!!set`, `!!omap`, `!!pairs` and `!!timestamp` are refused;
- a key given twice in one mapping is refused (PyYAML keeps the last one silently);
- nesting is at most MAX_DEPTH levels deep, counting through aliases; an alias may not point
  into its own anchor (a circular structure); and the document, with every alias expanded,
  holds at most MAX_NODES values, so a "billion laughs" file is refused before it is expanded;
- files are at most MAX_BYTES and must be UTF-8.

`YamlLimitError` (a `yaml.YAMLError`) reports every refusal, with the line when there is one;
`load_file` turns every failure into a one-line ConfigError.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from fedcore.errors import ConfigError

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_NODES = 100_000
_REFUSED_TAGS = ("binary", "set", "omap", "pairs", "timestamp")
_TIMESTAMP = "tag:yaml.org,2002:timestamp"
_MERGE = "tag:yaml.org,2002:merge"


class YamlLimitError(yaml.YAMLError):
    """A document that is valid YAML but not an acceptable config; `line` is 1-based or None."""

    def __init__(self, problem: str, node: Node | None = None) -> None:
        self.problem = problem
        self.line = node.start_mark.line + 1 if node is not None and node.start_mark else None
        super().__init__(problem)


class NotUtf8(ValueError):
    """A config file whose bytes are not UTF-8 text."""


class _Loader(yaml.SafeLoader):
    """SafeLoader without implicit timestamps, refusing duplicate keys and deep nesting."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _TIMESTAMP]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlLimitError(f"nesting deeper than {MAX_DEPTH} levels", None)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                continue  # `<<: *base` then a key of our own: overriding the merged key is the point
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise YamlLimitError("a mapping key is a list or mapping; keys must be plain names",
                                     key_node) from None
            if duplicate:
                raise YamlLimitError(f"the key '{key}' appears twice in one mapping", key_node)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _refuse(loader: _Loader, node: Node) -> Any:
    raise YamlLimitError(f"the tag '{node.tag.replace('tag:yaml.org,2002:', '!!')}' is not allowed; "
                         "configs hold plain values", node)


for _tag in _REFUSED_TAGS:
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _refuse)


def _count(node: Node, memo: dict[int, int], active: set[int], depth: int) -> int:
    """Values in `node` with aliases expanded; refuses cycles, depth and size over the limits."""
    key = id(node)
    if key in memo:
        return memo[key]
    if key in active:
        raise YamlLimitError("an alias refers to the mapping or list that contains it (a circular structure)", node)
    if depth > MAX_DEPTH:
        raise YamlLimitError(f"nesting deeper than {MAX_DEPTH} levels (counting through aliases)", node)
    active.add(key)
    total = 1
    if isinstance(node, SequenceNode):
        children: list[Node] = list(node.value)
    elif isinstance(node, MappingNode):
        children = [n for pair in node.value for n in pair]
    else:
        children = []
    for child in children:
        total += _count(child, memo, active, depth + 1)
        if total > MAX_NODES:
            raise YamlLimitError(f"more than {MAX_NODES} values once its aliases are expanded", node)
    active.discard(key)
    memo[key] = total
    return total


def loads(text: str) -> Any:
    """Parse one YAML document within the limits above (None for an empty document)."""
    if len(text) > MAX_BYTES:
        raise YamlLimitError(f"more than {MAX_BYTES // 1024} KiB")
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _count(node, {}, set(), 0)
        return loader.construct_document(node)
    except RecursionError:
        raise YamlLimitError(f"nesting deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def decode(data: bytes) -> str:
    """UTF-8 text of a config file (a UTF-8 BOM is dropped); NotUtf8 says why not."""
    if len(data) > MAX_BYTES:
        raise YamlLimitError(f"more than {MAX_BYTES // 1024} KiB")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise NotUtf8("it is UTF-16 text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise NotUtf8(f"byte {err.start} is not UTF-8") from None


def load_file(path: Path, what: str = "config file") -> Any:
    """The YAML document in `path` as plain data, within the limits; one-line ConfigErrors."""
    try:
        return loads(decode(path.read_bytes()))
    except OSError as err:
        raise ConfigError(f"{what} '{path}' cannot be read ({err.strerror}); check the path") from None
    except NotUtf8 as err:
        raise ConfigError(f"{what} '{path}' is not UTF-8 text ({err}); save it as UTF-8") from None
    except YamlLimitError as err:
        where = f" at line {err.line}" if err.line else ""
        raise ConfigError(f"{what} '{path}' is refused{where}: {err.problem}; fix the file") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{what} '{path}' is not valid YAML{where}; fix the syntax") from None

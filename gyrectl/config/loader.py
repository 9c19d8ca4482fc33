"""YAML -> :class:`~gyrectl.config.schema.Config`, with the dotted field path in every error.

Conversion is driven by the dataclasses' type hints, so the schema is the only place a field is
declared: unknown keys are refused with the list of valid ones, types are checked per field, and
``--set a.b=v`` overrides are applied to the raw tree before conversion (so they are validated
exactly like the file).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import inspect
import itertools
import re
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from gyrectl.config.checks import check_config
from gyrectl.config.schema import Config
from gyrectl.errors import ConfigError


def load_config(path: str | Path, overrides: typing.Sequence[str] = ()) -> Config:
    """Reads a YAML config file, applies ``--set`` overrides and validates the result."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError("", f"config file not found: {path}") from None
    except OSError as exc:
        raise ConfigError("", f"cannot read config file {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError("", f"{path} is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}); "
                              "save it as UTF-8") from None
    try:
        raw = parse_yaml(text)
    except RefusedYaml as exc:
        raise ConfigError("", f"{path}{_where(exc)}: {exc.problem}") from None
    except yaml.YAMLError as exc:
        raise ConfigError("", f"{path} is not valid YAML{_where(exc)}: {getattr(exc, 'problem', exc)}") from None
    return parse_config(raw if raw is not None else {}, overrides)


MAX_YAML_DEPTH = 32
"""Nesting a config never needs (its deepest field is three sections down); PyYAML composes one
Python frame per level, so a deeper document would end in a RecursionError."""


class RefusedYaml(yaml.MarkedYAMLError):
    """YAML that is valid but that a config refuses: an alias, or nesting past ``MAX_YAML_DEPTH``."""


class _ConfigLoader(yaml.SafeLoader):
    """SafeLoader without aliases: nine levels of ten aliases each are 10^9 nodes once the tree is
    copied and converted, which runs the machine out of memory instead of failing."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise RefusedYaml(problem=f"YAML aliases (*{event.anchor}) are not allowed in a config; write the "
                                      "value out", problem_mark=event.start_mark)
        if self._depth >= MAX_YAML_DEPTH:
            raise RefusedYaml(problem=f"nested deeper than {MAX_YAML_DEPTH} levels",
                              problem_mark=self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse_yaml(text: str) -> Any:
    """One YAML document, safely: no Python objects, no aliases, bounded nesting."""
    loader = _ConfigLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""


def parse_config(raw: Any, overrides: typing.Sequence[str] = ()) -> Config:
    """Validates a plain (already parsed) config tree."""
    if not isinstance(raw, dict):
        raise ConfigError("", f"a config is a mapping of sections, got {_type_name(raw)}")
    tree = apply_overrides(raw, overrides)
    config = _convert(Config, tree, "")
    check_config(config)
    return config


def apply_overrides(raw: dict[str, Any], overrides: typing.Sequence[str]) -> dict[str, Any]:
    """Returns a copy of ``raw`` with each ``a.b.c=value`` applied (value parsed as YAML)."""
    tree = _deep_copy(raw)
    for item in overrides:
        key, sep, value_text = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError("", f"--set expects KEY=VALUE (e.g. --set cluster.nodes=4), got {item!r}")
        parts = key.strip().split(".")
        node = tree
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(".".join(parts[: i + 1]), "is a value, not a section; cannot set a key inside it")
            node = child
        try:
            node[parts[-1]] = parse_yaml(value_text) if value_text.strip() else ""
        except RefusedYaml as exc:
            raise ConfigError(key.strip(), f"--set value{_where(exc)}: {exc.problem}") from None
        except yaml.YAMLError:
            node[parts[-1]] = value_text
    return tree


def dump_config(config: Config) -> str:
    """The resolved config as YAML (what is written into the run directory)."""
    return yaml.safe_dump(_to_plain(config), sort_keys=False)


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """Field name -> the docstring written under it in the class body."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    docs: dict[str, str] = {}
    for stmt, nxt in itertools.pairwise(body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def _convert(tp: Any, value: Any, path: str) -> Any:
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, value, path)
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices or isinstance(value, bool) != any(isinstance(c, bool) for c in choices):  # True == 1
            raise ConfigError(path, f"must be one of {', '.join(map(repr, choices))}, got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return None if value is None else _convert(args[0], value, path)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(path, f"expected a list, got {_type_name(value)} {value!r}")
        (item_type, _ellipsis) = typing.get_args(tp)
        return tuple(_convert(item_type, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, f"expected a mapping, got {_type_name(value)} {value!r}")
        return {str(k): v for k, v in value.items()}
    return _convert_scalar(tp, value, path)


_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def _convert_scalar(tp: type, value: Any, path: str) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(path, f"expected true or false, got {_type_name(value)} {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise ConfigError(path, f"expected an integer, got {_type_name(value)} {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
            return float(value)  # YAML 1.1 reads 1e-6 (no dot) as a string; it is plainly a number
        raise ConfigError(path, f"expected a number, got {_type_name(value)} {value!r}")
    if tp is str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return str(value)  # YAML reads `time_limit: 30` or `partition: 2024` as numbers
        raise ConfigError(path, f"expected a string, got {_type_name(value)} {value!r}")
    raise TypeError(f"unsupported config type {tp!r} at {path}")  # a schema bug, not a user error


def _convert_dataclass(cls: Any, value: Any, path: str) -> Any:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a section (mapping), got {_type_name(value)} {value!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in value:
        if key not in names:
            raise ConfigError(_join(path, str(key)), _unknown_key_message(cls, str(key), names))
    kwargs = {name: _convert(hints[name], value[name], _join(path, name)) for name in names if name in value}
    return cls(**kwargs)


def _unknown_key_message(cls: type, key: str, names: list[str]) -> str:
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    docs = field_docs(cls)
    listing = "; ".join(f"{n}: {docs.get(n, '').split('. ')[0].rstrip('.')}" for n in names)
    return f"unknown key{hint}. Valid keys: {listing}"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "nothing"}.get(type(value), type(value).__name__)


def _deep_copy(raw: Any) -> Any:
    if isinstance(raw, dict):
        return {k: _deep_copy(v) for k, v in raw.items()}
    if isinstance(raw, list):
        return [_deep_copy(v) for v in raw]
    return raw


def _to_plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    return value

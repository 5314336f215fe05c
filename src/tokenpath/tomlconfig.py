"""TOML config files read into frozen dataclasses: unknown keys and values of the wrong type are usage errors that
name the file, the table and the key, before anything starts (the gateway's and the monitor's configs)."""

from __future__ import annotations

import tomllib
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from tokenpath.errors import UsageError
from tokenpath.userfiles import MAX_CONFIG_BYTES, read_text

T = TypeVar("T")


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    text = read_text(Path(path), MAX_CONFIG_BYTES, what)  # UTF-8 whatever the locale; a regular file, bounded
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{what} {path}: {exc}") from None


def dataclass_from(cls: type[T], data: dict[str, Any], where: str) -> T:
    """Build `cls` from a TOML table. `where` names the table in messages ("gateway config [limits]")."""
    if not isinstance(data, dict):
        raise UsageError(f"{where}: expected a table, got {type(data).__name__}")
    known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    unknown = set(data) - known
    if unknown:
        raise UsageError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
    hints = get_type_hints(cls)
    values = {}
    for key, value in data.items():
        problem = _type_problem(hints.get(key), value)
        if problem:
            raise UsageError(f"{where}: `{key}` {problem}, not {value!r}")
        values[key] = tuple(value) if isinstance(value, list) else value
    try:
        return cls(**values)
    except TypeError as exc:
        raise UsageError(f"{where}: {exc}") from None


def _type_problem(hint: Any, value: Any) -> str | None:
    """Why `value` does not fit the annotation, or None. Checks what a TOML file can get wrong: scalars, arrays,
    tables; choices and anything richer is left to the dataclass's own validation."""
    if hint is None or hint is Any:
        return None
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        if value is None and type(None) in options:
            return None
        problems = [_type_problem(o, value) for o in options if o is not type(None)]
        return None if any(p is None for p in problems) else " or ".join(p for p in problems if p)
    if origin is Literal:
        return None  # choices are the dataclass's to check: its message can say what each one means
    if hint is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "must be a whole number"
    if hint is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else "must be a number"
    if hint is str:
        return None if isinstance(value, str) else "must be a string"
    if origin is tuple:
        if not isinstance(value, list | tuple):
            return "must be an array"
        args = [a for a in get_args(hint) if a is not Ellipsis]
        if args and any(_type_problem(args[0], v) for v in value):
            return f"must be an array of {getattr(args[0], '__name__', args[0])}"
        return None
    if origin is dict or hint is dict or origin is typing.Mapping:
        return None if isinstance(value, dict) else "must be a table"
    return None

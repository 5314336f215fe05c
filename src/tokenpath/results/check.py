"""Type checks for a results document as read: every field the model reads holds the JSON type its dataclass
declares (a number where a number is expected, a list where a list is...), so no renderer meets a value of the wrong
type. A wrong one is refused with one line naming the field's path (`levels[0].frames_lost: expected a number, got
a string`); the caller (model.read) puts the file's name in front. Infinity is not a number here (no axis can hold it),
and neither is true or false.

By hand, from the model's own type hints: the dataclasses are the document's schema, so a JSON Schema would be a
second copy to keep in step, and pydantic a runtime dependency (and a second model) for this one check."""

from __future__ import annotations

import functools
import math
import sys
import types
from collections.abc import Collection, Mapping
from dataclasses import MISSING, fields, is_dataclass
from enum import Enum
from typing import Any, Literal, NoReturn, Union, get_args, get_origin, get_type_hints

from tokenpath.errors import UsageError


class DocumentError(UsageError):
    """A results document with a value of the wrong type, or without a key it must have (exit 2, as any bad file)."""


def at(path: str, key: str | int) -> str:
    """A field's path: `rows[0].raw[2].writes_ms`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def kind_of(value: object) -> str:
    """What a JSON value is, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float) and math.isinf(value):
        return "Infinity"
    if isinstance(value, int) and abs(value) > sys.float_info.max:
        return "a number too large for a float"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def fail(path: str, expected: str, value: object) -> NoReturn:
    raise DocumentError(f"{path}: expected {expected}, got {kind_of(value)}")


def is_number(value: object) -> bool:
    """A JSON number a float can hold (a bool is not one, though Python counts it as an int). NaN is one: stats.py
    gives it for an empty sample and every renderer shows it as such; Infinity is not (no axis can hold it)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return abs(value) <= sys.float_info.max if isinstance(value, int) else not math.isinf(value)


def check(value: object, hint: Any, path: str) -> None:
    """`value` as read from JSON is of the type `hint` declares; refused with its path when not."""
    if hint is Any or hint is object:
        return
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        _union(value, get_args(hint), path)
    elif hint is float:
        _number(value, path)
    elif hint is int:
        _whole(value, path)
    elif hint in (str, bool):
        if not isinstance(value, hint):
            fail(path, describe(hint), value)
    elif origin is Literal:
        if isinstance(value, bool) or value not in get_args(hint):
            fail(path, describe(hint), value)
    elif origin is list:
        _sequence(value, (*get_args(hint), Ellipsis), path)
    elif origin is tuple:
        _sequence(value, get_args(hint), path)
    elif origin in (dict, Mapping) or hint in (dict, Mapping):
        _mapping(value, get_args(hint), path)
    elif isinstance(hint, type):
        _object(value, hint, path)


def _union(value: object, options: tuple[Any, ...], path: str) -> None:
    """The first option of the value's JSON shape is checked in depth; null only where None is an option."""
    if value is None and type(None) in options:
        return
    for option in options:
        if option is not type(None) and _shaped(value, option):
            check(value, option, path)
            return
    fail(path, " or ".join(dict.fromkeys(describe(o) for o in options)), value)


def _shaped(value: object, hint: Any) -> bool:
    """Whether the value has the hint's JSON shape (its contents not looked at)."""
    origin = get_origin(hint)
    if hint is Any:
        return True
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint in (str, bool):
        return isinstance(value, hint)
    if origin is Literal:
        return value in get_args(hint)
    if origin in (tuple, list):
        return isinstance(value, list | tuple)
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        return isinstance(value, dict | Mapping)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return isinstance(value, str)
    return isinstance(value, dict) or (isinstance(hint, type) and isinstance(value, hint))


def describe(hint: Any) -> str:
    """The type a hint declares, as JSON names it."""
    origin = get_origin(hint)
    if hint is type(None):
        return "null"
    if hint in (int, float):
        return "a number"
    if hint is str:
        return "a string"
    if hint is bool:
        return "true or false"
    if origin is Literal or (isinstance(hint, type) and issubclass(hint, Enum)):
        values = get_args(hint) if origin is Literal else [e.value for e in hint]
        return "one of " + ", ".join(repr(v) for v in values)
    if origin in (Union, types.UnionType):
        return " or ".join(dict.fromkeys(describe(a) for a in get_args(hint)))
    if origin in (tuple, list):
        return "a list"
    return "an object"


def _number(value: object, path: str) -> None:
    if not is_number(value):
        fail(path, "a number", value)


def _whole(value: object, path: str) -> None:
    _number(value, path)
    if not isinstance(value, int):
        raise DocumentError(f"{path}: expected a whole number, got {value!r}")


def _sequence(value: object, args: tuple[Any, ...], path: str) -> None:
    if not isinstance(value, list | tuple):
        fail(path, "a list", value)
    if len(args) == 2 and args[1] is Ellipsis:
        for i, item in enumerate(value):
            check(item, args[0], at(path, i))
        return
    if len(value) != len(args):
        raise DocumentError(f"{path}: expected a list of {len(args)}, got a list of {len(value)}")
    for i, (item, hint) in enumerate(zip(value, args, strict=True)):
        check(item, hint, at(path, i))


def _mapping(value: object, args: tuple[Any, ...], path: str) -> None:
    if not isinstance(value, dict | Mapping):
        fail(path, "an object", value)
    if not args:
        return
    key_hint, value_hint = args
    for key, item in value.items():
        if key_hint is int and not str(key).lstrip("-").isdigit():  # JSON's keys are strings: "5" for 5
            raise DocumentError(f"{at(path, str(key))}: expected a whole number as the key")
        check(item, value_hint, at(path, str(key)))


def _object(value: object, cls: type, path: str) -> None:
    """A dataclass from its JSON object, an enum from its value; another class (built by its own from_json) must at
    least be an object."""
    if isinstance(value, cls):
        return
    if issubclass(cls, Enum):
        if isinstance(value, bool) or value not in [e.value for e in cls]:
            got = repr(value) if isinstance(value, str) else kind_of(value)
            raise DocumentError(f"{path}: expected {describe(cls)}, got {got}")
        return
    if not isinstance(value, dict):
        fail(path, "an object", value)
    if is_dataclass(cls):
        check_fields(cls, value, path, required=cls.__module__ == "tokenpath.results.model")


def check_fields(
    cls: type,
    data: Mapping[str, Any],
    path: str,
    *,
    required: bool = True,
    skip: Collection[str] = (),
    nullable: Collection[str] = (),
) -> None:
    """Each of the dataclass's fields that `data` holds is of its declared type (`skip`: checked by the caller;
    `nullable`: null read as the default); with `required`, a field with no default must be there."""
    if not isinstance(data, dict | Mapping):
        fail(path, "an object", data)
    hints = _hints(cls)
    for f in fields(cls):
        where = at(path, f.name)
        if f.name in skip:
            continue
        if f.name not in data:
            if required and f.default is MISSING and f.default_factory is MISSING:
                raise DocumentError(f"{where}: missing")
            continue
        value = data[f.name]
        if value is None and f.name in nullable:
            continue
        check(value, hints[f.name], where)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def check_keys(data: Mapping[str, Any], hints: Mapping[str, Any], path: str, *, required: bool = True) -> None:
    """The keys of an echoed JSON object (an experiment, a load configuration) that the renderers read."""
    for key, hint in hints.items():
        if key not in data:
            if required:
                raise DocumentError(f"{at(path, key)}: missing")
            continue
        check(data[key], hint, at(path, key))


def check_at_least(data: Mapping[str, Any], minimums: Mapping[str, float], path: str) -> None:
    """The echoed counts and durations the renderers print (already checked as numbers) are in their range: `runs =
    -1` in a results.json was rendered as "-1 runs" as if it had run so."""
    for key, least in minimums.items():
        value = data.get(key)
        if value is not None and not value >= least:  # NaN too
            raise DocumentError(f"{at(path, key)}: expected at least {least:g}, got {value!r}")

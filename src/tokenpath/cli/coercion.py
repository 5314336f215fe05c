"""What Typer spends per option on every start, spared. Typer (0.29) coerces each parameter of the command that runs
with a pydantic TypeAdapter it builds on first use, for every parameter: one not given (None) and one left at its
default included. That is pydantic's import (~0.2 CPU-s) and an adapter per option before a command's first line.

Here a Typer parameter coerces None as Typer does (None, or () for a multiple) without an adapter, and a value whose
coercion is plain without one: a str as it is, an int or a float that is one already or is written plainly in
decimal ("8000", "-1.5"), and a repeatable option's values when each is plain. Every other value (a choice, a path, a
range, "1e3", " 5") goes to the adapter Typer builds, as before. tests/test_cli_startup.py holds the results (and the
errors) to Typer's own for every option of every command."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from typer import _click
from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
from typer.core import _TyperParameter

# Written plainly: no sign but '-', no leading zero, no '_', no exponent, no space; both parsers agree on these.
PLAIN_INT = re.compile(r"-?(0|[1-9][0-9]{0,17})")
PLAIN_FLOAT = re.compile(r"-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,15})?")
NOT_PLAIN = object()
PLAIN = (str, int, float)


def plain_value(annotation: Any, value: Any) -> Any:
    """`value` coerced to `annotation` where that is plain, else NOT_PLAIN."""
    if get_origin(annotation) is list:  # a repeatable option: its values as they came, each plain
        items = [plain_value(get_args(annotation)[0], v) for v in value] if type(value) in (list, tuple) else []
        return items if type(value) in (list, tuple) and NOT_PLAIN not in items else NOT_PLAIN
    if annotation is str and type(value) is str:
        return value
    if annotation is int and (type(value) is int or (type(value) is str and PLAIN_INT.fullmatch(value))):
        return int(value)
    if annotation is float and (type(value) is float or (type(value) is str and PLAIN_FLOAT.fullmatch(value))):
        return float(value)
    return NOT_PLAIN


def has_plain_values(descriptor: TypeDescriptor) -> bool:
    """A str, int or float option (or a repeatable one of them) with nothing of Typer's on top (no range, parser,
    path, choice, file, tuple)."""
    info = descriptor.parameter_info
    annotation: Any = descriptor.annotation
    return (
        (annotation in PLAIN or (get_origin(annotation) is list and get_args(annotation)[0] in PLAIN))
        and not (descriptor.is_tuple or descriptor.is_file or descriptor.is_path)
        and not descriptor.is_choice
        and info.parser is None
        and info.min is None
        and info.max is None
        and not info.clamp
    )


@dataclass(frozen=True)
class SparedRuntimeParam(RuntimeParam):
    """Typer's runtime coercion of one parameter, building Typer's own (and its adapter) only for a value that is
    neither None nor plain; from then on the parameter uses Typer's."""

    descriptor: TypeDescriptor
    plain: bool

    def _coerce_value(self, value: Any, param: _TyperParameter, ctx: _click.Context) -> Any:
        if self.plain:
            coerced = plain_value(self.annotation, value)
            if coerced is not NOT_PLAIN:
                return coerced
        typers_own = build_runtime_param(self.descriptor)
        param._runtime_param = typers_own
        return typers_own._coerce_value(value, param=param, ctx=ctx)


def spare(params: Iterable[_click.Parameter]) -> None:
    """Give each Typer parameter of a command (or group) the spared coercion, unless it has coerced already."""
    for param in params:
        if isinstance(param, _TyperParameter) and param._runtime_param is None:
            d = param.type_descriptor
            param._runtime_param = SparedRuntimeParam(d.parameter_info, d.annotation, d, has_plain_values(d))

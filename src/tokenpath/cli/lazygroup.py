"""The app's command group, lazy (click's LazyGroup pattern on Typer's group): a process imports and builds only the
command it runs. Typer otherwise imports every command module and builds every command's parameters on each start,
about 1 CPU-second before `tokenpath probe` reads its first flag; `tokenpath --help` lists the commands from
commands.py's summaries without importing one. Each command's parameters coerce as coercion.py spares them."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from typer import _click  # Typer 0.29 carries its own click: its groups hold these commands
from typer.core import MarkupMode, TyperCommand, TyperGroup
from typer.main import get_command_from_info
from typer.models import CommandInfo

from tokenpath.cli.coercion import spare
from tokenpath.cli.commands import BY_NAME, COMMANDS


@contextlib.contextmanager
def help_tables() -> Iterator[None]:
    """Typer's help, its options panels with HelpTable's columns (helptable.py, imported for help only). Typer
    builds a panel with its module's `Table` and has no setting for its columns; its commands panel declares its own
    and is built as before. Put back after: nothing else sees it."""
    from typer import rich_utils  # as Typer imports it: to print help

    from tokenpath.cli.helptable import HelpTable

    before, rich_utils.Table = rich_utils.Table, HelpTable  # type: ignore[attr-defined]
    try:
        yield
    finally:
        rich_utils.Table = before  # type: ignore[attr-defined]


class HelpCommand(TyperCommand):
    """Every command's class: its --help with help_tables()."""

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        with help_tables():
            super().format_help(ctx, formatter)


class LazyCommands(MutableMapping[str, _click.Command]):
    """The group's commands by name: those registered on the app (Typer built them), and every other command of
    commands.py, built from its module on first look-up. Names iterate in commands.py's order, so listings,
    `tokenpath --help` and "Did you mean" suggestions are what an eagerly built group gives."""

    def __init__(self, built: Mapping[str, _click.Command], markup: MarkupMode) -> None:
        self._built = dict(built)
        self._markup = markup

    def __getitem__(self, name: str) -> _click.Command:
        if name not in self._built:
            if name not in BY_NAME:
                raise KeyError(name)
            self._built[name] = get_command_from_info(
                CommandInfo(callback=BY_NAME[name].load(), short_help=BY_NAME[name].short_help, cls=HelpCommand),
                pretty_exceptions_short=True,  # Typer's default, as app.command() has it (the app shows none)
                rich_markup_mode=self._markup,
            )
        return self._built[name]

    def __setitem__(self, name: str, command: _click.Command) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        yield from BY_NAME
        yield from (name for name in self._built if name not in BY_NAME)

    def __len__(self) -> int:
        return len(BY_NAME.keys() | self._built.keys())

    def listed(self) -> dict[str, _click.Command]:
        """What a help listing reads of each command (name, help): the built ones as they are, every other one as
        its summary, so listing them imports none."""
        listing: dict[str, _click.Command] = {
            c.name: TyperCommand(c.name, help=c.summary, short_help=c.short_help) for c in COMMANDS
        }
        return listing | self._built


class LazyGroup(TyperGroup):
    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.commands, self.rich_markup_mode)

    def get_params(self, ctx: _click.Context) -> list[_click.Parameter]:
        params = super().get_params(ctx)
        spare(params)
        return params

    def resolve_command(
        self, ctx: _click.Context, args: list[str]
    ) -> tuple[str | None, _click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None:
            spare(command.get_params(ctx))  # its --help among them, which click makes on first use
        return name, command, rest

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        commands = self.commands
        if isinstance(commands, LazyCommands):
            self.commands = commands.listed()
        try:
            with help_tables():
                super().format_help(ctx, formatter)
        finally:
            self.commands = commands

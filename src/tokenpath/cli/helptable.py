"""A command's --help with its flags' names whole at any usual width. Typer (0.29) lays each options panel out as a
rich Table of six columns (the flag, a short form, the `--no-` form, its short form, the type, the help) that keep
rich's defaults: on an 80-column terminal the widest cell, a long flag's name, was cut (`--streams-per-connec…` in
load's help) and so was any long word of a help text, while an on/off flag's `--no-` form took a column of its own
from every row's help. Typer has no setting for the columns, so a command's help renders its options with
HelpTable (lazygroup.py HelpCommand): a flag's forms in one cell, one per line, never cut; the help text takes
what is left and folds a word too long for it."""

from __future__ import annotations

from typing import Any

from rich.columns import Columns
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

NAME_CELLS = 4  # Typer's row: [a required mark], the flag, its short form, `--no-` form, its short form, type, help


class HelpTable(Table):
    """Typer's options table: it adds rows without declaring columns, so they are declared here on the first row,
    and each row's name cells are joined into one."""

    def add_row(self, *renderables: RenderableType | None, **kwargs: Any) -> None:
        *lead, kind, help_cell = renderables
        marks, names = lead[:-NAME_CELLS], lead[-NAME_CELLS:]
        typers_row = len(names) == NAME_CELLS and all(isinstance(name, Text) for name in names)
        if not typers_row:  # a commands panel's row (its columns declared), or another: as rich shows it
            super().add_row(*renderables, **kwargs)
            return
        forms = Text("\n").join(name for name in names if isinstance(name, Text) and name.plain)
        if isinstance(kind, Text) and kind.plain == "<bool>":  # an on/off flag takes no value: `--http2 <bool>` read
            kind = Text("")  # as if it wanted `--http2 true`
        if not self.columns:
            for _ in range(len(marks) + 2):  # the marks, the names, the type: never cut
                self.add_column(no_wrap=True)
            self.add_column(overflow="fold", ratio=1)
        for part in help_cell.renderables if isinstance(help_cell, Columns) else (help_cell,):
            if isinstance(part, Text) and part.overflow is None:  # Columns lays its parts out in a grid of its own
                part.overflow = "fold"
        super().add_row(*marks, forms, kind, help_cell, **kwargs)

"""What every command shares: the Typer app, the two consoles, the one error-handling decorator and the mapping of
config fields to flags in library messages (uvicorn's main.py: flags → config objects → one library call)."""

from __future__ import annotations

import functools
import inspect
import json
import logging
import os
import re
import typing
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console
from typer import _click  # Typer 0.29 carries its own click (cli/lazygroup.py): its context, its parameter sources
from typer.models import OptionInfo

from tokenpath import __version__
from tokenpath.cli.lazygroup import LazyGroup
from tokenpath.errors import TokenpathError, UsageError

if TYPE_CHECKING:
    from tokenpath.results.model import MatrixResults

app = typer.Typer(
    cls=LazyGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Measure what a proxy does to an LLM token stream.",
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)
# Off a terminal (a pipe, a file, CI) rich would cut every table to 80 columns ("nginx proxy_…"); there a table is as
# wide as its cells and no line wraps. $COLUMNS, when set, still decides.
UNBOUNDED_WIDTH = 100_000

P = ParamSpec("P")
R = TypeVar("R")


def _fit_off_terminal() -> None:
    for c in (console, err_console):
        if not c.is_terminal and "COLUMNS" not in os.environ:
            c.width = UNBOUNDED_WIDTH


@app.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _fit_off_terminal()
    if version:
        print(__version__)
        raise typer.Exit()


# --- errors: one decorator, fields named as flags --------------------------------------------------------------

_FIELD = re.compile(r"`([a-z][a-z0-9_]*)`")


def as_flags(message: str, flags: Mapping[str, str]) -> str:
    """Library messages name config fields in backticks (`frame_bytes`); where a field is one of the command's
    flags (`flags`: field → flag) the user reads the flag they typed (--frame-bytes). Any other field stays as it
    is written: a key of a file the user gave (`api_key_env`), or a setting with no flag."""
    return _FIELD.sub(lambda m: flags.get(m.group(1), m.group(0)), message)


def command_flags(fn: Callable[..., Any], renames: Mapping[str, str] = {}) -> dict[str, str]:
    """field → flag for a command: each option's parameter is a field of the same name (probe's `idle_timeout` is
    --idle-timeout, `json_out` is --json); `renames` maps the config fields whose name differs from their flag's
    parameter (the gateway's `secret_env` is --jwt-secret-env). Arguments have no flag."""
    flags: dict[str, str] = {}
    for name, hint in typing.get_type_hints(fn, include_extras=True).items():
        option = next((m for m in getattr(hint, "__metadata__", ()) if isinstance(m, OptionInfo)), None)
        if option is None:
            continue
        # In Annotated form typer keeps a renamed option's first spelling in `default` (typer.Option("--json"))
        spellings = (option.default, *(option.param_decls or ()))
        declared = [d for d in spellings if isinstance(d, str) and d.startswith("--")]
        flags[name] = declared[0].partition("/")[0] if declared else "--" + name.replace("_", "-")
    flags.update({field: flags[param] for field, param in renames.items() if param in flags})
    return flags


def refuse_unread(fn: Callable[..., Any], given: Mapping[str, Any], unread: Collection[str], why: str) -> None:
    """A flag this call set that its mode never reads is refused, named as the user typed it, never dropped in
    silence: typed on the command line (at its default value too: `--cork-ms 200` without `--mode cork` is as unread
    as `--cork-ms 50`), or away from its default however it was set (a call from Python: nothing is typed).
    `given`: the command's parameters as called; `unread`: the ones this mode ignores."""
    defaults = {name: p.default for name, p in inspect.signature(fn).parameters.items()}
    flags = command_flags(fn)
    typed = _typed(fn) or set()
    given_here = [k for k in unread if k in typed or _set(given.get(k), defaults.get(k))]
    named = [flags.get(k, "--" + k.replace("_", "-")) for k in given_here]
    if named:
        raise UsageError(f"{', '.join(named)} {'is' if len(named) == 1 else 'are'} not read {why}")


def _typed(fn: Callable[..., Any]) -> set[str] | None:
    """The parameters of `fn` the user typed on the command line, when `fn` is the command click is running now
    (click records each parameter's source); None when it is not (a call from Python: tests, another command)."""
    ctx = _click.globals.get_current_context(silent=True)
    if ctx is None or inspect.unwrap(ctx.command.callback or _none) is not inspect.unwrap(fn):
        return None
    return {name for name in ctx.params if ctx.get_parameter_source(name) is _click.core.ParameterSource.COMMANDLINE}


def _none() -> None:
    """A stand-in for a command without a callback (a group): never a command's own function."""


def _set(value: Any, default: Any) -> bool:
    return value != default and not (default is None and value in ((), []))  # typer's empty list: not given


def fail(command: str, exc: TokenpathError, flags: Mapping[str, str]) -> NoReturn:
    """One line on stderr, the error class's exit code."""
    message = as_flags(str(exc), flags)
    err_console.print(f"tokenpath {command}: error: {message}", highlight=False, markup=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def handles_errors(
    command: str,
    renames: Mapping[str, str] = {},
    mapped: Callable[[dict[str, Any]], Collection[str] | None] | None = None,
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A command's one error handler: a TokenpathError becomes `tokenpath COMMAND: error: ...` and its exit code,
    with the fields the message names shown as this command's flags. `mapped(params)`, when it returns names: only
    those fields are flags on this call; the rest came from a file the user gave, named as the file spells them."""

    def decorate(fn: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except TokenpathError as exc:
                flags = command_flags(fn, renames)
                only = mapped(dict(kwargs)) if mapped else None
                fail(command, exc, flags if only is None else {k: v for k, v in flags.items() if k in only})

        return run

    return decorate


# --- shared input and output --------------------------------------------------------------------------------------


def announce(command: str) -> Callable[[str], None]:
    """The line a parent process waits for: 'tokenpath stub: listening on URL ...'."""

    def say(line: str) -> None:
        print(f"tokenpath {command}: {line}", flush=True)

    return say


def target_url(url: str | None) -> str:
    """The URL a client command measures: its argument, else $TOKENPATH_URL."""
    target = url or os.environ.get("TOKENPATH_URL")
    if not target:
        raise UsageError("no URL: pass one or set TOKENPATH_URL")
    return target


def tls_flags_need_https(scheme: str, cacert: str | None, insecure: bool) -> None:
    """--cacert and --insecure verify a TLS server: beside an http:// URL they were read and never applied."""
    if (cacert or insecure) and scheme != "https":
        raise UsageError(f"--cacert and --insecure are for an https:// URL, not {scheme}://")


def writable_file(path: Path, field: str) -> None:
    """A file a command writes at its end, proved writable before it starts: a directory or a missing parent was
    found out after the whole run (a survey, a recording), in a traceback, its result lost. `field` names the flag."""
    if path.is_dir():
        raise UsageError(f"`{field}` {path}: a directory; name a file")
    existed = path.exists()
    try:
        with path.open("a"):
            pass
    except OSError as exc:
        raise UsageError(f"`{field}` {path}: cannot write there: {exc.strerror or exc}") from None
    if not existed:
        path.unlink()


def api_key(env_name: str | None) -> str | None:
    if env_name:
        value = os.environ.get(env_name)
        if not value:
            raise UsageError(f"--api-key-env {env_name}: that environment variable is not set")
        return value
    return os.environ.get("TOKENPATH_API_KEY") or None


def body_json(text: str | None) -> tuple[tuple[str, object], ...]:
    if not text:
        return ()
    try:
        extra = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"--body-json is not JSON: {exc}") from None
    if not isinstance(extra, dict):
        raise UsageError("--body-json must be a JSON object")
    return tuple(extra.items())


def shown_console(json_out: bool) -> Console:
    """--json: stdout carries the document only; everything else goes to stderr."""
    return err_console if json_out else console


def render_report(out: str, to: Console | None = None) -> None:
    """Every run ends with its report. results.json is already on disk, so a failure here loses nothing."""
    from tokenpath.progress import escaped, styled
    from tokenpath.report.render import write_report

    try:
        written = write_report(Path(out))
    except Exception as exc:  # a long run must not end in a traceback after its results are safe
        said = f"report not written ({exc}); results.json is intact: tokenpath report {out}"
        err_console.print(styled(said, "yellow"))
        return
    said = f"report: {written['html']} (also {written['md'].name}, {written['csv'].name})"
    (to or console).print(escaped(said))  # --out as typed


def end_matrix(doc: MatrixResults) -> None:
    """How a matrix or a sweep ends once its results and report are written: Ctrl-C's 130, or the instrument's exit
    when a condition's direct path kept no run (every stream failed, was cut or failed the stub's audit), since no
    proxy's figures there can be judged; a CI job must not read that as a pass."""
    if doc.interrupted:
        raise typer.Exit(130)
    unjudged = doc.unjudged
    if unjudged:
        from tokenpath.errors import InstrumentError

        labels = "; ".join(c.label for c in unjudged[:3]) + (f"; {len(unjudged) - 3} more" if len(unjudged) > 3 else "")
        raise InstrumentError(
            f"the direct path kept no run in {len(unjudged)} of {len(doc.floors)} conditions ({labels}), so nothing "
            "measured there can be judged; why each run was excluded is in results.json"
        )


JSON_HELP = "Print the results document (results.json) on stdout; the rest on stderr."

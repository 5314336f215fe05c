"""Files a user names, read and written safely. Read: only a regular file (a FIFO blocked the read for ever, a
device such as /dev/zero was read until memory ran out), never past a limit, as UTF-8. Written: into a temporary of
a fresh random name beside it (created exclusively, so a `results.json.tmp` symlink planted in a results directory
someone handed over cannot redirect the write), then renamed into place: a reader never sees half a file."""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

from tokenpath.errors import UsageError

MIB = 1 << 20
MAX_CONFIG_BYTES = 16 * MIB  # an experiment, a gateway or monitor config: a few KB in practice


def read_text(path: Path, limit: int, what: str) -> str:
    """The file's text (UTF-8), refused in one line naming `what` and `path`: not a regular file, larger than
    `limit` bytes (by its size before any is read, and by what a file still growing gave), or not UTF-8."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise UsageError(f"{what} {path}: {kind}")
        with path.open("rb") as f:
            _refuse_past(path, os.fstat(f.fileno()).st_size, limit, what)
            data = f.read(limit + 1)
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from None
    _refuse_past(path, len(data), limit, what)
    try:
        return data.decode("utf-8")  # whatever the locale says
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {path}: not UTF-8 text (byte {exc.start})") from None


def _refuse_past(path: Path, size: int, limit: int, what: str) -> None:
    if size > limit:
        raise UsageError(f"{path} is {size} bytes, past the {limit} byte ({limit / MIB:g} MiB) limit of a {what}")


def write_atomically(path: Path, text: str) -> None:
    """`path` holds `text` (UTF-8) whole or is left as it was: written to a new temporary beside it, then renamed.
    Raises OSError (the caller names what it was writing)."""
    tmp = write_temporary(path, text)
    try:
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def write_temporary(path: Path, text: str) -> Path:
    """A new file beside `path` holding `text` (UTF-8), for the caller to rename into place (or unlink): created
    exclusively under a random name and written through its own descriptor, never through a name someone else
    could have made first. Readable as any file the user writes (0666 less the umask; mkstemp makes 0600)."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def _umask() -> int:
    """The process's umask, read without setting it (os.umask sets it, for every thread, for that instant)."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022

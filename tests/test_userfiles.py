"""userfiles.py: a file a user names is read only when it is a regular file, never past its limit, as UTF-8; a file
tokenpath writes goes through a fresh temporary, never a name someone could have planted."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tokenpath.errors import UsageError
from tokenpath.experiment import spec
from tokenpath.gateway import config as gwconfig
from tokenpath.monitor import config as moncfg
from tokenpath.stub import replay
from tokenpath.userfiles import read_text, write_atomically


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe.toml"
    os.mkfifo(path)
    return path


def test_a_regular_file_is_read_up_to_its_limit_and_refused_one_byte_past(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text("é = 1\n", encoding="utf-8")
    size = path.stat().st_size
    assert read_text(path, size, "file") == "é = 1\n"
    with pytest.raises(UsageError, match=f"{path} is {size} bytes, past the {size - 1} byte"):
        read_text(path, size - 1, "file")


@pytest.mark.parametrize("kind", ["device", "fifo", "directory", "latin-1", "missing"])
def test_what_is_not_a_regular_utf8_file_is_refused_in_one_line(kind: str, tmp_path: Path, fifo: Path) -> None:
    """/dev/zero was read until memory ran out, a FIFO blocked the read for ever."""
    paths = {"device": Path("/dev/zero"), "fifo": fifo, "directory": tmp_path, "missing": tmp_path / "no.toml",
             "latin-1": tmp_path / "l.toml"}  # fmt: skip
    (tmp_path / "l.toml").write_bytes("é = 1\n".encode("latin-1"))
    said = {"device": "not a regular file", "fifo": "not a regular file", "directory": "a directory",
            "latin-1": "not UTF-8 text", "missing": "No such file or directory"}  # fmt: skip
    with pytest.raises(UsageError, match=said[kind]) as caught:
        read_text(paths[kind], 1 << 20, "experiment file")
    assert "experiment file" in str(caught.value)
    assert "\n" not in str(caught.value)


LOADERS: dict[str, Callable[[Path], Any]] = {
    "experiment": spec.load,
    "recording": replay.load,
    "gateway config": gwconfig.read_toml,
    "monitor config": moncfg.read_toml,
}


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_every_file_a_user_names_is_refused_as_a_device_or_a_fifo(loader: str, fifo: Path) -> None:
    for path in (Path("/dev/zero"), fifo):
        with pytest.raises(UsageError, match="not a regular file"):
            LOADERS[loader](path)


def test_a_write_lands_whole_through_a_fresh_temporary_and_leaves_none(tmp_path: Path) -> None:
    target = tmp_path / "results.json"
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / "results.json.tmp").symlink_to(victim)  # the name the old writer used
    write_atomically(target, "new ✓")
    assert target.read_text(encoding="utf-8") == "new ✓"
    assert victim.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json", "results.json.tmp", "victim"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask  # as any file the user writes, not mkstemp's 0600

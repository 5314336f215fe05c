from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from tokenpath.load.runner import FD_SLACK, ensure_fd_limit


@pytest.fixture
def restore_nofile() -> Iterator[tuple[int, int]]:
    limits = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield limits
    resource.setrlimit(resource.RLIMIT_NOFILE, limits)


def test_the_soft_file_limit_is_raised_to_the_hard_limit(restore_nofile: tuple[int, int]) -> None:
    _, hard = restore_nofile
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    soft = ensure_fd_limit(100)
    assert soft == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert soft > 256


def test_more_streams_than_the_hard_limit_allows_is_refused_before_starting() -> None:
    """In a child process: a lowered hard limit cannot be raised again by the test process."""
    script = textwrap.dedent(f"""
        import resource
        from tokenpath.errors import UsageError
        from tokenpath.load.runner import ensure_fd_limit
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 512))
        try:
            ensure_fd_limit({512 - FD_SLACK + 1})
        except UsageError as exc:
            print("refused:", exc)
        print("fits:", ensure_fd_limit({512 - FD_SLACK}))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert "refused:" in out.stdout
    assert "add `client_workers`" in out.stdout
    assert "fits: 512" in out.stdout

"""The error tree is the one source of exit codes: the README's table is generated from it, and every error class
in the package belongs to it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tokenpath import errors

ROOT = Path(__file__).resolve().parents[1]


def test_readme_exit_code_table_is_the_tree() -> None:
    readme = (ROOT / "README.md").read_text()
    match = re.search(r"<!-- exit-codes:begin -->\n(.*?)\n<!-- exit-codes:end -->", readme, re.S)
    assert match, "README lost its exit-code markers"
    assert match.group(1) == errors.exit_code_table(), "regenerate it: python -m tokenpath.errors"


def test_every_exception_class_in_the_package_is_in_the_tree() -> None:
    """A class deriving from a bare Exception anywhere in src/ would escape the CLI's exit codes."""
    outside = []
    for path in (ROOT / "src" / "tokenpath").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
                builtin = bases & {"Exception", "BaseException", "RuntimeError", "ValueError", "OSError"}
                if builtin and (path.name, node.name) != ("errors.py", "TokenpathError"):
                    outside.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert outside == []


def test_peer_failures_are_never_usage_errors() -> None:
    for cls in (errors.PeerError, errors.InstrumentError):
        assert not issubclass(cls, errors.UsageError)
    assert errors.TotalTimeout.exit_code != errors.IdleTimeout.exit_code
    assert issubclass(errors.ConnectTimeout, errors.PeerTimeout)
    assert issubclass(errors.ConnectTimeout, errors.ConnectError)
    codes = {c.__name__: c.exit_code for c in errors._tree(errors.TokenpathError)}
    assert codes["UsageError"] == 2
    distinct = ("ConnectError", "DNSError", "TLSError", "HTTPStatusError", "ContentTypeError", "FirstByteTimeout",
                "IdleTimeout", "TotalTimeout", "RemoteProtocolError")  # fmt: skip
    assert len({codes[n] for n in distinct}) == len(distinct)

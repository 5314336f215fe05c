"""Prints the sha256 of each fixture's page (tests/report/test_page.py's PAGE_DIGESTS) and the matplotlib version
they hold for: run it after a deliberate change to the page, from the repository root."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import matplotlib

from tokenpath.report.render import write_report

DATA = Path(__file__).parent / "data"


def main() -> None:
    print(f'PAGE_DIGESTS_FOR = "{matplotlib.__version__}"')
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("matrix", "load", "sweep"):
            out = Path(tmp) / kind
            out.mkdir()
            shutil.copy(DATA / kind / "results.json", out)
            html = write_report(out, formats=("html",))["html"].read_text()
            print(f'    "{kind}": "{hashlib.sha256(html.encode()).hexdigest()}",')


if __name__ == "__main__":
    main()

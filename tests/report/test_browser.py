"""The report opened by a real browser: headless Chromium renders it from disk, offline."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import matplotlib.image
import pytest

from tokenpath.chromium import find_chromium
from tokenpath.report import browser
from tokenpath.report.render import write_report

DATA = Path(__file__).parent / "data"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def chromium() -> str:
    exe = find_chromium()
    if exe is None:
        if os.geteuid() == 0:
            pytest.fail("Chromium missing although `make test` installs it as root (scripts/install-proxies --all)")
        pytest.skip("Chromium not installed and not root: run `make test` as root, or apt-get install chromium")
    return exe


def test_chromium_renders_the_report_offline(chromium: str, tmp_path: Path) -> None:
    run = tmp_path / "matrix"
    run.mkdir()
    shutil.copy(DATA / "matrix" / "results.json", run)
    html = write_report(run, formats=["html"])["html"]

    dom = browser.dump_dom(html)
    assert "<title>tokenpath matrix: report fixture: the controls" in dom
    assert "Arrival timeline" in dom
    assert "stub write (ms)" in dom

    png = browser.screenshot(html, tmp_path / "report.png", width=1000, height=1400)
    pixels = matplotlib.image.imread(png)[..., :3]
    assert pixels.shape[:2] == (1400, 1000)
    ink = (pixels.mean(axis=2) < 0.9).mean()  # share of pixels that are not (near) white
    assert 0.02 < ink < 0.6, f"page looks blank or broken: {ink:.3f} of the pixels are inked"
    colours = {tuple(p) for p in (pixels[::20, ::20] * 255).astype(int).reshape(-1, 3)}
    assert len(colours) > 20  # text, chart colours, the green certification banner: not a flat page


def _has_colour(pixels: object, hex_colour: str, at_least: int) -> bool:
    import numpy as np

    rgb = np.array([int(hex_colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    close = np.abs(np.asarray(pixels)[..., :3] - rgb).max(axis=2) < 0.03
    return int(close.sum()) >= at_least


def test_the_headline_and_the_added_ttft_chart_are_above_the_fold(chromium: str, tmp_path: Path) -> None:
    """Issue 35: looked at, not only parsed. A 1280 x 800 window is the fold: the headline's background and the
    chart's p50 bars (colours nothing else on the page uses, the headline's 4 px border aside) are both in it."""
    from tokenpath.report import charts

    run = tmp_path / "matrix"
    run.mkdir()
    shutil.copy(DATA / "matrix" / "results.json", run)
    html = write_report(run, formats=["html"])["html"]
    png = browser.screenshot(html, tmp_path / "fold.png", width=1280, height=800)
    pixels = matplotlib.image.imread(png)
    assert _has_colour(pixels, "#e8f0fe", 2000), "the headline is not above the fold"
    assert _has_colour(pixels, charts.ADDED_P50, 2000), "the added-TTFT chart is not above the fold"

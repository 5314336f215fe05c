"""The charts' own contracts: matplotlib only when a chart is drawn, and the CDF read off the histogram's counts
is hdrh's recorded iterator's, point for point (the page digests in test_page.py hold the drawing itself)."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram

from tokenpath.report import charts

DATA = Path(__file__).parent / "data"


def iterated(encoded: str) -> tuple[list[float], list[float]]:
    """The CDF as hdrh's own recorded iterator walks it (what charts._cdf did before it read the counts)."""
    hist = HdrHistogram.decode(encoded)
    total = hist.get_total_count()
    points = [(i.value_iterated_to / 1000, i.total_count_to_this_value / total) for i in hist.get_recorded_iterator()]
    return [p[0] for p in points], [p[1] for p in points]


@pytest.mark.parametrize("seed", range(6))
def test_the_cdf_is_the_recorded_iterators(seed: int) -> None:
    rng = random.Random(seed)
    hist = HdrHistogram(1, 60_000_000, 3)  # µs, as load records added TTFT
    for _ in range(rng.randint(1, 3000)):
        spread = rng.choice((10, 1_000, 100_000, 30_000_000))  # the floor, a hold, a tail, a minute
        hist.record_value(rng.randint(1, spread), rng.randint(1, 4))
    if seed == 0:
        hist.record_value(60_000_000)  # the top bucket: the iterator's last point
    encoded = hist.encode().decode()
    assert charts._cdf(encoded) == iterated(encoded)


def test_a_single_value_histogram_and_an_empty_one() -> None:
    hist = HdrHistogram(1, 60_000_000, 3)
    empty = hist.encode().decode()
    assert charts._cdf(empty) == iterated(empty) == ([], [])
    hist.record_value(1234, 7)
    encoded = hist.encode().decode()
    assert charts._cdf(encoded) == iterated(encoded) == ([hist.get_highest_equivalent_value(1234) / 1000], [1.0])


def test_only_a_drawn_chart_imports_matplotlib(tmp_path: Path) -> None:
    shutil.copy(DATA / "load" / "results.json", tmp_path)
    script = (
        "import sys; from pathlib import Path; from tokenpath.report.render import write_report\n"
        f"write_report(Path({str(tmp_path)!r}), formats=('md', 'csv'))\n"
        "assert 'matplotlib' not in sys.modules, 'the table and CSV drew nothing'\n"
        "from tokenpath.report import charts\n"
        "assert charts.added_ttft([('pass', [1.0])], None) is not None\n"
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot is never needed'\n"
        "import matplotlib\n"
        "assert matplotlib.rcParams['svg.hashsalt'] is None, 'the style stays on the chart'\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "table.md").exists()

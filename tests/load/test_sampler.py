from __future__ import annotations

import subprocess
import sys

from tokenpath.load.sampler import ResourceSampler

BUSY = "import time\nend = time.time() + 3\nwhile time.time() < end: pass\n"


def test_sampler_sees_a_busy_process_tree() -> None:
    # A parent that starts a busy child: the child's CPU must be counted too.
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BUSY!r}])"]
    )
    try:
        with ResourceSampler(parent.pid) as sampler:
            parent.wait(10)
    finally:
        parent.kill()
    assert sampler.mean_cores is not None
    assert max(sampler.cores) > 0.5
    assert sampler.median_rss_mb is not None
    assert sampler.median_rss_mb > 1

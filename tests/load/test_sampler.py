from __future__ import annotations

import subprocess
import sys

from tokenpath.load.sampler import SAMPLE_S, ResourceSampler

# Busy for 2 s of its own CPU time, however long a loaded machine makes that take: the figure to find is fixed.
CHILD_CPU_S = 2.0
BUSY = f"import time\nwhile time.process_time() < {CHILD_CPU_S}: pass\n"


def test_sampler_sees_a_busy_process_tree() -> None:
    # A parent that starts a busy child: the child's CPU must be counted too.
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {BUSY!r}])"]
    )
    try:
        with ResourceSampler(parent.pid) as sampler:
            parent.wait(120)
    finally:
        parent.kill()
    assert sampler.mean_cores is not None
    # CPU-seconds the sampler attributed to the tree: the child's 2 s, less at most one sample interval at each end.
    assert sum(sampler.cores) * SAMPLE_S >= CHILD_CPU_S - 2 * SAMPLE_S
    assert sampler.median_rss_mb is not None
    assert sampler.median_rss_mb > 1

"""Why streams missed the stub's schedule, and the remedy that fits.

A stub that writes late is either out of capacity (its own processes busy: more --stub-workers help) or not given
the CPU when its deadlines come (the host is contended: steal, more runnable tasks than cores, or the target under
test taking the cores the stub needs; more stub workers only add to the queue). The figures that tell them apart
are sampled per run: the stub's own CPU, the host's steal share and run queue, and the direct path's own misses at
the same level.
"""

from __future__ import annotations

from dataclasses import dataclass

STUB_BUSY = 0.8  # a stub process busier than this share of a core is out of capacity
STEAL_WARN = 0.05  # the hypervisor took more than 5 % of the CPU time: the host is not ours alone


@dataclass(frozen=True, slots=True)
class Contention:
    """What was sampled while a target ran at one level (means over its runs); None: not sampled."""

    stub_cores: float | None  # the stub's processes, in cores (None: a stub on another host, or not visible)
    stub_workers: int
    steal_share: float | None
    run_queue: float | None  # runnable tasks, mean
    cores: int  # the host's
    direct_missed_share: float | None = None  # the direct path's share of streams off schedule, same level

    @property
    def stub_busy(self) -> bool:
        return self.stub_cores is not None and self.stub_cores >= STUB_BUSY * self.stub_workers

    @property
    def stolen(self) -> bool:
        return self.steal_share is not None and self.steal_share >= STEAL_WARN

    @property
    def queued(self) -> bool:
        return self.run_queue is not None and self.run_queue > self.cores

    def host_figures(self) -> str:
        parts = []
        if self.steal_share is not None:
            parts.append(f"steal {100 * self.steal_share:.0f} % of CPU time")
        if self.run_queue is not None:
            parts.append(f"{self.run_queue:.1f} runnable tasks on {self.cores} cores")
        if self.stub_cores is not None:
            parts.append(f"the stub used {self.stub_cores:.2f} cores with {self.stub_workers} worker(s)")
        return ", ".join(parts)


def schedule_missed(missed: int, streams: int, c: Contention, direct: bool) -> dict[str, str]:
    """The warning for a row whose streams missed the stub's schedule: stub capacity or host contention."""
    head = f"{missed} of {streams} streams missed the stub's schedule (excluded)"
    figures = c.host_figures()
    said = f"{head}: {figures}" if figures else head
    if c.stub_busy:
        return {
            "kind": "stub_saturated",
            "message": said,
            "remedy": (
                "the stub is out of capacity: add --stub-workers (one per core the host can spare), or "
                "lower the concurrency"
            ),
        }
    if c.stolen or c.queued:
        fixes = []
        if c.stolen:
            fixes.append("the hypervisor takes CPU (steal): a dedicated or larger VM")
        if c.queued:
            fixes.append(
                "more tasks want the CPU than there are cores: stop other work on the host, lower the "
                "concurrency or --client-workers, or use a machine with more cores"
            )
        remedy = "the host is contended, not the stub: --stub-workers will not help; " + "; ".join(fixes)
        return {"kind": "host_contention", "message": said, "remedy": remedy}
    if not direct and c.direct_missed_share is not None and c.direct_missed_share * streams < missed / 2:
        return {
            "kind": "host_contention",
            "message": f"{said}; the direct path at this level missed only {100 * c.direct_missed_share:.1f} %",
            "remedy": (
                "this target takes the cores the stub needs (the stub keeps its schedule without it): "
                "--stub-workers will not help; run the target on other cores (taskset) or another host "
                "(--target with --stub-url), or use a machine with more cores"
            ),
        }
    if c.stub_cores is None:
        return {
            "kind": "stub_saturated",
            "message": said,
            "remedy": (
                "watch the stub's CPU: if it is busy, start it with more --workers; if not, the host is "
                "contended (other work, steal) and more workers will not help"
            ),
        }
    return {
        "kind": "schedule_missed",
        "message": said,
        "remedy": (
            "neither the stub's mean CPU nor the host's figures name a cause: writes bunched in one tick "
            "(--stub-workers splits them, if the host has cores for them) or short preemptions (run the "
            "stub at real-time priority: --priority realtime, which needs CAP_SYS_NICE)"
        ),
    }

"""A process's peak resident memory, read from /proc (Linux), for the memory benchmarks. Only the
standard library: a measured child that imports it adds nothing to what it measures."""

from __future__ import annotations

import resource
from pathlib import Path


def peak_rss_mib(pid: int | None = None) -> float:
    """The peak resident set (VmHWM) of process `pid`, or of this process, in MiB.

    VmHWM starts afresh at exec, unlike getrusage's ru_maxrss, which on Linux keeps the parent's
    high-water mark across fork and exec. A process that has ended: NaN; this process where
    /proc cannot be read: ru_maxrss.
    """
    status = Path(f"/proc/{'self' if pid is None else pid}/status")
    try:
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:  # gone
        pass
    if pid is None:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return float("nan")

"""How long a test waits for work that needs the CPU (a server starting, a job running): its
allowance on a quiet machine, counted in the share of a core the work could have had.

A wait that counts wall-clock seconds fails whenever the machine is busy with something else:
`make test` beside other builds, or with busy loops running, starts a server in 60 s of wall
time only if it gets its CPU. Here a second of waiting counts as a second of the allowance on a
quiet machine, and as 1/s of one when s runnable tasks share each core (the load average over
the cores, at least 1). A real hang still fails: the allowance runs out at the quiet machine's
pace once the load is gone, and pytest's own timeout (tests/conftest.py) stretches the same way.
"""

from __future__ import annotations

import os
import threading
import time


def oversubscription() -> float:
    """How many runnable tasks share each core now (the 1-minute load average over the cores),
    at least 1."""
    return max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


class Patience:
    """A wait's allowance of `seconds`, used up by wall time divided by the oversubscription
    at each check."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.used = 0.0
        self._last = time.monotonic()

    def left(self) -> bool:
        """Whether some of the allowance is left (counting the time since the last check)."""
        now = time.monotonic()
        self.used += (now - self._last) / oversubscription()
        self._last = now
        return self.used < self.seconds


def join(thread: threading.Thread, seconds: float) -> None:
    """Wait for `thread` to end, for at most `seconds` of Patience."""
    patience = Patience(seconds)
    while thread.is_alive() and patience.left():
        thread.join(0.5)

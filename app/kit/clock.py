"""The service's clock: what time it is for paces and budget windows.

The app reads it from `app.state.clock` (`ClockDep`); tests give `create_app` a clock they
move themselves (tests.support.clock), so nothing depends on the wall clock or patches it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware, in UTC."""
        ...


class SystemClock:
    """The wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK = SystemClock()

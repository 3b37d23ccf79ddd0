"""A clock a test moves itself (app.kit.clock.Clock): to the next day, week or month."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class ManualClock:
    """Stands still until the test moves it."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 3, 10, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def set(self, when: datetime) -> None:
        self._now = when.astimezone(UTC)

    def advance(self, **delta: float) -> None:
        self._now += timedelta(**delta)

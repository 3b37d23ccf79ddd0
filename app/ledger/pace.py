"""A pace: a rate limit on spending, at most `mu` per UTC period, under a lifetime cap.

The lifetime cap (the dataset's, or a key's) is the privacy guarantee and is never refreshed.
A pace only spreads spending over time: the GDP releases admitted within one period compose to
at most `mu`, and a new period starts from zero, while everything ever spent still counts
against the cap. A refund (a job that never drew noise) does not give back its share of the
period's pace: a pace is never exceeded, even by a job admitted and refunded in a loop.

The clock is the service's (app.kit.clock), never read here: every function takes `now`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from fractions import Fraction
from typing import Protocol

from privclust.privacy import budget as bmath
from privclust.privacy.gdp import compose_squares

ZERO = Fraction(0)


class PacePeriod(StrEnum):
    """The periods a pace may have, in UTC: a calendar day, an ISO week (from Monday), or a
    calendar month."""

    DAY = "day"
    WEEK = "week"
    MONTH = "month"


def period_start(now: datetime, period: PacePeriod) -> datetime:
    """The start (UTC) of the period that holds `now`."""
    day = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    if period == PacePeriod.DAY:
        return day
    if period == PacePeriod.WEEK:
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def next_start(start: datetime, period: PacePeriod) -> datetime:
    """The start of the period after the one that begins at `start`."""
    if period == PacePeriod.DAY:
        return start + timedelta(days=1)
    if period == PacePeriod.WEEK:
        return start + timedelta(days=7)
    if start.month == 12:
        return start.replace(year=start.year + 1, month=1)
    return start.replace(month=start.month + 1)


class PaceRow(Protocol):
    """The pace columns of a running budget's row (dataset_budgets, key_budgets)."""

    pace_period: str | None
    pace_mu: float | None
    pace_start: datetime | None
    pace_used_sq: str


@dataclass(frozen=True)
class Pace:
    """A pace and what its current period has admitted (`used_sq`, the exact sum of squares),
    as of `start`, the start of the period it was last charged in."""

    period: PacePeriod
    mu: float
    start: datetime | None = None
    used_sq: Fraction = ZERO

    @classmethod
    def of_row(cls, row: PaceRow) -> Pace | None:
        if row.pace_period is None or row.pace_mu is None:
            return None
        start = row.pace_start
        return cls(
            PacePeriod(row.pace_period), float(row.pace_mu), start, Fraction(row.pace_used_sq)
        )

    def at(self, now: datetime) -> Pace:
        """The pace as of `now`: the same period, or a new one that has admitted nothing."""
        start = period_start(now, self.period)
        if self.start is not None and start <= self.start:
            return self
        return replace(self, start=start, used_sq=ZERO)

    def renews_at(self) -> datetime:
        assert self.start is not None, "call at(now) first"
        return next_start(self.start, self.period)

    @property
    def used(self) -> float:
        return compose_squares(self.used_sq)

    @property
    def remaining(self) -> float:
        return bmath.remaining_mu_sq(self.used_sq, self.mu)

    def admits(self, mu: float) -> bool:
        return bmath.is_admissible_sq(self.used_sq, mu, self.mu)

    def charged(self, mu: float) -> Pace:
        return replace(self, used_sq=self.used_sq + bmath.exact_square(mu))


def write_pace(row: PaceRow, pace: Pace | None) -> None:
    """Store `pace` (None: no pace) in the row's pace columns."""
    if pace is None:
        row.pace_period = row.pace_mu = row.pace_start = None
        row.pace_used_sq = "0/1"
        return
    row.pace_period, row.pace_mu, row.pace_start = pace.period.value, pace.mu, pace.start
    row.pace_used_sq = f"{pace.used_sq.numerator}/{pace.used_sq.denominator}"

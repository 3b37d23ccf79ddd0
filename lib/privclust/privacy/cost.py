"""A run's privacy cost as every record of it carries it: the plan, the result, the job, its
ledger entries and the API's privacy block all say the same five things about one set of
Gaussian releases."""

from __future__ import annotations

from typing import Protocol, TypedDict, cast


class ReleaseCost(TypedDict):
    """mu: the run's GDP parameter; epsilon and delta: the pair it was asked in (None when it
    was asked as mu); sigma: the noise multiplier of each release; releases: how many releases
    sigma was calibrated for (sqrt(releases) / sigma <= mu)."""

    mu: float
    epsilon: float | None
    delta: float | None
    sigma: float
    releases: int


class Costed(Protocol):
    """Anything that records a run's cost under those names."""

    @property
    def mu(self) -> float: ...
    @property
    def epsilon(self) -> float | None: ...
    @property
    def delta(self) -> float | None: ...
    @property
    def sigma(self) -> float: ...
    @property
    def releases(self) -> int: ...


def release_cost(source: Costed) -> ReleaseCost:
    """The five figures of `source`, to pass on whole (`**release_cost(plan)`)."""
    return cast(ReleaseCost, {name: getattr(source, name) for name in ReleaseCost.__annotations__})

"""Helpers for the clustering library's tests: the log of a run's Gaussian releases, what those
releases compose to, FastLloyd's joint sensitivity, and a run stopped from its progress callback."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from privclust.clustering import ClusteringInputError
from privclust.clustering.mechanisms.grid import grid_sensitivity
from privclust.clustering.mechanisms.lloyd import count_multiplier, default_count_share
from privclust.privacy import noise

Call = tuple[float, float, tuple[int, ...]]  # (sensitivity, sigma, shape) of one release


class ReleaseLog:
    """Wraps noise.integer_release (every Gaussian release of a run, the row count included) to
    record each one, and checks that each is integer data in, integer release out."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[Call] = []
        original = noise.integer_release

        def recording(
            values: np.ndarray, *, sensitivity: float, sigma: float, rng: np.random.Generator
        ) -> np.ndarray:
            assert np.issubdtype(np.asarray(values).dtype, np.integer)
            self.calls.append((sensitivity, sigma, np.shape(values)))
            out = original(values, sensitivity=sensitivity, sigma=sigma, rng=rng)
            assert out.dtype == np.int64
            return out

        monkeypatch.setattr(noise, "integer_release", recording)

    def composed_mu(self) -> float:
        # Each release adds N(0, (sensitivity*sigma)^2) to a statistic of that sensitivity, so it
        # is 1/sigma-GDP; GDP composes as the root of the sum of squares.
        return math.sqrt(sum(1.0 / sigma**2 for _, sigma, _ in self.calls))


def composed_mu(calls: list[Call], true: list[float]) -> float:
    """What releases of statistics of true l2 sensitivities `true` compose to.

    A release of a statistic of l2 sensitivity S with noise std s is (S/s)-GDP; GDP composes
    as the root of the sum of squares. The noise std of a call is its sensitivity x sigma.
    """
    return math.sqrt(sum((t / (s * sig)) ** 2 for (s, sig, _), t in zip(calls, true, strict=True)))


def joint_sensitivity(d: int, relation: str = "add-remove") -> float:
    """The l2 sensitivity of one FastLloyd step's joint release (offset sums and scaled counts)
    with the default count share."""
    s, m = grid_sensitivity(d), count_multiplier(d, default_count_share(d))
    if relation == "replace-one":
        return max(2.0 * s, math.sqrt(2.0) * math.hypot(s, m))
    return math.hypot(s, m)


class Cancelled(Exception):
    """What a progress callback raises to stop a run (as a job's cancellation does)."""


def cancelling_at(iteration: int, seen: list[int]) -> Callable[[int, int], None]:
    """A progress callback that records each iteration in `seen` and raises Cancelled at
    `iteration`."""

    def progress(done: int, total: int) -> None:
        seen.append(done)
        if done == iteration:
            raise Cancelled

    return progress


def refused_field(log: ReleaseLog, run: Callable[..., Any], kwargs: dict[str, object]) -> str:
    """The field a run on 10 x 2 zeros (k = 2, radius 1, mu 1, then `kwargs`) refuses, checked
    to be refused before anything was released (not even a noisy count)."""
    args: dict[str, object] = {"k": 2, "radius": 1.0, "mu": 1.0, **kwargs}
    with pytest.raises(ClusteringInputError) as info:
        run(np.zeros((10, 2)), **args)
    assert log.calls == []
    return info.value.field

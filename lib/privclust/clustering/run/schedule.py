"""A plan's schedule: every Gaussian release a run of it makes, in the order it makes them, each
with what it releases, how many times, its l2 sensitivity and the std of its noise.

A method describes its releases before the noise multiplier is known (`Planned`: what, how
many times, the sensitivity, and how many releases of the plan's sigma each is priced as);
the plan (privclust.clustering.run.method.plan_method) fixes sigma and fills in the noise
(`ScheduledRelease`), adds the run's own row count before them and the summaries' sizes and
loss after them (`summary_sigmas`, from the summaries' share of mu:
privclust.clustering.run.options.budget_split). Every run releases through its rows' one door
(`Rows.release`) exactly what its plan scheduled, array by array; the schedule composes (GDP:
the root of the sum of the releases' mu^2) to at most the plan's per-row mu.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from privclust.clustering.data.release import Gaussian
from privclust.privacy.gdp import noise_multiplier, remaining_after
from privclust.privacy.noise import noise_std

# What a release releases (`ScheduledRelease.what`).
ROW_COUNT = "row count"  # a run's own noisy row count N~
VOTE_HISTOGRAM = "vote histogram"  # one PE-means iteration's noisy nearest-candidate counts
TREE_COUNTS = "tree level counts"  # one LSH-tree level's noisy child counts
NOISY_SUMS = "noisy sums"  # clusters' (or leaves') grid sums
NOISY_COUNTS = "noisy counts"  # clusters' row counts
LLOYD_STEP = "lloyd step"  # one noisy Lloyd step: offset sums and scaled counts, jointly
SIZES = "sizes"  # the summaries' per-centre counts
LOSS = "loss"  # the summaries' clipped loss sum
CLUSTER_LOSSES = "cluster losses"  # pe-lloyd's per-cluster clipped losses of one chain

# The loss sum's part of the summaries' mu, in GDP terms (mu_loss^2 = 0.8 mu_summary^2); the
# sizes get the rest. The loss is the hard one to estimate (its sensitivity, the clip B of at
# least R^2, is far above a typical row's squared distance), while a size's noise is small next
# to N~/k.
SUMMARY_LOSS_SHARE = 0.8
# A row's clipped squared distance is put on a grid of B / 2^LOSS_GRID_BITS: a relative
# resolution of 1e-6 of the largest possible term, far below the noise, and sums stay exact
# in int64 for up to 2^43 rows.
LOSS_GRID_BITS = 20


@dataclass(frozen=True)
class Planned:
    """A method's releases of one statistic before sigma is known: `times` releases of l2
    `sensitivity`, each priced as `weight` releases of the plan's sigma (its noise std is
    sensitivity x sigma / sqrt(weight))."""

    what: str
    times: int
    sensitivity: float
    weight: int = 1


@dataclass(frozen=True)
class ScheduledRelease:
    """`times` releases of `what`, each of l2 `sensitivity`, with integer Gaussian noise of
    std `std` (noise multiplier `sigma`, priced as `weight` releases of it): the `Gaussian`
    a run passes the rows' door (`noise`), and the std that door draws with."""

    what: str
    times: int
    sensitivity: float
    sigma: float
    weight: int
    std: float

    @property
    def noise(self) -> Gaussian:
        return Gaussian(self.sensitivity, self.sigma, self.weight)

    @property
    def mu_squared(self) -> Fraction:
        """What these releases cost together, squared, exactly: times x weight / sigma^2."""
        return self.times * self.weight / Fraction(self.sigma) ** 2


def scheduled(what: str, times: int, noise: Gaussian) -> ScheduledRelease:
    """`times` releases of `what` with `noise`, its std as the rows' door draws it
    (privclust.clustering.data.release.central_release)."""
    std = noise_std(noise.scaled_sensitivity, noise.sigma)
    return ScheduledRelease(what, times, noise.sensitivity, noise.sigma, noise.weight, std)


def filled(parts: Iterable[Planned], sigma: float) -> tuple[ScheduledRelease, ...]:
    """A method's planned releases with the plan's noise multiplier `sigma`."""
    return tuple(
        scheduled(p.what, p.times, Gaussian(p.sensitivity, sigma, p.weight)) for p in parts
    )


def priced_releases(parts: Iterable[Planned]) -> int:
    """How many releases of one sigma `parts` are priced as: the sum of times x weight."""
    return sum(p.times * p.weight for p in parts)


def composed_mu(schedule: Iterable[ScheduledRelease]) -> float:
    """The GDP composition of a schedule, sqrt(sum of its releases' mu^2), rounded up."""
    total = sum((entry.mu_squared for entry in schedule), Fraction(0))
    root = math.sqrt(total)
    while Fraction(root) ** 2 < total:
        root = math.nextafter(root, math.inf)
    return root


def summary_sigmas(mu_summary: float) -> tuple[float, float]:
    """(sizes sigma, loss sigma) of the two summary releases, composing to at most mu_summary:
    the loss gets mu_loss = sqrt(SUMMARY_LOSS_SHARE) mu_summary, the sizes what is left."""
    mu_loss = math.sqrt(SUMMARY_LOSS_SHARE) * mu_summary
    mu_sizes = remaining_after(mu_summary, mu_loss)
    return noise_multiplier(mu_sizes, 1), noise_multiplier(mu_loss, 1)


def loss_sensitivity() -> float:
    """l2 sensitivity of the loss sum in grid units, under add/remove and replace-one alike:
    every row's term is an integer in [0, 2^LOSS_GRID_BITS]."""
    return float(2**LOSS_GRID_BITS)

"""How a release's noise is set, and the central engine's noise: one place that adds it.

A release is a pass's exact integer statistic and its noise together (`Rows.release`). Each
array of the statistic is released with its own `Gaussian`: integer Gaussian noise of std
sensitivity x sigma / sqrt(weight) (privclust.privacy.noise.integer_release), which makes it
(sqrt(weight)/sigma)-GDP for a statistic of l2 sensitivity `sensitivity`: a weight w prices the
release as w releases of noise multiplier sigma (a share of the budget set by scaling the
sensitivity, while every release of a run shares one sigma).

`central_release` is how a run in one place adds that noise: once, in the caller's process,
after the partitions' sum. An engine that adds noise otherwise (a federation's members, each
adding a share) overrides `Rows.release`; nothing above the rows knows which.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from privclust.privacy import noise


@dataclass(frozen=True)
class Gaussian:
    """The noise of one released array: l2 `sensitivity`, noise multiplier `sigma`, priced as
    `weight` releases of that sigma."""

    sensitivity: float
    sigma: float
    weight: int = 1

    @property
    def scaled_sensitivity(self) -> float:
        """The sensitivity the noise std is calibrated on: sensitivity / sqrt(weight), rounded
        up. The float square root and division may each round down, and a std a hair short of
        the calibrated one would overstate the privacy; exact for weight 1."""
        if self.weight == 1:
            return self.sensitivity
        scaled = self.sensitivity / math.sqrt(self.weight)
        exact = Fraction(self.sensitivity) ** 2
        while math.isfinite(scaled) and Fraction(scaled) ** 2 * self.weight < exact:
            scaled = math.nextafter(scaled, math.inf)
        return scaled

    @property
    def mu(self) -> float:
        """What this release costs in GDP terms: sqrt(weight) / sigma."""
        return math.sqrt(self.weight) / self.sigma


def central_release(
    totals: Sequence[np.ndarray], noises: Sequence[Gaussian], rng: np.random.Generator
) -> tuple[np.ndarray, ...]:
    """Each exact total plus its integer Gaussian noise, drawn from `rng` in order."""
    if len(totals) != len(noises):
        raise ValueError(f"{len(totals)} statistics but {len(noises)} noises")
    return tuple(
        noise.integer_release(total, sensitivity=g.scaled_sensitivity, sigma=g.sigma, rng=rng)
        for total, g in zip(totals, noises, strict=True)
    )

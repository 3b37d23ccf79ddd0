"""The noise of a federated release, drawn by the members as shares.

A central release adds round(Z), Z ~ N(0, (sensitivity x sigma)^2), to an exact integer
statistic and is (1/sigma)-GDP (privclust.privacy.noise). In a federation no single party may
hold the whole noise: the coordinator stores and shows the result, so a coordinator that drew
the noise could subtract it; a member that drew it could subtract it from the released sum and
learn the other members' exact total.

The rule here (docs/algorithms.md, "Federated releases"): a federation that tolerates c
colluding members names c + 1 of them, by their public order, the release's noise holders. Each
holder adds a whole share, round(Z_h) with Z_h ~ N(0, (sensitivity x sigma)^2) drawn from its
own ChaCha20 generator keyed from OS entropy; every other member adds nothing. The release is
the exact statistic plus the sum of the shares.

Why it is (1/sigma)-GDP against the coordinator and any c members together: a coalition of at
most c members misses at least one holder h, whose share it does not know and whose masked
vector it sees only inside the honest members' sum (privclust.federation.masks). What it sees of
that sum is v_H + round(Z_h) + R, where v_H is the honest members' exact statistic (an integer
vector) and R is the other honest shares, independent of v_H and of Z_h. Since v_H is integer,
v_H + round(Z_h) = round(v_H + Z_h), the rounding of the Gaussian mechanism with l2 sensitivity
`sensitivity` and noise std sensitivity x sigma, which is (1/sigma)-GDP (Dong, Roth and Su);
rounding and then adding the independent R are post-processing. A row added to or removed from
an honest member moves v_H by at most `sensitivity` in l2, so the release is (1/sigma)-GDP in
the honest members' rows, exactly the central release's guarantee: the ledger charges a
federated release what it charges the central one, and T of them compose to sqrt(T)/sigma.

The price of an exact statement: the summed noise has c + 1 times the central variance (a
federation with c = 0 has exactly the central noise). Splitting one Gaussian into smaller
integer shares would keep the central variance, but a sum of rounded or discrete Gaussians is
not a rounded Gaussian, and the known bounds for it (Kairouz, Liu and Steinke, ICML 2021) are
approximate concentrated-DP statements, not an exact mu-GDP one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from privclust.privacy.gdp import PrivacyParameterError
from privclust.privacy.noise import job_generator, noise_std, rounded_gaussian

__all__ = ["MAX_MEMBERS", "MIN_MEMBERS", "NoiseShares", "release_mu"]

MIN_MEMBERS = 2
MAX_MEMBERS = 16


@dataclass(frozen=True)
class NoiseShares:
    """Who draws a federated release's noise: `members` parties, of which at most `colluding`
    may pool what they know with the coordinator."""

    members: int
    colluding: int = 0

    def __post_init__(self) -> None:
        if not MIN_MEMBERS <= self.members <= MAX_MEMBERS:
            raise ValueError(f"a federation has {MIN_MEMBERS} to {MAX_MEMBERS} members")
        if not 0 <= self.colluding < self.members:
            raise ValueError(f"colluding members must be in [0, {self.members - 1}]")

    @property
    def holders(self) -> int:
        """How many members draw a whole share: c + 1, so that c of them always miss one."""
        return self.colluding + 1

    def holds_noise(self, position: int) -> bool:
        """Whether the member at `position` (its place in the federation's public order) draws
        a share."""
        if not 0 <= position < self.members:
            raise ValueError(f"a position in [0, {self.members})")
        return position < self.holders

    def variance_factor(self) -> int:
        """The summed noise's variance over the central release's (a utility figure)."""
        return self.holders

    def share(
        self,
        position: int,
        shape: int | tuple[int, ...],
        *,
        sensitivity: float,
        sigma: float,
        rng: np.random.Generator | None = None,
    ) -> np.ndarray:
        """The int64 noise share of the member at `position` for one release: round(Z) with
        Z ~ N(0, (sensitivity x sigma)^2) for a holder, zeros for everyone else.

        `rng` is for tests only; by default the draw comes from a fresh ChaCha20 generator keyed
        from OS entropy, which no other party can know."""
        if not self.holds_noise(position):
            return np.zeros(shape, dtype=np.int64)
        return rounded_gaussian(shape, noise_std(sensitivity, sigma), job_generator(rng))


def release_mu(sigma: float) -> float:
    """What the ledger charges for one federated release with noise multiplier `sigma`: 1/sigma
    mu-GDP, as for the central release (the module docstring says why)."""
    if isinstance(sigma, bool) or not (
        isinstance(sigma, float | int) and math.isfinite(sigma) and sigma > 0.0
    ):
        raise PrivacyParameterError(f"sigma must be finite and > 0, got {sigma!r}", field="sigma")
    mu = 1.0 / float(sigma)
    # Rounded up: a charge a hair below 1/sigma would understate the cost.
    if Fraction(mu) * Fraction(sigma) < 1:
        mu = math.nextafter(mu, math.inf)
    return mu

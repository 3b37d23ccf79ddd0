"""What a release costs a member of a federation, decided by the member itself.

The member works out each release's l2 sensitivity itself (`required_sensitivities`), from the
pass and its dataset's declared terms, under add/remove neighbours (a federated dataset's row
count is private) and with its privacy unit's bound m, so that a coordinator that understated a
sensitivity cannot buy a release for less than it costs (`release_mu_squared`). The noises a
coordinator asks for travel as plain numbers (`encode_noises`, `decode_noises`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from privclust.clustering.data.release import Gaussian
from privclust.clustering.data.rows import RowCount, Statistic
from privclust.clustering.evolution.vote import VoteCounts
from privclust.clustering.mechanisms.candidates import ClusterLosses
from privclust.clustering.mechanisms.grid import grid_sensitivity
from privclust.clustering.mechanisms.lloyd import JointLloydSums
from privclust.clustering.run.schedule import loss_sensitivity
from privclust.federation.passes import PassError, positive_number
from privclust.privacy.noise import MAX_NOISE_STD, noise_std

__all__ = ["decode_noises", "encode_noises", "release_mu_squared", "required_sensitivities"]


def required_sensitivities(statistic: Statistic, n_cols: int, unit_bound: int) -> list[float]:
    """The l2 sensitivity of each array of `statistic` as the member computes it: add/remove
    neighbours, a unit of privacy of at most `unit_bound` rows (m rows move it m times as
    far as one row)."""
    m = float(unit_bound)
    if isinstance(statistic, RowCount | VoteCounts):
        return [m]
    if isinstance(statistic, JointLloydSums):
        return [m * math.hypot(grid_sensitivity(n_cols), float(statistic.multiplier))]
    if isinstance(statistic, ClusterLosses):
        return [m * loss_sensitivity()]  # each row adds <= 2^G grid units to one cluster's sum
    raise PassError(f"{type(statistic).__name__} is not a federated pass")


def encode_noises(noises: Sequence[Gaussian]) -> list[dict[str, Any]]:
    return [{"sensitivity": g.sensitivity, "sigma": g.sigma, "weight": g.weight} for g in noises]


def decode_noises(body: Any, arrays: int) -> list[Gaussian]:
    """One `Gaussian` per array of the pass, each finite and positive."""
    if not isinstance(body, list) or len(body) != arrays:
        raise PassError(f"noises: a list of {arrays}")
    noises = []
    for item in body:
        if not isinstance(item, Mapping) or set(item) != {"sensitivity", "sigma", "weight"}:
            raise PassError("a noise is {sensitivity, sigma, weight}")
        s, sigma, w = item["sensitivity"], item["sigma"], item["weight"]
        if not all(positive_number(v) for v in (s, sigma)):
            raise PassError("a noise's sensitivity and sigma are finite numbers > 0")
        if not isinstance(w, int) or isinstance(w, bool) or not 1 <= w <= 1 << 20:
            raise PassError("a noise's weight is an integer in [1, 2^20]")
        noises.append(Gaussian(float(s), float(sigma), w))
    return noises


def release_mu_squared(noises: Sequence[Gaussian], required: Sequence[float]) -> Fraction:
    """What a release costs the member, mu^2, exactly: each array's noise std (as it will be
    drawn, `noise_std` of the scaled sensitivity) against the sensitivity the member requires;
    the arrays compose. PassError for a std beyond what a draw allows."""
    total = Fraction(0)
    for g, need in zip(noises, required, strict=True):
        std = noise_std(g.scaled_sensitivity, g.sigma)
        if not (math.isfinite(std) and 0.0 < std <= MAX_NOISE_STD):
            raise PassError(f"a noise std of {std!r} cannot be drawn")
        total += (Fraction(need) / Fraction(std)) ** 2
    return total

"""The noise of a federated release: who draws it, its distribution, what the ledger charges."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from privclust.federation import NoiseShares, release_mu
from privclust.federation.ring import from_ring, ring_sum, to_ring
from privclust.privacy.gdp import PrivacyParameterError, noise_multiplier
from privclust.privacy.noise import noise_std


@pytest.mark.parametrize(("members", "colluding"), [(2, 0), (3, 1), (5, 2), (16, 15)])
def test_every_coalition_of_c_members_misses_a_whole_share(members: int, colluding: int) -> None:
    plan = NoiseShares(members=members, colluding=colluding)
    assert plan.holders == colluding + 1
    holders = {p for p in range(members) if plan.holds_noise(p)}
    for coalition in itertools.combinations(range(members), colluding):
        assert holders - set(coalition), coalition


def test_the_summed_noise_is_integer_with_c_plus_one_times_the_central_variance() -> None:
    # 4 members tolerating 1 colluder: two whole shares of std 12 (sensitivity 4 x sigma 3).
    # Rounding adds 1/12 to each share's variance. 200,000 summed draws: the sample variance's
    # standard error is 0.32%, so a 1.5% band fails by chance with probability < 1e-5 (the
    # seeds are fixed besides).
    plan = NoiseShares(members=4, colluding=1)
    rng = np.random.default_rng(11)
    shares = [plan.share(p, 200_000, sensitivity=4.0, sigma=3.0, rng=rng) for p in range(4)]
    assert all(share.dtype == np.int64 for share in shares)
    assert not np.any(shares[2]) and not np.any(shares[3])
    summed = from_ring(ring_sum([to_ring(share) for share in shares]))
    np.testing.assert_array_equal(summed, np.sum(shares, axis=0))
    expected = plan.variance_factor() * (noise_std(4.0, 3.0) ** 2 + 1 / 12)
    assert summed.var() == pytest.approx(expected, rel=0.015)
    assert abs(summed.mean()) < 0.2  # std of the mean 0.038: over 5 standard errors
    # The two holders' draws are independent: their correlation is within 5 standard errors.
    assert abs(np.corrcoef(shares[0], shares[1])[0, 1]) < 5 / math.sqrt(200_000)


def test_a_share_without_a_test_generator_comes_from_fresh_os_entropy() -> None:
    plan = NoiseShares(members=2, colluding=1)
    first = plan.share(0, 8, sensitivity=1.0, sigma=100.0)
    second = plan.share(1, 8, sensitivity=1.0, sigma=100.0)
    assert not np.array_equal(first, second)


def test_the_charge_is_the_central_releases_rounded_up() -> None:
    for mu, releases in [(0.5, 1), (1.0, 7), (0.37, 13), (3.0, 2)]:
        sigma = noise_multiplier(mu, releases)
        charged = release_mu(sigma)
        assert Fraction(charged) * Fraction(sigma) >= 1
        assert Fraction(math.nextafter(charged, 0.0)) * Fraction(sigma) < 1
        # T releases at sigma compose to sqrt(T)/sigma <= mu: the plan's budget covers them.
        assert math.sqrt(releases) * Fraction(1) / Fraction(sigma) <= mu
    for bad in (0.0, -1.0, math.inf, math.nan, True):
        with pytest.raises(PrivacyParameterError):
            release_mu(bad)


@pytest.mark.parametrize(("members", "colluding"), [(1, 0), (17, 0), (3, 3), (3, -1)])
def test_a_federation_outside_its_bounds_is_refused(members: int, colluding: int) -> None:
    with pytest.raises(ValueError):
        NoiseShares(members=members, colluding=colluding)

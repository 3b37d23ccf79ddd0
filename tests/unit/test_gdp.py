"""Gaussian-DP conversions: agreement with Google's dp-accounting, safe rounding, properties.

References:
- dp_accounting's analytic Gaussian-mechanism calibration (Balle & Wang 2018):
  `get_sigma_gaussian` / `get_epsilon_gaussian` (sigma = 1/mu for sensitivity 1) and
  `pld.privacy_loss_mechanism.GaussianPrivacyLoss(sigma).get_delta_for_epsilon`, the closed
  form of the hockey-stick divergence. These are its exact routines (its PLD and RDP
  accountants discretise or bound); they are computed in double precision, so agreement is
  asked to 1e-6 relative.
- mpmath at a precision chosen per case (enough digits for the cancellation in
  Phi(-t1) - exp(eps) Phi(-t2)) for the direction of rounding, which must hold exactly.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from dp_accounting import get_epsilon_gaussian, get_sigma_gaussian
from dp_accounting.pld.privacy_loss_mechanism import GaussianPrivacyLoss
from hypothesis import given, settings
from hypothesis import strategies as st
from privclust.privacy.gdp import (
    PrivacyParameterError,
    compose,
    delta_from_mu_epsilon,
    epsilon_from_mu_delta,
    exact_square_sum,
    mu_from_epsilon_delta,
    noise_multiplier,
)

EPSILONS = [1e-4, 1e-2, 0.1, 0.5, 1.0, 2.0, 4.0, 10.0, 50.0]
DELTAS = [1e-12, 1e-9, 1e-6, 1e-5, 1e-3, 0.1]
GRID = [(eps, delta) for eps in EPSILONS for delta in DELTAS]

# Extremes for the rounding-direction checks: the whole supported range and its corners.
EXTREME_EPSILONS = [1e-4, 1e-3, 0.05, 1.0, 7.0, 100.0, 1000.0]
EXTREME_DELTAS = [1e-300, 1e-100, 1e-30, 1e-12, 1e-5, 0.01, 0.25, 0.5]
EXTREMES = [(eps, delta) for eps in EXTREME_EPSILONS for delta in EXTREME_DELTAS]

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
epsilons = st.floats(min_value=-4.0, max_value=3.0).map(lambda x: 10.0**x)
deltas = st.floats(min_value=-300.0, max_value=math.log10(0.5)).map(lambda x: 10.0**x)


def rel(a: float, b: float) -> float:
    return abs(a - b) / abs(b)


# ---------------------------------------------------------------------------------------------
# High-precision reference


def exact_delta(mu: float, epsilon: float) -> mpmath.mpf:
    """delta(epsilon; mu) of the float inputs, exact to far more digits than a float holds."""
    # The two terms agree to about log10((1 + t2)/mu) digits before they differ.
    digits = 60 + max(0, math.ceil(math.log10(1 + epsilon / mu + mu) - math.log10(mu)))
    with mpmath.workdps(digits):
        m, e = mpmath.mpf(mu), mpmath.mpf(epsilon)
        t1 = e / m - m / 2
        t2 = e / m + m / 2
        root2 = mpmath.sqrt(2)
        value = mpmath.erfc(t1 / root2) / 2 - mpmath.exp(e) * mpmath.erfc(t2 / root2) / 2
        return +value


def test_high_precision_reference_matches_known_values() -> None:
    # delta(0; mu) = 2 Phi(mu/2) - 1 and, for mu = 1, eps = 1: 0.1269... (Dong, Roth, Su).
    assert float(exact_delta(2.0, 0.0)) == pytest.approx(2 * 0.8413447460685429 - 1, rel=1e-15)
    assert float(exact_delta(1.0, 1.0)) == pytest.approx(0.12693673750664397, rel=1e-14)


# ---------------------------------------------------------------------------------------------
# Agreement with dp_accounting


@pytest.mark.parametrize(("epsilon", "delta"), GRID)
def test_mu_matches_dp_accounting(epsilon: float, delta: float) -> None:
    reference = 1.0 / get_sigma_gaussian(epsilon, delta, tol=1e-15)
    assert rel(mu_from_epsilon_delta(epsilon, delta), reference) <= 1e-6


@pytest.mark.parametrize(("epsilon", "delta"), GRID)
def test_delta_matches_dp_accounting(epsilon: float, delta: float) -> None:
    # At mu = mu(eps, delta) both must give back delta; also check a mu not from our solver.
    for mu in (mu_from_epsilon_delta(epsilon, delta), 0.9 * mu_from_epsilon_delta(epsilon, delta)):
        reference = GaussianPrivacyLoss(standard_deviation=1.0 / mu).get_delta_for_epsilon(epsilon)
        assert rel(delta_from_mu_epsilon(mu, epsilon), reference) <= 1e-6


@pytest.mark.parametrize(("epsilon", "delta"), GRID)
def test_epsilon_matches_dp_accounting(epsilon: float, delta: float) -> None:
    mu = mu_from_epsilon_delta(epsilon, delta)
    # Its bracket search evaluates log1p(-1) = -inf for tiny epsilon (the cancellation its
    # log-space formula cannot avoid); that answer is still usable, the warning is not ours.
    with np.errstate(divide="ignore"):
        reference = get_epsilon_gaussian(1.0 / mu, delta, tol=1e-15)
    assert rel(epsilon_from_mu_delta(mu, delta), reference) <= 1e-6


# ---------------------------------------------------------------------------------------------
# Safe rounding against the high-precision reference


@pytest.mark.parametrize(("epsilon", "delta"), EXTREMES)
def test_mu_never_exceeds_the_exact_value(epsilon: float, delta: float) -> None:
    mu = mu_from_epsilon_delta(epsilon, delta)
    # Safe: the exact delta at the returned mu is within the request ...
    assert exact_delta(mu, epsilon) <= delta
    # ... and tight: a mu larger by one part in 1e10 already breaks it.
    assert exact_delta(mu * (1 + 1e-10), epsilon) > delta


@pytest.mark.parametrize(("epsilon", "delta"), EXTREMES)
def test_delta_is_never_below_the_exact_value(epsilon: float, delta: float) -> None:
    mu = mu_from_epsilon_delta(epsilon, delta)
    for m in (mu, mu * 0.7, mu * 1.3):
        exact = exact_delta(m, epsilon)
        computed = delta_from_mu_epsilon(m, epsilon)
        assert computed >= exact
        # Below the float range the answer is the smallest subnormal or so.
        assert computed <= exact * (1 + 1e-9) + 1e-323


@pytest.mark.parametrize(("epsilon", "delta"), EXTREMES)
def test_epsilon_is_never_below_the_exact_value(epsilon: float, delta: float) -> None:
    mu = mu_from_epsilon_delta(epsilon, delta)
    eps = epsilon_from_mu_delta(mu, delta)
    # Safe: at the returned epsilon the exact delta is within the target ...
    assert exact_delta(mu, eps) <= delta
    # ... and tight: an epsilon smaller by 1e-10 relative (or 1e-12 absolute) exceeds it.
    assert exact_delta(mu, max(eps * (1 - 1e-10) - 1e-12, 0.0)) > delta


# (mu, epsilon) pairs across and beyond the supported range whose delta is a normal float
# (t1 = eps/mu - mu/2 <= 37 or so; beyond it delta underflows and is covered above).
WIDE = [
    (mu, eps)
    for mu in (1e-300, 1e-12, 1e-6, 0.01, 0.3, 1.0, 3.0, 30.0, 79.0)
    for eps in (0.0, 1e-300, 1e-12, 1e-6, 0.01, 1.0, 100.0, 5000.0)
    if eps / mu - mu / 2 <= 37.0
]


@pytest.mark.parametrize(("mu", "epsilon"), WIDE)
def test_delta_bound_holds_everywhere(mu: float, epsilon: float) -> None:
    """Also far outside the supported range (tiny epsilon or mu) the bound stays an upper bound."""
    exact = exact_delta(mu, epsilon)
    computed = delta_from_mu_epsilon(mu, epsilon)
    assert exact <= computed <= 1.0
    assert computed <= exact * (1 + 1e-9) + 1e-323


def test_delta_at_epsilon_zero_is_two_phi_minus_one() -> None:
    for mu in (0.01, 0.5, 1.0, 4.0):
        expected = float(mpmath.erf(mpmath.mpf(mu) / (2 * mpmath.sqrt(2))))
        assert delta_from_mu_epsilon(mu, 0.0) == pytest.approx(expected, rel=1e-12)
        assert delta_from_mu_epsilon(mu, 0.0) >= expected


def test_epsilon_is_zero_when_delta_covers_the_whole_curve() -> None:
    mu = 0.5
    delta_at_zero = float(mpmath.erf(mpmath.mpf(mu) / (2 * mpmath.sqrt(2))))
    assert epsilon_from_mu_delta(mu, min(0.99, delta_at_zero * 1.01)) == 0.0
    assert epsilon_from_mu_delta(mu, delta_at_zero * 0.99) > 0.0


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(1e-4, 1e-300), (1000.0, 0.5), (1000.0, 1e-300), (1e-4, 0.5), (1e6, 1e-300), (1e-4, 5e-324)],
)
def test_corners_are_finite_and_consistent(epsilon: float, delta: float) -> None:
    mu = mu_from_epsilon_delta(epsilon, delta)
    assert math.isfinite(mu) and mu > 0
    assert delta_from_mu_epsilon(mu, epsilon) <= delta
    back = epsilon_from_mu_delta(mu, delta)
    assert math.isfinite(back)
    # A subnormal delta carries only a few significant bits, so allow more there.
    assert rel(back, epsilon) <= (1e-3 if delta < 1e-307 else 1e-9)


@pytest.mark.parametrize(
    ("epsilon", "delta"),
    [(1e300, 0.5), (1.7e308, 1e-300), (1e-300, 0.5), (5e-324, 1e-300), (5e-324, 5e-324)],
)
def test_absurd_magnitudes_still_round_safely(epsilon: float, delta: float) -> None:
    mu = mu_from_epsilon_delta(epsilon, delta)
    assert mu > 0
    assert exact_delta(mu, epsilon) <= delta


def test_huge_mu_saturates_delta_and_overflowing_epsilon_is_refused() -> None:
    # t1 = eps/mu - mu/2 is hugely negative here: delta is 1 to every float digit.
    assert delta_from_mu_epsilon(1.7e158, 1.7e308) == 1.0
    assert delta_from_mu_epsilon(100.0, 1.0) == 1.0
    with pytest.raises(PrivacyParameterError) as info:
        epsilon_from_mu_delta(1e155, 0.5)  # epsilon ~ mu^2/2 overflows
    assert info.value.field == "mu"


# ---------------------------------------------------------------------------------------------
# Properties


@SETTINGS
@given(eps=epsilons, delta=deltas, factor=st.floats(min_value=1.0001, max_value=10.0))
def test_mu_increases_with_epsilon(eps: float, delta: float, factor: float) -> None:
    assert mu_from_epsilon_delta(eps, delta) < mu_from_epsilon_delta(eps * factor, delta)


@SETTINGS
@given(eps=epsilons, delta=deltas, factor=st.floats(min_value=1.001, max_value=1e6))
def test_mu_increases_with_delta(eps: float, delta: float, factor: float) -> None:
    larger = min(delta * factor, 0.5)
    if larger <= delta * 1.0001:
        return
    assert mu_from_epsilon_delta(eps, delta) < mu_from_epsilon_delta(eps, larger)


@SETTINGS
@given(eps=epsilons, delta=deltas)
def test_round_trip_epsilon_mu_epsilon(eps: float, delta: float) -> None:
    mu = mu_from_epsilon_delta(eps, delta)
    back = epsilon_from_mu_delta(mu, delta)
    assert rel(back, eps) <= 1e-9
    # Safe side: what we report for this mu really holds at this mu.
    assert delta_from_mu_epsilon(mu, back) <= delta


@SETTINGS
@given(mu=st.floats(min_value=-5.0, max_value=1.5).map(lambda x: 10.0**x), delta=deltas)
def test_round_trip_mu_epsilon_mu(mu: float, delta: float) -> None:
    eps = epsilon_from_mu_delta(mu, delta)
    if eps == 0.0:
        return
    assert rel(mu_from_epsilon_delta(eps, delta), mu) <= 1e-9


@SETTINGS
@given(
    mu=st.floats(min_value=1e-6, max_value=100.0),
    n=st.integers(min_value=1, max_value=10_000),
)
def test_compose_equal_jobs(mu: float, n: int) -> None:
    total = compose([mu] * n)
    # Never below the exact sqrt(n) * mu (checked in rationals), and at most a few ulps above.
    assert Fraction(total) ** 2 >= n * Fraction(mu) ** 2
    assert total <= mu * math.sqrt(n) * (1 + 1e-15)


@SETTINGS
@given(mus=st.lists(st.floats(min_value=0.0, max_value=1e3), max_size=50))
def test_compose_is_exact_square_sum_rounded_up(mus: list[float]) -> None:
    total = compose(mus)
    square = exact_square_sum(mus)
    assert Fraction(total) ** 2 >= square
    if total > 0:
        assert Fraction(math.nextafter(total, 0.0)) ** 2 < square


def test_compose_does_not_underflow_or_overflow() -> None:
    assert compose([]) == 0.0
    assert compose([3.0, 4.0]) == 5.0
    assert compose([1e-300] * 4) == 2e-300
    assert compose([1e300, 1e300]) == pytest.approx(math.sqrt(2) * 1e300, rel=1e-15)


@SETTINGS
@given(
    mu=st.floats(min_value=1e-6, max_value=1e3),
    releases=st.integers(min_value=1, max_value=1_000_000),
)
def test_noise_multiplier_never_understates_sigma(mu: float, releases: int) -> None:
    sigma = noise_multiplier(mu, releases)
    assert Fraction(sigma) ** 2 * Fraction(mu) ** 2 >= releases  # exact
    assert math.sqrt(releases) / sigma <= mu  # as the float code would check it
    assert sigma <= math.sqrt(releases) / mu * (1 + 1e-15)


# ---------------------------------------------------------------------------------------------
# Invalid input

BAD_REALS = [0.0, -1.0, math.nan, math.inf, -math.inf, "1", None, True, 10**400]


@pytest.mark.parametrize("bad", BAD_REALS)
def test_bad_epsilon_is_rejected(bad: object) -> None:
    with pytest.raises(PrivacyParameterError) as info:
        mu_from_epsilon_delta(bad, 1e-5)  # type: ignore[arg-type]
    assert info.value.field == "epsilon"


@pytest.mark.parametrize("bad", [*BAD_REALS, 1.0, 2.0])
def test_bad_delta_is_rejected(bad: object) -> None:
    for call in (
        lambda: mu_from_epsilon_delta(1.0, bad),  # type: ignore[arg-type]
        lambda: epsilon_from_mu_delta(1.0, bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(PrivacyParameterError) as info:
            call()
        assert info.value.field == "delta"


@pytest.mark.parametrize("bad", BAD_REALS)
def test_bad_mu_is_rejected(bad: object) -> None:
    for call in (
        lambda: epsilon_from_mu_delta(bad, 1e-5),  # type: ignore[arg-type]
        lambda: delta_from_mu_epsilon(bad, 1.0),  # type: ignore[arg-type]
        lambda: noise_multiplier(bad, 4),  # type: ignore[arg-type]
    ):
        with pytest.raises(PrivacyParameterError) as info:
            call()
        assert info.value.field == "mu"


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "0.1"])
def test_bad_mu_in_composition_is_rejected(bad: object) -> None:
    with pytest.raises(PrivacyParameterError) as info:
        compose([0.1, bad])  # type: ignore[list-item]
    assert info.value.field == "mu"


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_bad_epsilon_for_delta_is_rejected(bad: float) -> None:
    with pytest.raises(PrivacyParameterError) as info:
        delta_from_mu_epsilon(1.0, bad)
    assert info.value.field == "epsilon"


@pytest.mark.parametrize("bad", [0, -3, 1.5, 2.0, True, "4", None, 10**400])
def test_bad_release_count_is_rejected(bad: object) -> None:
    with pytest.raises(PrivacyParameterError) as info:
        noise_multiplier(1.0, bad)  # type: ignore[arg-type]
    assert info.value.field == "releases"


@SETTINGS
@given(
    value=st.one_of(
        st.floats(max_value=0.0),
        st.just(math.nan),
        st.just(math.inf),
    )
)
def test_non_positive_or_non_finite_epsilon_never_converts(value: float) -> None:
    with pytest.raises(PrivacyParameterError) as info:
        mu_from_epsilon_delta(value, 1e-6)
    assert info.value.field == "epsilon"


def test_error_is_a_value_error_with_a_message() -> None:
    with pytest.raises(ValueError, match="delta must be strictly between 0 and 1"):
        mu_from_epsilon_delta(1.0, 1.0)

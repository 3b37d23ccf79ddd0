"""Budget admission arithmetic: what a data owner and an analyst can rely on.

- Asking for exactly what the budget says is left (as mu, or as epsilon at the dataset's delta)
  is admitted, and then nothing more is.
- Splitting the budget into equal parts admits exactly that many parts.
- NaN, infinities and non-positive costs are never admitted.
- Whatever sequence of jobs is admitted, their composition satisfies the owner's (epsilon,
  delta) exactly (checked in rationals and with mpmath, not with the code under test).
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from privclust.privacy.budget import (
    ADMIT_RTOL,
    CAP_MARGIN,
    DUST,
    BudgetState,
    budget_state,
    cap_from_epsilon_delta,
    epsilon_remaining,
    is_admissible,
    remaining_mu,
    used_mu_squared,
)
from privclust.privacy.gdp import (
    PrivacyParameterError,
    delta_from_mu_epsilon,
    mu_from_epsilon_delta,
)

OWNER_BUDGETS = [(1.0, 1e-5), (0.3, 1e-9), (8.0, 1e-6), (0.05, 1e-12), (2.0, 1e-300), (50.0, 0.01)]
PLAIN_CAPS = [1.0, 0.1, 3.7, 1e-5, 123.456, 2.0 / 3.0]
SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)


def exact_delta_of_total(mus: list[float], epsilon: float) -> mpmath.mpf:
    """delta(epsilon) of sqrt(sum mu_i^2)-GDP, from the exact sum of squares, at 80 digits."""
    square = sum((Fraction(m) ** 2 for m in mus), Fraction(0))
    with mpmath.workdps(80):
        mu = mpmath.sqrt(mpmath.mpf(square.numerator) / square.denominator)
        eps = mpmath.mpf(epsilon)
        root2 = mpmath.sqrt(2)
        t1 = eps / mu - mu / 2
        t2 = eps / mu + mu / 2
        return +(mpmath.erfc(t1 / root2) / 2 - mpmath.exp(eps) * mpmath.erfc(t2 / root2) / 2)


def exact_remaining_squared(mus: list[float], cap: float) -> Fraction:
    return Fraction(cap) ** 2 - sum((Fraction(m) ** 2 for m in mus), Fraction(0))


def test_constants_are_ordered_so_tolerance_never_beats_margin() -> None:
    # Admission may overshoot the stored cap by ADMIT_RTOL in squares; the stored cap sits
    # CAP_MARGIN (2*CAP_MARGIN in squares) below the exact one.
    assert ADMIT_RTOL < CAP_MARGIN / 100
    assert DUST > 100 * ADMIT_RTOL


@pytest.mark.parametrize(("epsilon", "delta"), OWNER_BUDGETS)
def test_cap_sits_just_below_the_exact_cap(epsilon: float, delta: float) -> None:
    cap = cap_from_epsilon_delta(epsilon, delta)
    exact = mu_from_epsilon_delta(epsilon, delta)
    assert cap < exact
    assert cap == pytest.approx(exact, rel=2 * CAP_MARGIN)
    assert exact_delta_of_total([cap], epsilon) < delta


def caps() -> list[float]:
    return [cap_from_epsilon_delta(e, d) for e, d in OWNER_BUDGETS] + PLAIN_CAPS


@pytest.mark.parametrize("cap", caps())
@pytest.mark.parametrize("used_fractions", [[], [1 / 3], [0.1, 0.2, 0.3], [0.5] * 3])
def test_exactly_the_remaining_mu_is_admitted_and_then_nothing(
    cap: float, used_fractions: list[float]
) -> None:
    live = [cap * f for f in used_fractions]
    left = remaining_mu(live, cap)
    assert left > 0
    assert is_admissible(live, left, cap)
    live.append(left)
    assert remaining_mu(live, cap) == 0.0
    assert not is_admissible(live, 1e-300, cap)
    assert not is_admissible(live, 5e-324, cap)


@pytest.mark.parametrize(("epsilon", "delta"), OWNER_BUDGETS)
@pytest.mark.parametrize("used_fractions", [[], [0.25], [0.6, 0.1]])
def test_exactly_the_remaining_epsilon_is_admitted_and_then_nothing(
    epsilon: float, delta: float, used_fractions: list[float]
) -> None:
    cap = cap_from_epsilon_delta(epsilon, delta)
    live = [cap * f for f in used_fractions]
    eps_left = epsilon_remaining(remaining_mu(live, cap), delta)
    assert 0 < eps_left <= epsilon
    # The analyst asks for exactly eps_left at the dataset's delta: that job's mu fits.
    mu_job = mu_from_epsilon_delta(eps_left, delta)
    assert is_admissible(live, mu_job, cap)
    live.append(mu_job)
    assert remaining_mu(live, cap) == 0.0
    assert epsilon_remaining(remaining_mu(live, cap), delta) == 0.0
    assert not is_admissible(live, 1e-300, cap)
    assert exact_delta_of_total(live, epsilon) <= delta


@pytest.mark.parametrize("cap", caps())
def test_a_hundred_tenths_are_admitted_and_the_101st_refused(cap: float) -> None:
    # 100 jobs of cap/10 compose to exactly the cap (sqrt(100) * cap/10).
    live: list[float] = []
    for _ in range(100):
        assert is_admissible(live, cap / 10, cap)
        live.append(cap / 10)
    assert remaining_mu(live, cap) == 0.0
    assert not is_admissible(live, cap / 10, cap)
    assert not is_admissible(live, 1e-300, cap)


@pytest.mark.parametrize("cap", caps())
def test_slightly_more_than_remaining_is_refused(cap: float) -> None:
    live = [cap * 0.6]
    left = remaining_mu(live, cap)
    assert not is_admissible(live, left * (1 + 1e-9), cap)
    assert is_admissible(live, left * (1 - 1e-9), cap)


BAD_COSTS = [math.nan, math.inf, -math.inf, 0.0, -0.0, -1e-300, -1.0, "0.1", None, True]


@pytest.mark.parametrize("bad", BAD_COSTS)
def test_bad_job_costs_are_never_admitted(bad: object) -> None:
    assert not is_admissible([], bad, 1.0)  # type: ignore[arg-type]
    assert not is_admissible([0.1, 0.2], bad, 1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, -0.5, "x"])
def test_corrupt_ledger_or_cap_admits_nothing(bad: object) -> None:
    assert not is_admissible([0.1, bad], 0.01, 1.0)  # type: ignore[list-item]
    assert not is_admissible([0.1], 0.01, bad)  # type: ignore[arg-type]
    assert remaining_mu([0.1, bad], 1.0) == 0.0  # type: ignore[list-item]
    assert remaining_mu([0.1], bad) == 0.0  # type: ignore[arg-type]


@SETTINGS
@given(
    live=st.lists(st.floats(min_value=0.0, max_value=2.0), max_size=20),
    job=st.floats(allow_nan=True, allow_infinity=True),
    cap=st.floats(min_value=1e-6, max_value=10.0),
)
def test_admission_never_lets_the_total_past_the_cap(
    live: list[float], job: float, cap: float
) -> None:
    admitted = is_admissible(live, job, cap)
    if not math.isfinite(job) or job <= 0:
        assert not admitted
    if admitted:
        total_sq = sum((Fraction(m) ** 2 for m in [*live, job]), Fraction(0))
        assert total_sq <= Fraction(cap) ** 2 * (1 + Fraction(ADMIT_RTOL))


@SETTINGS
@given(
    budget=st.sampled_from(OWNER_BUDGETS),
    requests=st.lists(
        st.one_of(
            st.floats(min_value=0.001, max_value=1.2).map(lambda f: ("mu", f)),
            st.floats(min_value=0.001, max_value=1.2).map(lambda f: ("eps", f)),
            st.just(("rest", 1.0)),
        ),
        min_size=1,
        max_size=25,
    ),
)
def test_any_admitted_sequence_respects_the_owners_epsilon_delta(
    budget: tuple[float, float], requests: list[tuple[str, float]]
) -> None:
    """Jobs asking for fractions of the cap, fractions of epsilon, or all that is left."""
    epsilon, delta = budget
    cap = cap_from_epsilon_delta(epsilon, delta)
    live: list[float] = []
    for kind, fraction in requests:
        if kind == "mu":
            mu_job = cap * fraction
        elif kind == "eps":
            mu_job = mu_from_epsilon_delta(epsilon * fraction, delta)
        else:
            left = remaining_mu(live, cap)
            if left == 0.0:
                continue
            mu_job = left
        if is_admissible(live, mu_job, cap):
            live.append(mu_job)
    if live:
        assert exact_delta_of_total(live, epsilon) <= delta


@SETTINGS
@given(
    live=st.lists(st.floats(min_value=0.0, max_value=1.0), max_size=30),
    cap=st.floats(min_value=1e-8, max_value=50.0),
)
def test_remaining_is_rounded_down_and_dust_is_zero(live: list[float], cap: float) -> None:
    left = remaining_mu(live, cap)
    exact_sq = exact_remaining_squared(live, cap)
    if exact_sq <= Fraction(DUST) * Fraction(cap) ** 2:
        assert left == 0.0
    else:
        assert Fraction(left) ** 2 <= exact_sq
        assert Fraction(math.nextafter(left, math.inf)) ** 2 > exact_sq


def test_dust_threshold() -> None:
    cap = 1.0
    just_dust = math.sqrt(1 - DUST)  # leaves (at most) DUST * cap^2
    assert remaining_mu([just_dust * (1 + 1e-15)], cap) == 0.0
    assert remaining_mu([math.sqrt(1 - 4 * DUST)], cap) > 0.0
    assert not is_admissible([just_dust * (1 + 1e-15)], 1e-10, cap)


@SETTINGS
@given(
    mu_left=st.floats(min_value=-6.0, max_value=1.5).map(lambda x: 10.0**x),
    delta=st.floats(min_value=-300.0, max_value=-2.0).map(lambda x: 10.0**x),
)
def test_epsilon_remaining_maps_back_within_mu_remaining(mu_left: float, delta: float) -> None:
    eps = epsilon_remaining(mu_left, delta)
    if delta_from_mu_epsilon(mu_left, 0.0) <= delta:
        # So little is left that it already gives (0, delta)-DP: no positive epsilon maps to a
        # mu this small, and the budget says so.
        assert eps == 0.0
        return
    assert eps > 0
    mu_back = mu_from_epsilon_delta(eps, delta)
    assert mu_back <= mu_left
    # And it gives away no more than a sliver: the job would use the whole remainder but dust.
    assert mu_back >= mu_left * (1 - DUST / 4)


def test_epsilon_remaining_of_nothing_is_zero() -> None:
    assert epsilon_remaining(0.0, 1e-6) == 0.0
    with pytest.raises(PrivacyParameterError):
        epsilon_remaining(math.nan, 1e-6)
    with pytest.raises(PrivacyParameterError):
        epsilon_remaining(0.5, 0.0)


def test_used_mu_squared_is_the_float_sum_of_squares() -> None:
    assert used_mu_squared([]) == 0.0
    assert used_mu_squared([3.0, 4.0]) == 25.0
    assert used_mu_squared([0.1] * 10) == pytest.approx(0.1, rel=1e-15)


def test_budget_state_reports_what_the_api_shows() -> None:
    epsilon, delta = 1.0, 1e-5
    cap = cap_from_epsilon_delta(epsilon, delta)
    spent = [cap * 0.3, cap * 0.4]
    reserved = [cap * 0.2]
    state = budget_state(spent, reserved, cap, delta)
    assert isinstance(state, BudgetState)
    assert state.mu_cap == cap
    assert state.mu_spent == pytest.approx(cap * 0.5, rel=1e-15)
    assert state.mu_reserved == pytest.approx(cap * 0.2, rel=1e-15)
    assert state.mu_remaining == pytest.approx(cap * math.sqrt(1 - 0.25 - 0.04), rel=1e-14)
    assert state.mu_remaining**2 + state.mu_spent**2 + state.mu_reserved**2 == pytest.approx(
        cap**2, rel=1e-14
    )
    assert 0 < state.epsilon_remaining < epsilon
    assert mu_from_epsilon_delta(state.epsilon_remaining, delta) <= state.mu_remaining
    with pytest.raises(AttributeError):
        state.mu_cap = 2.0  # type: ignore[misc]
    empty = budget_state([], [], cap, delta)
    assert empty.mu_spent == empty.mu_reserved == 0.0
    assert empty.mu_remaining == pytest.approx(cap, rel=1e-15)
    assert empty.epsilon_remaining == pytest.approx(epsilon, rel=1e-8)


@pytest.mark.parametrize("delta", [1e-12, 1e-6, 0.1])
def test_epsilon_remaining_reaches_the_top_of_the_float_range(delta: float) -> None:
    """A cap set from the largest float epsilon, or one stored beyond what any float epsilon
    maps to, still has an epsilon_remaining, and a job asking for it is admissible."""
    top = math.nextafter(math.inf, 0.0)
    for mu in (cap_from_epsilon_delta(top, delta), 1e200, 1e300):
        eps = epsilon_remaining(mu, delta)
        assert 0.0 < eps <= top
        assert mu_from_epsilon_delta(eps, delta) <= mu
        state = budget_state([], [], mu, delta)
        assert state.epsilon_remaining == eps

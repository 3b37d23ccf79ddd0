"""Admission arithmetic of a dataset's privacy budget: cap, remaining budget, admit or refuse.

The ledger keeps, per dataset, the mus of its live jobs (spent and reserved) and a cap mu_cap;
jobs compose as sqrt(sum mu_i^2). Every floating-point decision of that bookkeeping lives here
so it can be tested in isolation. Sums of squares are formed exactly (rationals), so the only
tolerances are the three documented constants. Each decision comes in two forms that agree
exactly: from the list of mus (`is_admissible`, `budget_state`, ...) and from their exact sum
of squares kept as a running total (`is_admissible_sq`, `budget_state_from_squares`, ...); a
float's square is a dyadic rational, so such a total is exact however many terms it has, and
subtracting a term again leaves no drift.

- CAP_MARGIN: the stored cap is the exact cap of the owner's (epsilon, delta) shrunk by this
  relative amount, so the admission tolerance below can never carry the true total past it.
- ADMIT_RTOL: a request is admitted when used^2 + mu_job^2 <= cap^2 * (1 + ADMIT_RTOL). It lets a
  request for exactly the advertised remainder through despite rounding in how that request
  was derived, and is far smaller than CAP_MARGIN (2 * CAP_MARGIN in squared terms), so every
  admitted total stays below the owner's exact cap.
- DUST: a remainder with remaining^2 <= DUST * cap^2 is reported as 0.0 and admits nothing.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from privclust.privacy.gdp import (
    PrivacyParameterError,
    compose,
    compose_squares,
    epsilon_from_mu_delta,
    exact_square_sum,
    mu_from_epsilon_delta,
)

__all__ = [
    "ADMIT_RTOL",
    "CAP_MARGIN",
    "DUST",
    "BudgetState",
    "budget_state",
    "budget_state_from_squares",
    "cap_from_epsilon_delta",
    "epsilon_remaining",
    "exact_square",
    "is_admissible",
    "is_admissible_sq",
    "remaining_mu",
    "remaining_mu_sq",
    "used_mu_squared",
]

CAP_MARGIN = 1e-9
DUST = 1e-9
ADMIT_RTOL = 1e-12

_DUST = Fraction(DUST)
_ADMIT_FACTOR = 1 + Fraction(ADMIT_RTOL)
_MAX_EPSILON_STEPS = 200


def cap_from_epsilon_delta(epsilon: float, delta: float) -> float:
    """mu_cap to store for an owner's total (epsilon, delta): safely below the exact cap."""
    return mu_from_epsilon_delta(epsilon, delta) * (1.0 - CAP_MARGIN)


def used_mu_squared(mus: Iterable[float]) -> float:
    """sum of mu_i^2 over the live jobs, as a float (for display; admission is exact)."""
    return math.fsum(float(m) * float(m) for m in mus)


def _finite_nonnegative(value: object) -> float | None:
    """The value as a float when it is a finite real >= 0, else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        result = float(value)
    except (OverflowError, ValueError):
        return None
    if not math.isfinite(result) or result < 0.0:
        return None
    return result


def _ledger(mus: Iterable[float], mu_cap: float) -> tuple[Fraction, Fraction] | None:
    """(used^2, cap^2) exactly, or None when any input is not a finite non-negative number."""
    cap = _finite_nonnegative(mu_cap)
    if cap is None:
        return None
    values = []
    for m in mus:
        value = _finite_nonnegative(m)
        if value is None:
            return None
        values.append(value)
    return exact_square_sum(values), exact_square_sum([cap])


def _remaining_squared(used_sq: Fraction, cap_sq: Fraction) -> Fraction:
    """cap^2 - used^2, or 0 when that is dust (or negative)."""
    left = cap_sq - used_sq
    if left <= _DUST * cap_sq:
        return Fraction(0)
    return left


def _sqrt_down(square: Fraction) -> float:
    """The largest float whose square does not exceed `square` (a positive rational)."""
    half_exponent = (square.numerator.bit_length() - square.denominator.bit_length()) // 2
    scaled = square * Fraction(2) ** (-2 * half_exponent)
    root = math.ldexp(math.sqrt(float(scaled)), half_exponent)
    while root > 0.0 and Fraction(root) ** 2 > square:
        root = math.nextafter(root, 0.0)
    return root


def _running(used_sq: object, mu_cap: float) -> tuple[Fraction, Fraction] | None:
    """(used^2, cap^2) from a running sum of squares, or None when the sum is not a rational
    >= 0 or the cap not a finite number >= 0."""
    cap = _finite_nonnegative(mu_cap)
    if cap is None or isinstance(used_sq, bool) or not isinstance(used_sq, numbers.Rational):
        return None
    if used_sq < 0:
        return None
    return Fraction(used_sq), exact_square_sum([cap])


def exact_square(mu: float) -> Fraction:
    """mu^2 exactly, the term a release adds to a running sum of squares.

    PrivacyParameterError for anything but a finite real >= 0: NaN, an infinity or a negative
    mu never enters a running total (the list-based functions refuse them at every read).
    """
    value = _finite_nonnegative(mu)
    if value is None:
        raise PrivacyParameterError(f"mu must be finite and >= 0, got {mu!r}", field="mu")
    return exact_square_sum([value])


def _remaining(exact: tuple[Fraction, Fraction] | None) -> float:
    if exact is None:
        return 0.0
    left = _remaining_squared(*exact)
    return 0.0 if left == 0 else _sqrt_down(left)


def remaining_mu(mus: Iterable[float], mu_cap: float) -> float:
    """sqrt(cap^2 - sum mu_i^2), rounded down; exactly 0.0 once only dust is left.

    Also 0.0 if a mu or the cap is negative or not finite: a corrupt ledger leaves nothing to
    spend, in step with `is_admissible`, which refuses everything then.
    """
    return _remaining(_ledger(mus, mu_cap))


def remaining_mu_sq(used_sq: Fraction, mu_cap: float) -> float:
    """`remaining_mu` from the exact sum of squares of the live mus (0.0 if that is not a
    rational >= 0, or the cap not a finite number >= 0)."""
    return _remaining(_running(used_sq, mu_cap))


def _admissible(exact: tuple[Fraction, Fraction] | None, mu_job: float) -> bool:
    job = _finite_nonnegative(mu_job)
    if job is None or job == 0.0 or exact is None:
        return False
    used_sq, cap_sq = exact
    if _remaining_squared(used_sq, cap_sq) == 0:
        return False
    return used_sq + exact_square_sum([job]) <= cap_sq * _ADMIT_FACTOR


def is_admissible(mus: Iterable[float], mu_job: float, mu_cap: float) -> bool:
    """Whether a job costing mu_job fits next to the live jobs `mus` under mu_cap.

    False for a non-finite or non-positive mu_job, for any non-finite or negative ledger value,
    and once the remainder is dust; otherwise used^2 + mu_job^2 <= cap^2 * (1 + ADMIT_RTOL),
    evaluated exactly.
    """
    return _admissible(_ledger(mus, mu_cap), mu_job)


def is_admissible_sq(used_sq: Fraction, mu_job: float, mu_cap: float) -> bool:
    """`is_admissible` from the exact sum of squares of the live mus: the same answer for
    the same ledger, and False when `used_sq` is not a rational >= 0."""
    return _admissible(_running(used_sq, mu_cap), mu_job)


def epsilon_remaining(mu_remaining: float, delta: float) -> float:
    """The epsilon at the dataset's delta that mu_remaining still allows.

    Rounded so that a job asking for exactly this epsilon at this delta is admissible:
    mu_from_epsilon_delta(result, delta) <= mu_remaining; the largest float when the exact
    answer lies beyond it. 0.0 when mu_remaining is 0, and also
    when mu_remaining-GDP already gives (0, delta)-DP (only for delta >= 2*Phi(mu/2) - 1, far
    above any sensible dataset delta), since no positive epsilon then maps to a smaller mu.
    """
    remaining = _finite_nonnegative(mu_remaining)
    if remaining is None:
        raise PrivacyParameterError(
            f"mu_remaining must be finite and >= 0, got {mu_remaining!r}", field="mu"
        )
    if remaining == 0.0:
        return 0.0
    try:
        epsilon = epsilon_from_mu_delta(remaining, delta)
    except PrivacyParameterError:
        # The exact answer is beyond the largest float. That float is then a valid answer
        # (a job asking for it fits), as long as its mu really is within mu_remaining.
        if mu_from_epsilon_delta(sys.float_info.max, delta) <= remaining:
            return sys.float_info.max
        raise
    if epsilon == 0.0:
        return 0.0
    # epsilon_from_mu_delta rounds up, so its answer can map back to a hair more than
    # mu_remaining. Shrink by 1, 2, 4, ... units of 2^-52 until it does not.
    shrink = 2.0**-52
    for _ in range(_MAX_EPSILON_STEPS):
        if mu_from_epsilon_delta(epsilon, delta) <= remaining:
            return epsilon
        epsilon *= 1.0 - shrink
        shrink = min(2.0 * shrink, 0.5)
    raise ArithmeticError("could not round epsilon_remaining down")


@dataclass(frozen=True)
class BudgetState:
    """A dataset's budget as reported to clients. mu_remaining = sqrt(cap^2 - all live mu^2)."""

    mu_cap: float
    mu_spent: float
    mu_reserved: float
    mu_remaining: float
    epsilon_remaining: float


def budget_state(
    spent_mus: Iterable[float], reserved_mus: Iterable[float], mu_cap: float, delta: float
) -> BudgetState:
    """The budget from the mus of finished/running jobs (spent) and queued jobs (reserved)."""
    spent = list(spent_mus)
    reserved = list(reserved_mus)
    remaining = remaining_mu(spent + reserved, mu_cap)
    return BudgetState(
        mu_cap=float(mu_cap),
        mu_spent=compose(spent),
        mu_reserved=compose(reserved),
        mu_remaining=remaining,
        epsilon_remaining=epsilon_remaining(remaining, delta),
    )


def budget_state_from_squares(
    spent_sq: Fraction, reserved_sq: Fraction, mu_cap: float, delta: float
) -> BudgetState:
    """`budget_state` from the exact sums of squares of the spent and the reserved mus: the
    same floats as `budget_state` gives for mus with those sums."""
    for square in (spent_sq, reserved_sq):
        if isinstance(square, bool) or not isinstance(square, numbers.Rational) or square < 0:
            raise PrivacyParameterError(
                f"a sum of squares must be a rational >= 0, got {square!r}", field="mu"
            )
    remaining = remaining_mu_sq(Fraction(spent_sq) + Fraction(reserved_sq), mu_cap)
    return BudgetState(
        mu_cap=float(mu_cap),
        mu_spent=compose_squares(Fraction(spent_sq)),
        mu_reserved=compose_squares(Fraction(reserved_sq)),
        mu_remaining=remaining,
        epsilon_remaining=epsilon_remaining(remaining, delta),
    )

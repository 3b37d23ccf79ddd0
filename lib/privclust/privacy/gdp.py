"""Gaussian differential privacy: exact mu <-> (epsilon, delta) conversion, composition, noise.

A mechanism is mu-GDP exactly when it is (epsilon, delta(epsilon))-DP for every epsilon >= 0 with
the Dong-Roth-Su curve (privclust.privacy.delta_curve evaluates it)

    delta(epsilon; mu) = Phi(-epsilon/mu + mu/2) - exp(epsilon) * Phi(-epsilon/mu - mu/2).

Every function here rounds in the direction that can only overstate the privacy cost: a delta or
an epsilon is never below the exact value, a mu is never above it, a composed mu is never below
it and a noise standard deviation never below it. Pure functions, no I/O.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Callable, Iterable
from fractions import Fraction

import numpy as np
from scipy.special import ndtri

from privclust.privacy.delta_curve import delta_upper, log_delta_upper

__all__ = [
    "PrivacyParameterError",
    "compose",
    "compose_squares",
    "delta_from_mu_epsilon",
    "epsilon_from_mu_delta",
    "equal_share",
    "exact_square_sum",
    "mu_from_epsilon_delta",
    "noise_multiplier",
    "remaining_after",
]


class PrivacyParameterError(ValueError):
    """A privacy parameter outside its domain; `field` names it ("epsilon", "delta", "mu", ...)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


_MAX_EXPANSIONS = 4200  # doublings/halvings that cover the whole float range


# --------------------------------------------------------------------------------------------
# Validation


def _real(value: object, field: str) -> float:
    """The value as a finite float, or PrivacyParameterError naming `field`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PrivacyParameterError(
            f"{field} must be a number, got {type(value).__name__}", field=field
        )
    try:
        result = float(value)
    except (OverflowError, ValueError) as exc:
        raise PrivacyParameterError(f"{field} is out of range: {value!r}", field=field) from exc
    if not math.isfinite(result):
        raise PrivacyParameterError(f"{field} must be finite, got {result!r}", field=field)
    return result


def _positive(value: object, field: str) -> float:
    result = _real(value, field)
    if result <= 0.0:
        raise PrivacyParameterError(f"{field} must be greater than 0, got {result!r}", field=field)
    return result


def _probability(value: object, field: str = "delta") -> float:
    result = _real(value, field)
    if not 0.0 < result < 1.0:
        raise PrivacyParameterError(
            f"{field} must be strictly between 0 and 1, got {result!r}", field=field
        )
    return result


# --------------------------------------------------------------------------------------------
# The delta curve


def delta_from_mu_epsilon(mu: float, epsilon: float) -> float:
    """The delta of a mu-GDP mechanism at this epsilon, never below the exact value.

    epsilon = 0 is accepted here (delta(0; mu) = 2*Phi(mu/2) - 1) because
    `epsilon_from_mu_delta` can return 0.
    """
    mu_f = _positive(mu, "mu")
    eps_f = _real(epsilon, "epsilon")
    if eps_f < 0.0:
        raise PrivacyParameterError(f"epsilon must not be negative, got {eps_f!r}", field="epsilon")
    return delta_upper(mu_f, eps_f)


# --------------------------------------------------------------------------------------------
# Inverses


def _bracket(
    f: Callable[[float], float], start: float, *, increasing: bool, field: str
) -> tuple[float, float]:
    """Points lo < hi, a factor 2 apart, between which the monotone f changes sign.

    Found by halving or doubling from `start` (> 0); a factor-2 bracket lets brentq finish in a
    few dozen evaluations wherever in the float range the root lies.
    """
    positive_at_start = f(start) > 0.0
    # An increasing f that is positive has its root below; a decreasing one, above.
    step = 0.5 if positive_at_start == increasing else 2.0
    near = start
    for _ in range(_MAX_EXPANSIONS):
        far = near * step
        if math.isinf(far) and near < sys.float_info.max:
            # Doubling overshot the float range: the largest float is the last point to try,
            # so answers between it and the last doubling are still found.
            far = sys.float_info.max
        if far == 0.0 or math.isinf(far):
            # The answer lies beyond the float range (absurdly small or large inputs).
            raise PrivacyParameterError(
                f"{field} is outside the range this conversion can represent", field=field
            )
        if (f(far) > 0.0) != positive_at_start:
            return (far, near) if far < near else (near, far)
        near = far
    raise ArithmeticError("no bracket for a privacy parameter")


def _solve(f: Callable[[float], float], lo: float, hi: float) -> float:
    """A root of f in [lo, hi] (f(lo) and f(hi) of opposite signs) to about 1e-15 relative."""
    # A few subnormal steps at least: brentq halves xtol, and half the smallest float is 0.
    xtol = max(lo * 2.0**-60, 4.0 * 5e-324)
    # Imported here: scipy.optimize costs about 0.6 s of every process start (the API's, a
    # worker's, the CLI's), and only a conversion that solves for a parameter needs it.
    from scipy.optimize import brentq

    return float(brentq(f, lo, hi, xtol=xtol, rtol=4.0 * np.finfo(float).eps, maxiter=200))


def _step_until(value: float, ok: Callable[[float], bool], direction: float) -> float:
    """Move value by 1, 2, 4, ... ulps towards `direction` until ok(value) holds."""
    ulps = 1.0
    for _ in range(_MAX_EXPANSIONS):
        if math.isinf(value) or ok(value):
            return value
        if value == 0.0 and direction <= 0.0:
            break
        moved = value + math.copysign(ulps * math.ulp(value), direction - value)
        value = moved if moved != value else math.nextafter(value, direction)
        ulps *= 2.0
    raise ArithmeticError("could not round a privacy parameter in the safe direction")


def mu_from_epsilon_delta(epsilon: float, delta: float) -> float:
    """The largest mu whose mu-GDP guarantee implies (epsilon, delta)-DP; never above exact."""
    eps = _positive(epsilon, "epsilon")
    dlt = _probability(delta)
    log_target = math.log(dlt)

    def excess(mu: float) -> float:
        return log_delta_upper(mu, eps) - log_target

    # Start where t1 = epsilon/mu - mu/2 equals the normal quantile of delta: the solution of
    # mu^2/2 + z*mu - epsilon = 0. It is within a small factor of the answer.
    z = -float(ndtri(dlt))
    root = math.hypot(z, math.sqrt(2.0) * math.sqrt(eps))  # sqrt(z^2 + 2 eps), no overflow
    # Two forms of the same root, each free of cancellation on its side of z = 0.
    guess = eps / (0.5 * (z + root)) if z > 0.0 else root - z
    guess = max(guess, 5e-324)
    lo, hi = _bracket(excess, guess, increasing=True, field="epsilon")
    mu = _solve(excess, lo, hi)
    # The root may sit a rounding error above the safe side; step down until the rounded-up
    # delta at this mu is within the request.
    return _step_until(mu, lambda m: delta_upper(m, eps) <= dlt, 0.0)


def epsilon_from_mu_delta(mu: float, delta: float) -> float:
    """The smallest epsilon at which mu-GDP gives (epsilon, delta)-DP; never below exact.

    0.0 when mu-GDP already gives (0, delta)-DP, i.e. delta >= 2*Phi(mu/2) - 1.
    """
    mu_f = _positive(mu, "mu")
    dlt = _probability(delta)
    log_target = math.log(dlt)

    def excess(eps: float) -> float:
        return log_delta_upper(mu_f, eps) - log_target

    if excess(0.0) <= 0.0:
        return 0.0
    # At the answer t1 is near the normal quantile z of delta: epsilon ~ mu*z + mu^2/2.
    z = -float(ndtri(dlt))
    guess = mu_f * z + 0.5 * mu_f * mu_f
    if not guess > 0.0:
        guess = mu_f * mu_f
    guess = min(max(guess, 5e-324), 1e308)
    lo, hi = _bracket(excess, guess, increasing=False, field="mu")
    eps = _solve(excess, lo, hi)
    return _step_until(eps, lambda e: delta_upper(mu_f, e) <= dlt, math.inf)


# --------------------------------------------------------------------------------------------
# Composition and calibration


def exact_square_sum(values: Iterable[float]) -> Fraction:
    """The exact rational sum of the squares of finite floats (no rounding at all)."""
    parts: list[tuple[int, int]] = []
    top = 0
    for value in values:
        numerator, denominator = float(value).as_integer_ratio()
        shift = denominator.bit_length() - 1  # a float's denominator is a power of two
        parts.append((numerator, shift))
        top = max(top, shift)
    total = sum(n * n << (2 * (top - k)) for n, k in parts)
    return Fraction(total, 1 << (2 * top))


def _sqrt_up(square: Fraction) -> float:
    """The smallest float whose square is at least `square` (a positive rational)."""
    # Scale by an even power of two so the float conversion neither overflows nor underflows.
    half_exponent = (square.numerator.bit_length() - square.denominator.bit_length()) // 2
    scaled = square * Fraction(2) ** (-2 * half_exponent)
    try:
        root = math.ldexp(math.sqrt(float(scaled)), half_exponent)
    except OverflowError as exc:
        raise PrivacyParameterError("mu is too large to compose", field="mu") from exc
    return _step_until(root, lambda r: Fraction(r) ** 2 >= square, math.inf)


def compose(mus: Iterable[float]) -> float:
    """mu of the composition of mu_i-GDP mechanisms: sqrt(sum mu_i^2), never understated."""
    values = [_real(m, "mu") for m in mus]
    for value in values:
        if value < 0.0:
            raise PrivacyParameterError(f"mu must not be negative, got {value!r}", field="mu")
    return compose_squares(exact_square_sum(values))


def compose_squares(square: Fraction) -> float:
    """mu of a composition given its exact sum of squares sum mu_i^2 (a rational >= 0), never
    understated: the same float `compose` gives for mus with that sum of squares."""
    if square < 0:
        raise PrivacyParameterError("a sum of squares cannot be negative", field="mu")
    if square == 0:
        return 0.0
    result = _sqrt_up(square)
    if math.isinf(result):
        raise PrivacyParameterError("mu is too large to compose", field="mu")
    return result


def remaining_after(total: float, part: float) -> float:
    """The largest mu with sqrt(mu^2 + part^2) <= total, exactly: what a mu-GDP total leaves
    after a part of it was spent (composition solved for the rest, rounded down)."""
    total_f, part_f = _positive(total, "mu"), _real(part, "mu")
    if not 0.0 <= part_f < total_f:
        raise PrivacyParameterError(
            f"the part ({part_f!r}) must be >= 0 and below the total ({total_f!r})", field="mu"
        )
    left = exact_square_sum([total_f]) - exact_square_sum([part_f])
    try:
        root = math.sqrt(float(left))
    except OverflowError:  # a total above about 1.3e154: its square is no float; scale exactly
        root = math.sqrt(float(left / 2**1100)) * 2.0**550
    return _step_until(root, lambda r: Fraction(r) ** 2 <= left, 0.0)


def equal_share(total: float, parts: int) -> float:
    """The largest mu with sqrt(parts * mu^2) <= total, exactly: `parts` equal mechanisms that
    compose to at most `total` (total / sqrt(parts), rounded down)."""
    total_f = _positive(total, "mu")
    if isinstance(parts, bool) or not isinstance(parts, numbers.Integral) or int(parts) < 1:
        raise PrivacyParameterError(f"parts must be an integer >= 1, got {parts!r}", field="mu")
    count = int(parts)
    limit = exact_square_sum([total_f])
    share = total_f / math.sqrt(count)
    return _step_until(share, lambda m: count * Fraction(m) ** 2 <= limit, 0.0)


def noise_multiplier(mu: float, releases: int) -> float:
    """sigma such that `releases` sensitivity-1 Gaussian releases with std sigma are mu-GDP.

    sigma = sqrt(releases)/mu rounded up: both sigma^2 * mu^2 >= releases exactly and the float
    expression sqrt(releases)/sigma <= mu hold for the returned value.
    """
    mu_f = _positive(mu, "mu")
    if isinstance(releases, bool) or not isinstance(releases, numbers.Integral):
        raise PrivacyParameterError(
            f"releases must be an integer, got {type(releases).__name__}", field="releases"
        )
    count = int(releases)
    if count < 1:
        raise PrivacyParameterError(f"releases must be at least 1, got {count}", field="releases")
    try:
        root = math.sqrt(count)
    except OverflowError as exc:
        raise PrivacyParameterError("releases is too large", field="releases") from exc
    mu_exact = Fraction(mu_f)

    def calibrated(sigma: float) -> bool:
        return Fraction(sigma) ** 2 * mu_exact**2 >= count and root / sigma <= mu_f

    sigma = _step_until(root / mu_f, calibrated, math.inf)
    if math.isinf(sigma):
        raise PrivacyParameterError("mu is too small: the noise would be infinite", field="mu")
    return sigma

"""Gaussian differential privacy: exact mu <-> (epsilon, delta) conversion, composition, noise.

A mechanism is mu-GDP exactly when it is (epsilon, delta(epsilon))-DP for every epsilon >= 0 with
the Dong-Roth-Su curve

    delta(epsilon; mu) = Phi(-epsilon/mu + mu/2) - exp(epsilon) * Phi(-epsilon/mu - mu/2).

Every function here rounds in the direction that can only overstate the privacy cost: a delta or
an epsilon is never below the exact value, a mu is never above it, a composed mu is never below
it and a noise standard deviation never below it. Pure functions, no I/O.

How delta is evaluated. Write t1 = epsilon/mu - mu/2, t2 = t1 + mu and let R(t) = Phi(-t)/phi(t)
be the Mills ratio. Because exp(epsilon) * phi(t2) = phi(t1) exactly,

    delta = phi(t1) * (R(t1) - R(t2)),

so the two huge, nearly equal logarithms of the textbook formula are never subtracted and
exp(epsilon) is never formed. R(t1) - R(t2) = int_0^inf exp(-t1*s - s^2/2) (1 - exp(-mu*s)) ds
still cancels when mu is small, so it is computed in one of three ways:
- t1 >= 2 and mu <= 2*t1: Gauss-Laguerre quadrature of that integral, whose integrand is
  positive (relative error about 1e-15, measured against mpmath);
- t1 < 2 and mu <= 1/2: the Taylor series in mu, whose first term dominates;
- otherwise the direct difference of scaled complementary error functions, which then loses
  at most a couple of digits.
Each evaluation carries a first-order bound on its own rounding error, deliberately generous,
and returns the computed value plus that bound: an upper bound on the exact delta that is
within a few parts in 1e11 of it over the supported range.
"""

from __future__ import annotations

import math
import numbers
import sys
from collections.abc import Callable, Iterable
from fractions import Fraction

import numpy as np
from scipy.optimize import brentq
from scipy.special import erfcx, ndtr, ndtri, roots_laguerre

__all__ = [
    "PrivacyParameterError",
    "compose",
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


# Unit roundoff of binary64.
_U = 2.0**-53
# Multiplier on every first-order rounding-error estimate below. Against mpmath, over ~15,000
# random (mu, epsilon) pairs spanning mu in [1e-300, 300] and epsilon in [0, 2e5], the true error
# never exceeded half of the unmultiplied estimate, so 16 leaves a 30-fold margin. The price is
# an overstatement of delta by ~1e-11 relative at most in the supported range.
_SAFETY = 16.0

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_HALF = math.sqrt(0.5)
_SQRT_HALF_PI = math.sqrt(0.5 * math.pi)
_LOG_HALF = math.log(0.5)
_ERFCX_SLOPE = math.sqrt(2.0 / math.pi)  # bound on |d/dt erfcx(t/sqrt2)| for t >= 0

# 40-point Gauss-Laguerre rule. It reproduces R(t1) - R(t1 + mu) to ~1e-15 relative for
# t1 >= 2 and mu <= 2*t1 (measured against mpmath); outside that region the direct formula is
# used, and there the cancellation is mild.
_GL_NODES, _GL_WEIGHTS = roots_laguerre(40)
_GL_ERROR = 64.0  # the rule's relative error (about 5 ulps measured), in units of _U
# Below t1 = 2 and for mu up to 1/2 a Taylor series in mu takes over (relative error at most
# ~56 units of _U measured, worst near t1 = 2 where M_1 = 1 - t1*R(t1) cancels a little).
_SERIES_MAX_MU = 0.5
_SERIES_MAX_TERMS = 80
_SERIES_ERROR = 128.0
# Relative errors of the special functions in units of _U: twice the worst seen against mpmath
# over their ranges used here (erfcx on [0, 30]: 7.3; ndtr: 1.5).
_ERFCX_ERROR = 16.0
_NDTR_ERROR = 4.0
_EXP_ERROR = 2.0
_GL_MIN_T1 = 2.0
_GL_MAX_MU_OVER_T1 = 2.0

# Beyond these t1 the answer is decided long before floats run out: for t1 < -40, delta is
# 1 - O(exp(-800)), which is 1.0 in binary64; for t1 > 1e150 it is below exp(-1e299).
_T1_SATURATED = -40.0
_T1_VANISHING = 1e150

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


def _sum_error(log_value: float) -> float:
    """Rounding error of a short sum of logarithms that came out at `log_value`."""
    return 8.0 * _U * (abs(log_value) + 1.0)


def _mills_difference_over_mu(t1: float, mu: float) -> float:
    """(R(t1) - R(t1 + mu)) / mu by its Taylor series, for -1/4 <= t1 < 2 and mu <= 1/2."""
    m_prev = _SQRT_HALF_PI * float(erfcx(t1 * _SQRT_HALF))  # M_0 = R(t1)
    m = 1.0 - t1 * m_prev  # M_1
    total = m
    scale = 1.0  # mu^(n-1) / n!
    for n in range(1, _SERIES_MAX_TERMS):
        m_prev, m = m, n * m_prev - t1 * m
        scale *= mu / (n + 1)
        term = scale * m
        total += -term if n % 2 else term
        if term <= 2.0**-60 * total:
            break
    return total


def _log_delta_upper(mu: float, epsilon: float) -> float:
    """log of an upper bound on delta(epsilon; mu), for finite mu > 0 and epsilon >= 0.

    The bound exceeds the exact value by at most a relative ~1e-12 in the region that matters
    (delta >= 1e-300), so it doubles as an accurate evaluation.
    """
    ratio = epsilon / mu
    half_mu = 0.5 * mu
    t1 = ratio - half_mu
    if t1 > _T1_VANISHING:
        return -math.inf
    if t1 < _T1_SATURATED:
        return 0.0
    t2 = ratio + half_mu
    # t1 and t2 carry an absolute rounding error of at most ~2u*t2 each. Through the Gaussian
    # factor that moves log delta by t1*2u*t2 <= 2u*t2^2, through the Mills ratios (whose
    # logarithmic slope stays below 2 wherever they are used) by 4u*t2.
    argument_error = _U * (1.0 + 2.0 * t2 * t2 + 4.0 * t2)
    if math.isinf(argument_error):
        return 0.0  # mu beyond ~1e154: no error estimate survives, and delta <= 1 always holds

    if t1 >= _GL_MIN_T1 and mu <= _GL_MAX_MU_OVER_T1 * t1:
        # R(t1) - R(t2) = (mu/t1) * sum_i w_i * exp(-s_i^2/2) * s_i * g(mu*s_i),
        # s_i = x_i/t1, g(z) = (1 - exp(-z))/z: every term positive, mu factored out so a tiny
        # mu cannot underflow.
        s = _GL_NODES / t1
        z = mu * s
        tiny = z < 1e-8
        g = np.where(tiny, 1.0 - 0.5 * z, -np.expm1(-z) / np.where(tiny, 1.0, z))
        total = float(np.dot(_GL_WEIGHTS, np.exp(-0.5 * s * s) * s * g))
        log_delta = -0.5 * t1 * t1 - _LOG_SQRT_2PI + math.log(mu) - math.log(t1) + math.log(total)
        return log_delta + _SAFETY * (_GL_ERROR * _U + argument_error + _sum_error(log_delta))

    if t1 < _GL_MIN_T1 and mu <= _SERIES_MAX_MU:
        # Small mu, moderate t1 (here t1 >= -mu/2 >= -1/4 since epsilon >= 0): the Taylor
        # series of R about t1, R(t1) - R(t1 + mu) = sum_n>=1 (-1)^(n+1) M_n mu^n / n!, where
        # M_n = int_0^inf s^n exp(-t1*s - s^2/2) ds = (-1)^n R^(n)(t1) > 0 obeys
        # M_(n+1) = n M_(n-1) - t1 M_n. The terms shrink fast and the first one dominates, so
        # the alternating sum loses almost nothing; mu is factored out against underflow.
        series = _mills_difference_over_mu(t1, mu)
        log_delta = -0.5 * t1 * t1 - _LOG_SQRT_2PI + math.log(mu) + math.log(series)
        return log_delta + _SAFETY * (_SERIES_ERROR * _U + argument_error + _sum_error(log_delta))

    # Direct form; the error bound is computed in the same units as the difference.
    e2 = float(erfcx(t2 * _SQRT_HALF))
    if t1 >= 0.0:
        # delta = exp(-t1^2/2)/2 * (erfcx(t1/sqrt2) - erfcx(t2/sqrt2)); phi(t1) is
        # 2/sqrt(2 pi) of the prefactor.
        e1 = float(erfcx(t1 * _SQRT_HALF))
        diff = e1 - e2
        # Each erfcx is good to a few ulps, and moves by at most sqrt(2/pi) per unit of t
        # when its argument is off by the ~2u*t2 of t1 or t2.
        error = _ERFCX_ERROR * _U * (e1 + e2) + 2.0 * _ERFCX_SLOPE * (2.0 * _U * t2)
        log_scale = -0.5 * t1 * t1 + _LOG_HALF
        # The prefactor's error is an absolute error of its logarithm: add it there.
        log_scale_bound = log_scale + _SAFETY * (argument_error + _sum_error(log_scale))
        return min(0.0, log_scale_bound + math.log(diff + _SAFETY * error))
    # t1 < 0: Phi(-t1) >= 1/2 is safe to take directly, and the second term
    # exp(epsilon)*Phi(-t2) = exp(-t1^2/2)/2 * erfcx(t2/sqrt2) never overflows.
    a = float(ndtr(-t1))
    b = 0.5 * math.exp(-0.5 * t1 * t1) * e2
    diff = a - b
    phi_t1 = _INV_SQRT_2PI * math.exp(-0.5 * t1 * t1)
    # Phi(-t1) and exp(-t1^2/2)*erfcx(t2/sqrt2)/2 both move by about phi(t1) per unit of t1 or
    # t2, which are off by ~2u*t2. The Gaussian factor of b is off by a factor of at most
    # exp(+-argument_error); that part is taken without linearising, as it may be large.
    error = (
        _NDTR_ERROR * _U * a + (_ERFCX_ERROR + _EXP_ERROR) * _U * b + 2.0 * phi_t1 * (2.0 * _U * t2)
    )
    gaussian_error = b * math.expm1(min(_SAFETY * argument_error, 700.0))
    return min(0.0, math.log(diff + _SAFETY * error + gaussian_error))


def delta_from_mu_epsilon(mu: float, epsilon: float) -> float:
    """The delta of a mu-GDP mechanism at this epsilon, never below the exact value.

    epsilon = 0 is accepted here (delta(0; mu) = 2*Phi(mu/2) - 1) because
    `epsilon_from_mu_delta` can return 0.
    """
    mu_f = _positive(mu, "mu")
    eps_f = _real(epsilon, "epsilon")
    if eps_f < 0.0:
        raise PrivacyParameterError(f"epsilon must not be negative, got {eps_f!r}", field="epsilon")
    return _delta_upper(mu_f, eps_f)


def _delta_upper(mu: float, epsilon: float) -> float:
    log_bound = _log_delta_upper(mu, epsilon)
    if log_bound >= 0.0:
        return 1.0
    # exp is accurate to within one ulp; the next float up therefore bounds exp(log_bound), and
    # an underflow to 0 becomes the smallest positive float.
    return min(1.0, math.nextafter(math.exp(log_bound), math.inf))


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
        return _log_delta_upper(mu, eps) - log_target

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
    return _step_until(mu, lambda m: _delta_upper(m, eps) <= dlt, 0.0)


def epsilon_from_mu_delta(mu: float, delta: float) -> float:
    """The smallest epsilon at which mu-GDP gives (epsilon, delta)-DP; never below exact.

    0.0 when mu-GDP already gives (0, delta)-DP, i.e. delta >= 2*Phi(mu/2) - 1.
    """
    mu_f = _positive(mu, "mu")
    dlt = _probability(delta)
    log_target = math.log(dlt)

    def excess(eps: float) -> float:
        return _log_delta_upper(mu_f, eps) - log_target

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
    return _step_until(eps, lambda e: _delta_upper(mu_f, e) <= dlt, math.inf)


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
    square = exact_square_sum(values)
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
    root = math.sqrt(float(left))
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

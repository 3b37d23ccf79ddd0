"""The Dong-Roth-Su delta curve of a mu-GDP mechanism, evaluated as a rigorous upper bound:

    delta(epsilon; mu) = Phi(-epsilon/mu + mu/2) - exp(epsilon) * Phi(-epsilon/mu - mu/2).

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
within a few parts in 1e11 of it over the supported range. privclust.privacy.gdp inverts it.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import erfcx, ndtr, roots_laguerre

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


def log_delta_upper(mu: float, epsilon: float) -> float:
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
        return _log_delta_by_quadrature(mu, t1, argument_error)
    if t1 < _GL_MIN_T1 and mu <= _SERIES_MAX_MU:
        return _log_delta_by_series(mu, t1, argument_error)
    return _log_delta_directly(t1, t2, argument_error)


def _log_delta_by_quadrature(mu: float, t1: float, argument_error: float) -> float:
    """log delta + its error bound for t1 >= 2 and mu <= 2*t1, by Gauss-Laguerre quadrature."""
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


def _log_delta_by_series(mu: float, t1: float, argument_error: float) -> float:
    """log delta + its error bound for t1 < 2 and mu <= 1/2, by the Taylor series in mu."""
    # Small mu, moderate t1 (here t1 >= -mu/2 >= -1/4 since epsilon >= 0): the Taylor
    # series of R about t1, R(t1) - R(t1 + mu) = sum_n>=1 (-1)^(n+1) M_n mu^n / n!, where
    # M_n = int_0^inf s^n exp(-t1*s - s^2/2) ds = (-1)^n R^(n)(t1) > 0 obeys
    # M_(n+1) = n M_(n-1) - t1 M_n. The terms shrink fast and the first one dominates, so
    # the alternating sum loses almost nothing; mu is factored out against underflow.
    series = _mills_difference_over_mu(t1, mu)
    log_delta = -0.5 * t1 * t1 - _LOG_SQRT_2PI + math.log(mu) + math.log(series)
    return log_delta + _SAFETY * (_SERIES_ERROR * _U + argument_error + _sum_error(log_delta))


def _log_delta_directly(t1: float, t2: float, argument_error: float) -> float:
    """log delta + its error bound elsewhere, from the difference of the two terms; the error
    bound is computed in the same units as the difference."""
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


def delta_upper(mu: float, epsilon: float) -> float:
    """An upper bound on delta(epsilon; mu) (arguments already validated), at most 1."""
    log_bound = log_delta_upper(mu, epsilon)
    if log_bound >= 0.0:
        return 1.0
    # exp is accurate to within one ulp; the next float up therefore bounds exp(log_bound), and
    # an underflow to 0 becomes the smallest positive float.
    return min(1.0, math.nextafter(math.exp(log_bound), math.inf))

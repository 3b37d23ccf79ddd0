"""Privacy noise: a cryptographically strong generator and integer-valued Gaussian releases.

Two rules every release of privclust follows (docs/algorithms.md section 3, after Mironov 2012):

- **Integer outputs.** A Gaussian release adds noise to integer-valued data (vote counts, row
  counts, sums of rows snapped to a fixed grid) and is itself an integer: the released value is
  ``v + round(Z)`` with ``Z ~ N(0, s^2)``, computed as an int64 addition. A floating-point sum
  ``v + z`` would carry the low-order bits of ``z`` into the output, where they differ between
  neighbouring datasets (for ``v = 0`` the output is ``z`` itself, for ``v = 1`` a multiple of
  2^-53); an integer output has no low-order bits to leak.

  Why the rounded release keeps the Gaussian mechanism's guarantee: for an integer vector ``v``,
  ``round(v + Z) = v + round(Z)`` exactly, so the release is the map ``round`` applied to the
  output of the ordinary Gaussian mechanism ``v + Z``. If that mechanism is (Delta/s)-GDP
  (l2 sensitivity Delta, noise std s), so is every post-processing of it. The float sample ``z``
  that stands in for ``Z`` is drawn independently of ``v`` and only its rounded value is used,
  so nothing of the data reaches its low bits, and nothing of its low bits reaches the output.
  (A sampler's tail approximation changes the probability of a rounded value by a relative
  amount of the order of 2^-50, not the shape of the trade-off curve.)

- **A cryptographically strong generator.** numpy's default PCG64 can be reconstructed from a
  few hundred of its outputs, and PE-means publishes many values derived from its generator
  (Levy variations, k-means restarts), so a predictable generator could let an observer rebuild
  the noise. The service draws every random number of a job from ChaCha20 (the stream cipher
  behind Linux's getrandom), keyed with 256 bits from the operating system (`secrets`), via the
  well-kept `randomgen` package; no caller can seed it. The one exception is the bulk of
  published post-processing draws, PE-means' Levy variations: they come from a fast SFC64
  generator keyed with 256 bits of the job's ChaCha20 stream (`variation_generator`), 2.7x
  faster per normal draw. Rebuilding that generator from the variations it published yields
  its key, which is ChaCha20 output: it reveals nothing of the noise drawn from the rest of
  the stream.
"""

from __future__ import annotations

import math
import secrets
from fractions import Fraction

import numpy as np
from randomgen import ChaCha

from privclust.privacy.gdp import PrivacyParameterError, noise_multiplier

__all__ = [
    "COUNT_MU_FRACTION",
    "MAX_NOISE_STD",
    "default_count_mu",
    "job_generator",
    "noise_std",
    "release_count",
    "rounded_gaussian",
    "secure_generator",
    "variation_generator",
]

# The noisy row count released at upload costs this fraction of the dataset's mu_cap (1% of the
# budget in GDP terms: a job can still spend sqrt(1 - 0.1^2) = 99.5% of mu_cap). Measured in
# bench/RESULTS.md ("the noisy row count"): the Table I AUCs move by less than their standard
# errors, and on iris-sized data (150 rows) the count's noise is still small next to N.
COUNT_MU_FRACTION = 0.1
# Integer noise stays exact in float64 and int64 while |round(Z)| < 2^53; a std up to 1e13 puts
# a 2^53 draw ~900 standard deviations out, i.e. never.
MAX_NOISE_STD = 1e13


def secure_generator() -> np.random.Generator:
    """A numpy Generator over ChaCha20 keyed with 256 bits of OS entropy (never caller-seeded)."""
    return np.random.Generator(ChaCha(key=secrets.randbits(256), rounds=20))


def job_generator(rng: np.random.Generator | None) -> np.random.Generator:
    """The caller's generator (tests and benchmarks only), else a ChaCha20 one from OS entropy:
    the one source of a job's noise."""
    return rng if rng is not None else secure_generator()


def variation_generator(rng: np.random.Generator) -> np.random.Generator:
    """A fast generator (SFC64) for published post-processing draws, keyed with 256 bits drawn
    from `rng` (the job's ChaCha20 generator; a caller's generator in tests). It never draws
    noise (module docstring)."""
    return np.random.Generator(np.random.SFC64(rng.integers(0, 2**32, size=8, dtype=np.uint64)))


def rounded_gaussian(
    shape: int | tuple[int, ...], std: float, rng: np.random.Generator
) -> np.ndarray:
    """int64 array of round(Z), Z ~ N(0, std^2) i.i.d.: the noise of an integer Gaussian release.

    Add it to integer data with integer arithmetic; see the module docstring for why the result
    is as private as the continuous Gaussian mechanism with the same std.
    """
    if not (math.isfinite(std) and 0.0 < std <= MAX_NOISE_STD):
        raise PrivacyParameterError(f"noise std must be in (0, {MAX_NOISE_STD:g}], got {std!r}")
    return np.rint(rng.normal(0.0, std, size=shape)).astype(np.int64)


def integer_release(
    values: np.ndarray, *, sensitivity: float, sigma: float, rng: np.random.Generator
) -> np.ndarray:
    """values (integers) + rounded N(0, (sensitivity * sigma)^2) noise, as int64.

    `sensitivity` is the l2 sensitivity of the integer vector `values` under the neighbouring
    relation in force; the release is then (1/sigma)-GDP, and T of them compose to sqrt(T)/sigma.
    """
    data = np.asarray(values)
    if not np.issubdtype(data.dtype, np.integer):
        raise TypeError(f"an integer release needs integer data, got {data.dtype}")
    return data.astype(np.int64) + rounded_gaussian(data.shape, noise_std(sensitivity, sigma), rng)


def noise_std(sensitivity: float, sigma: float) -> float:
    """sensitivity x sigma, rounded up: the float product may round below the exact one, and
    noise a hair short of the calibrated std would overstate the privacy."""
    std = sensitivity * sigma
    if math.isfinite(std) and Fraction(std) < Fraction(sensitivity) * Fraction(sigma):
        std = math.nextafter(std, math.inf)
    return std


def default_count_mu(mu_cap: float) -> float:
    """The default cost of a dataset's noisy row count: COUNT_MU_FRACTION of its cap."""
    return COUNT_MU_FRACTION * float(mu_cap)


def release_count(n_rows: int, mu: float, rng: np.random.Generator | None = None) -> int:
    """N~ = N + round(N(0, 1/mu^2)): the row count as a mu-GDP release (add/remove sensitivity 1).

    May be 0 or negative for tiny N; callers that need a size use max(N~, 1) (post-processing).
    `rng` is for tests; by default the noise comes from `secure_generator()`.
    """
    if not (math.isfinite(mu) and mu > 0.0):
        raise PrivacyParameterError(f"count mu must be finite and > 0, got {mu!r}", field="mu")
    count = np.array([int(n_rows)], dtype=np.int64)
    sigma = noise_multiplier(mu, 1)  # 1/mu rounded up
    return int(integer_release(count, sensitivity=1.0, sigma=sigma, rng=job_generator(rng))[0])

"""The noise primitives: the ChaCha20 generator, integer releases, the row-count release."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from randomgen import ChaCha

from privclust.privacy import noise
from privclust.privacy.gdp import PrivacyParameterError, remaining_after


def test_the_service_generator_is_chacha20_from_os_entropy() -> None:
    first, second = noise.secure_generator(), noise.secure_generator()
    assert isinstance(first.bit_generator, ChaCha)
    # Keyed afresh each time (256 bits from `secrets`): two generators never share a stream.
    assert not np.array_equal(first.integers(2**63, size=4), second.integers(2**63, size=4))


def test_integer_release_is_integer_data_plus_rounded_gaussian_noise() -> None:
    rng = np.random.default_rng(3)
    values = np.arange(5, dtype=np.int64)
    out = noise.integer_release(values, sensitivity=2.0, sigma=1.5, rng=rng)
    assert out.dtype == np.int64
    # Same draws, by hand: round(N(0, (2 * 1.5)^2)).
    expected = values + np.rint(np.random.default_rng(3).normal(0.0, 3.0, size=5)).astype(int)
    np.testing.assert_array_equal(out, expected)
    with pytest.raises(TypeError):
        noise.integer_release(np.array([0.5]), sensitivity=1.0, sigma=1.0, rng=rng)


def test_rounded_gaussian_has_the_gaussian_variance() -> None:
    # Rounding adds variance 1/12 at most. 200,000 draws of std 10: the sample variance is within
    # 1.5% of 100 + 1/12 (its standard error is 0.32%, so this fails with probability < 1e-5).
    draws = noise.rounded_gaussian(200_000, 10.0, np.random.default_rng(5))
    assert draws.dtype == np.int64
    assert draws.var() == pytest.approx(100.0 + 1 / 12, rel=0.015)
    assert abs(draws.mean()) < 0.1


@pytest.mark.parametrize("std", [0.0, -1.0, math.inf, math.nan, 1e14])
def test_rounded_gaussian_refuses_a_std_that_could_lose_integer_exactness(std: float) -> None:
    with pytest.raises(PrivacyParameterError):
        noise.rounded_gaussian(3, std, np.random.default_rng(0))


def test_release_count_is_an_integer_near_n_with_std_one_over_mu() -> None:
    rng = np.random.default_rng(8)
    counts = np.array([noise.release_count(1000, 0.5, rng) for _ in range(20_000)])
    assert all(isinstance(c, int) for c in counts[:5].tolist())
    # std 1/mu = 2: mean within 0.1 (over 7 SE), std within 3%.
    assert abs(counts.mean() - 1000) < 0.1
    assert counts.std() == pytest.approx(math.sqrt(4 + 1 / 12), rel=0.03)
    with pytest.raises(PrivacyParameterError):
        noise.release_count(10, 0.0)
    assert noise.default_count_mu(2.0) == pytest.approx(0.2)


@pytest.mark.parametrize(("total", "part"), [(1.0, 0.1), (0.37, 0.3699), (5.0, 0.0), (1e-8, 3e-9)])
def test_remaining_after_is_the_largest_rest_that_composes_under_the_total(
    total: float, part: float
) -> None:
    rest = remaining_after(total, part)
    assert Fraction(rest) ** 2 + Fraction(part) ** 2 <= Fraction(total) ** 2
    bigger = math.nextafter(rest, math.inf)
    assert Fraction(bigger) ** 2 + Fraction(part) ** 2 > Fraction(total) ** 2
    with pytest.raises(PrivacyParameterError):
        remaining_after(total, total)


def test_noise_stds_are_never_below_the_exact_product(monkeypatch: pytest.MonkeyPatch) -> None:
    # A release's std is sensitivity x sigma, and the row count's sigma is 1/mu: rounded to
    # nearest, about half of them fell a hair short of the calibrated value.
    rng = np.random.default_rng(3)
    raised = 0
    for _ in range(2000):
        sensitivity = float(rng.choice([1.0, math.sqrt(2.0), rng.uniform(0.5, 3e6)]))
        sigma = float(rng.uniform(0.1, 1e4))
        std = noise.noise_std(sensitivity, sigma)
        exact = Fraction(sensitivity) * Fraction(sigma)
        assert Fraction(std) >= exact
        assert Fraction(math.nextafter(std, 0.0)) < exact  # at most one step above
        raised += std != sensitivity * sigma
    assert raised > 100  # the rounding up happened, not only exact products

    seen: list[float] = []
    original = noise.rounded_gaussian

    def recording(shape: int | tuple[int, ...], std: float, rng: np.random.Generator):
        seen.append(std)
        return original(shape, std, rng)

    monkeypatch.setattr(noise, "rounded_gaussian", recording)
    short = 0
    for count_mu in rng.uniform(1e-3, 10.0, size=300):
        noise.release_count(1000, float(count_mu), np.random.default_rng(0))
        assert Fraction(seen[-1]) * Fraction(float(count_mu)) >= 1
        short += Fraction(1.0 / float(count_mu)) * Fraction(float(count_mu)) < 1
    assert short > 10  # 1/mu rounded to nearest would have been short on these


def test_a_weighted_release_scales_its_sensitivity_rounded_up() -> None:
    # A release priced as w releases is calibrated on sensitivity / sqrt(w): the float square
    # root and division rounded it below the exact value in about half of the cases.
    from privclust.clustering.data.release import Gaussian

    rng = np.random.default_rng(5)
    raised = 0
    for _ in range(2000):
        sensitivity = float(rng.choice([1.0, math.sqrt(2.0), rng.uniform(1e-3, 3e6)]))
        weight = int(rng.integers(2, 400))
        scaled = Gaussian(sensitivity, 1.0, weight).scaled_sensitivity
        exact_squared = Fraction(sensitivity) ** 2 / weight
        assert Fraction(scaled) ** 2 >= exact_squared
        quotient = sensitivity / math.sqrt(weight)
        assert scaled <= quotient + 2 * math.ulp(quotient)  # a step or two at most
        raised += scaled != quotient
    assert raised > 100  # the rounding up happened, not only exact quotients
    assert Gaussian(0.75, 2.0).scaled_sensitivity == 0.75  # weight 1: the sensitivity itself

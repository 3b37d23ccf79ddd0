"""The warnings that a run may not have settled (`not-converged`, `centres-overlap`), read from
released values only, and the last Lloyd step's move that the first one reads."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import chi2

from privclust.clustering import cluster
from privclust.clustering.data.release import Gaussian
from privclust.clustering.mechanisms.grid import GRID_BITS
from privclust.clustering.mechanisms.lloyd import last_move_ratio
from privclust.clustering.outputs.centre_error import Z90
from privclust.clustering.outputs.convergence import (
    MOVE_LOSS_SHARE,
    NOT_CONVERGED_ALARM,
    convergence_warnings,
    settled_move,
)
from privclust.clustering.outputs.uncertainty import run_warnings


def test_the_settled_move_is_the_chi_squared_quantile_of_two_noises() -> None:
    # d = 4, k = 3: q = chi2(4) at 1 - 0.01/3 (15.8); sqrt(2 q / 4) = 2.81.
    q = chi2.ppf(1 - NOT_CONVERGED_ALARM / 3, 4)
    assert settled_move(4, 3) == pytest.approx(math.sqrt(2 * q / 4))
    assert 2.7 < settled_move(4, 3) < 2.9
    # More centres to take the largest of, a higher bar; more columns, a lower one (per d).
    assert settled_move(4, 8) > settled_move(4, 3) > settled_move(64, 3)


def test_a_step_that_moved_more_than_its_noise_warns_not_converged() -> None:
    centres = np.array([[0.0, 0.0], [1.0, 1.0]])
    limit = settled_move(2, 2)
    assert convergence_warnings(centres, last_move=0.9 * limit) == []
    codes = [c.code for c in convergence_warnings(centres, last_move=1.1 * limit)]
    assert codes == ["not-converged"]
    assert convergence_warnings(centres, last_move=None) == []  # no Lloyd step: no claim
    # Beyond its noise, but the step lowered the loss (0.01) by 0.004^2 = 1.6e-5, 0.16% of it:
    # below MOVE_LOSS_SHARE (0.2%), too little for the steps still to come to change it by 2%;
    # 0.005^2 = 2.5e-5 (0.25%) is not.
    tiny = {"last_move": 2 * limit, "loss": 0.01, "loss_se": 0.0}
    assert 0.004**2 < MOVE_LOSS_SHARE * 0.01 < 0.005**2
    assert convergence_warnings(centres, last_shift=0.004, **tiny) == []
    codes = [c.code for c in convergence_warnings(centres, last_shift=0.005, **tiny)]
    assert codes == ["not-converged"]


def test_centres_closer_than_the_rows_spread_warn_overlap() -> None:
    # In a box of widths 10 and 100 the centres are 0.1 apart in the scaled space (each
    # column a unit): with a loss of 0.02 (spread 0.14) they overlap; with 0.005 (0.07) not.
    centres = np.array([[1.0, 10.0], [2.0, 10.0], [9.0, 90.0]])
    units = np.array([10.0, 100.0])
    codes = [c.code for c in convergence_warnings(centres, units=units, loss=0.02, loss_se=0.0)]
    assert codes == ["centres-overlap"]
    assert convergence_warnings(centres, units=units, loss=0.005, loss_se=0.0) == []
    # The loss's noise counts against the claim of separation: taken Z90 standard errors high.
    assert convergence_warnings(centres, units=units, loss=0.005, loss_se=0.01) != []
    assert convergence_warnings(centres, units=units, loss=None) == []


def test_the_last_move_is_measured_against_each_centres_own_noise() -> None:
    noise = Gaussian(sensitivity=2.0**GRID_BITS, sigma=1.0)  # std: 1 step radius per row
    before = np.zeros((2, 4))
    after = np.array([[0.5, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    # Centre 0 moved 0.5 with a noise std of 1 / 100 per coordinate (100 rows, radius 1):
    # 0.5 / (0.01 * 2) = 25; a count floored at 1 keeps an empty cluster's std finite.
    ratio, shift = last_move_ratio(before, after, np.array([100.0, 0.0]), 1.0, noise)
    assert (ratio, shift) == (pytest.approx(25), pytest.approx(0.5))
    # The shift weighs each centre's squared move by its noisy count (floored at 0): the
    # moved centre's count is negative here, so no row's centre moved.
    ratio, shift = last_move_ratio(before, after[::-1], np.array([100.0, -3.0]), 1.0, noise)
    assert (ratio, shift) == (pytest.approx(0.25), 0.0)
    # 100 rows whose centre moved 0.5 and 300 whose centre stayed: sqrt(100 0.25 / 400).
    _, shift = last_move_ratio(before, after, np.array([100.0, 300.0]), 1.0, noise)
    assert shift == pytest.approx(0.25)


def test_auto_reports_its_last_move_and_a_method_without_lloyd_steps_none() -> None:
    rng = np.random.default_rng(5)
    X = np.concatenate([rng.normal(c, 0.03, (1000, 2)) for c in ((0.2, 0.2), (0.8, 0.7))])
    box = {"lower": [0.0, 0.0], "upper": [1.0, 1.0], "n_public": len(X), "summaries": True}
    result = cluster(X, 2, epsilon=1.0, delta=1e-6, rng=np.random.default_rng(0), **box)
    assert result.last_move is not None and math.isfinite(result.last_move)
    assert result.last_shift is not None and 0 <= result.last_shift <= 1.0
    assert result.loss is not None and result.loss_se is not None
    warned = run_warnings(result, np.zeros(2), np.ones(2))
    spread = math.sqrt(max(result.loss + Z90 * result.loss_se, 0.0))
    moved = result.last_move > settled_move(2, 2)
    moved = moved and result.last_shift**2 > MOVE_LOSS_SHARE * spread**2
    assert ("not-converged" in {c.code for c in warned}) == moved
    pe = cluster(X, 2, algorithm="pe-means", epsilon=1.0, delta=1e-6, **box)
    assert pe.last_move is None

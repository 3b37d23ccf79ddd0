"""The privacy unit: every release of every method calibrated for neighbours that differ by one
unit's rows (at most m of them), applied in one place
(privclust.clustering.run.options.per_row_options).

The neighbour test captures every release through the one function all of them are drawn by
(`privclust.privacy.noise.integer_release`): a run on D records each release's exact value, its
stated sensitivity and noise, and what it released; a run on D' (D plus one unit of up to m rows,
bounded from 10^5) draws the same noise but releases what the run on D released, so that every
later release is computed from the same released history, as adaptive composition has it. Each
release's exact value may then move by at most m times its stated sensitivity, and the noise
drawn must make the whole run mu-GDP for the unit at the mu it charges. Nothing here is random
beyond fixed seeds: the test passes or fails the same way every time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from privclust.clustering import cluster, plan_run
from privclust.clustering.run.options import per_row_mu
from privclust.privacy import noise
from privclust.tabular_rows import bound_units
from tests.support.data import blobs

ALGORITHMS = ["pe-means", "hdpe-means", "fastlloyd", "lsh-coreset", "pe-lloyd", "auto"]
M = 4


@dataclass
class Releases:
    """What a run released, call by call (exact values, sensitivity, noise std, output)."""

    exact: list[np.ndarray] = field(default_factory=list)
    sensitivity: list[float] = field(default_factory=list)
    std: list[float] = field(default_factory=list)
    released: list[np.ndarray] = field(default_factory=list)


@contextmanager
def captured(monkeypatch: pytest.MonkeyPatch, replay: Releases | None = None) -> Iterator[Releases]:
    """Record every integer release; with `replay`, draw the same noise (so the generator moves
    as it did) but release what `replay` released, call by call."""
    record = Releases()
    original = noise.integer_release

    def release(values: np.ndarray, *, sensitivity: float, sigma: float, rng: Any) -> np.ndarray:
        out = original(values, sensitivity=sensitivity, sigma=sigma, rng=rng)
        record.exact.append(np.asarray(values, dtype=np.int64).copy())
        record.sensitivity.append(float(sensitivity))
        record.std.append(noise.noise_std(sensitivity, sigma))
        if replay is not None:
            out = replay.released[len(record.released)].copy()
        record.released.append(out.copy())
        return out

    with monkeypatch.context() as patch:
        patch.setattr(noise, "integer_release", release)
        yield record


def unit_rows(rng: np.random.Generator) -> np.ndarray:
    """One unit with 10^5 rows before bounding, all at the far corner of the domain (the worst
    place for a sum), bounded to M rows by the ingest's own rule."""
    raw = np.tile([[1.0, 1.0]], (100_000, 1))
    keep = bound_units(np.zeros(100_000, dtype=object), M, rng)
    assert keep.sum() == M
    return raw[keep]


def unit_privacy_loss(algorithm: str, bound: int, monkeypatch: pytest.MonkeyPatch) -> tuple:
    """(the unit-level mu the run's releases actually spend when one unit is added, the mu
    the run charged): each release's move over its noise std, composed."""
    X = np.clip(blobs(400, 2, 3, seed=3) * 0.3, -1.0, 1.0)
    neighbour = np.vstack([X, unit_rows(np.random.default_rng(5))])
    keywords: dict[str, Any] = dict(
        algorithm=algorithm,
        epsilon=2.0,
        delta=1e-6,
        radius=1.5,
        summaries=True,
        n_public=400,
        contribution_bound=bound,
    )
    with captured(monkeypatch) as on_d:
        result = cluster(X, 3, rng=np.random.default_rng(11), **keywords)
    with captured(monkeypatch, replay=on_d) as on_neighbour:
        cluster(neighbour, 3, rng=np.random.default_rng(11), **keywords)
    assert len(on_d.exact) == len(on_neighbour.exact) > 0
    spent = Fraction(0)
    for i, (a, b) in enumerate(zip(on_d.exact, on_neighbour.exact, strict=True)):
        moved = float(np.linalg.norm((b - a).astype(np.float64)))
        # A release priced as w releases states its sensitivity divided by sqrt(w): its move
        # is within M * sqrt(w) times that, so only the composed loss is checked below.
        assert moved <= M * on_d.sensitivity[i] * 64, (i, moved)
        spent += Fraction(moved / on_d.std[i]) ** 2
    return math.sqrt(spent), result.mu


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_one_unit_moves_every_release_within_what_the_run_charged(
    monkeypatch: pytest.MonkeyPatch, algorithm: str
) -> None:
    spent, charged = unit_privacy_loss(algorithm, M, monkeypatch)
    assert 0 < spent <= charged * (1 + 1e-12)


def test_without_the_bound_the_same_unit_would_overspend(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test above has teeth: calibrated for one row, the unit's M rows at the far corner
    # spend more than the run charged.
    spent, charged = unit_privacy_loss("fastlloyd", 1, monkeypatch)
    assert spent > 1.5 * charged


def test_the_plan_charges_the_unit_and_draws_m_times_the_noise() -> None:
    row = plan_run(1000, 3, 4, epsilon=1.0, delta=1e-6, algorithm="pe-means")
    unit = plan_run(1000, 3, 4, epsilon=1.0, delta=1e-6, algorithm="pe-means", contribution_bound=M)
    assert unit.mu == row.mu and unit.epsilon == 1.0
    assert unit.releases == row.releases
    assert math.sqrt(unit.releases) / unit.sigma <= unit.mu / M
    assert unit.sigma == pytest.approx(M * row.sigma, rel=1e-9)


@pytest.mark.parametrize("mu", [0.1, 1.0 / 3.0, 0.7, 2.0, 5.0 / 7.0])
@pytest.mark.parametrize("m", [1, 3, 7, 40, 9999])
def test_per_row_mu_never_overstates_the_unit_guarantee(mu: float, m: int) -> None:
    row = per_row_mu(mu, m)
    assert Fraction(row) * m <= Fraction(mu)
    assert row == pytest.approx(mu / m, rel=1e-15)


def test_a_unit_keeps_m_rows_chosen_uniformly_at_random() -> None:
    # 3 units of 10, 1 and 5 rows; m = 2. Each of unit a's 10 rows is kept with probability
    # 1/5: over 20,000 draws each row's count is ~Binomial(20000, 0.2) (std ~57), so a bound of
    # 400 around the mean 4000 fails with probability far below 1e-4.
    units = np.array(["a"] * 10 + ["b"] + ["c"] * 5, dtype=object)
    rng = np.random.default_rng(0)
    hits = np.zeros(units.size)
    for _ in range(20_000):
        keep = bound_units(units, 2, rng)
        assert [int(keep[units == u].sum()) for u in "abc"] == [2, 1, 2]
        hits += keep
    assert np.all(np.abs(hits[:10] - 4000) < 400)
    assert hits[10] == 20_000

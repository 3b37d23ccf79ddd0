"""A test's own stand-in for the generators keyed from OS entropy: ChaCha20 streams keyed from
a fixed seed and a counter, so that a test of a run's accuracy through the service (which
takes no seed) checks one fixed draw and cannot fail by chance."""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from randomgen import ChaCha

from privclust.clustering.data.release import Gaussian
from privclust.clustering.evolution import packing

# The modules that take the entropy-keyed generator by name.
_USERS = ("privclust.privacy.noise", "privclust.tabular_read", "app.datasets.ingest.tabular")


def fix_noise(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Every `secure_generator()` from now on (this test only) is the next of a fixed
    sequence of ChaCha20 streams, and so is every unseeded `numpy.random.default_rng()` (the
    public sphere packing a run starts from, made afresh for this test): the same calls in
    the same order draw the same numbers."""
    keys = itertools.count(seed << 32)
    unseeded = np.random.default_rng

    def seeded() -> np.random.Generator:
        return np.random.Generator(ChaCha(key=next(keys), rounds=20))

    def default_rng(seed: object = None) -> np.random.Generator:
        return seeded() if seed is None else unseeded(seed)  # type: ignore[arg-type]

    for module in _USERS:
        monkeypatch.setattr(f"{module}.secure_generator", seeded)
    monkeypatch.setattr(np.random, "default_rng", default_rng)
    fresh = functools.lru_cache(maxsize=8)(packing._unit_packing.__wrapped__)
    monkeypatch.setattr(packing, "_unit_packing", fresh)


def scaled(sensitivity: float, weight: int) -> float:
    """The sensitivity a release priced as `weight` releases is calibrated on: sensitivity /
    sqrt(weight), rounded up as the library rounds it (Gaussian.scaled_sensitivity)."""
    return Gaussian(sensitivity, 1.0, weight).scaled_sensitivity

"""Benchmark data sets and the paper's evaluation protocol (docs/algorithms.md section 9).

Shared by bench/table1.py and bench/speed.py. Data are centred by their mean and scaled so the
largest row norm is 1 (a benchmark convenience only: a service must never derive the domain from
the data), so R = 1 around the origin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from sklearn.datasets import load_iris, make_blobs

EPSILONS = (0.25, 0.5, 1.0, 2.0, 4.0)

# Published Table I (PE-means paper): non-private loss, PE-means AUC, HDPE-means AUC, best
# non-PE baseline AUC (None where the paper has no figure).
PAPER: dict[str, tuple[float, float, float | None, float]] = {
    "iris": (0.0363, 0.2894, None, 0.3979),
    "sklearn_4_4": (0.0207, 0.0778, None, 0.0875),
    "sklearn_16_4": (0.0122, 0.0445, None, 0.0979),
    "sklearn_64_4": (0.0091, 0.0379, None, 0.0818),
    "sklearn_4_16": (0.0253, 0.0955, None, 0.1395),
    "sklearn_16_16": (0.0162, 0.0668, None, 0.1596),
    "sklearn_64_16": (0.0171, 0.1183, None, 0.3872),
    "sklearn_4_64": (0.0254, 0.0993, 0.0974, 0.1090),
    "sklearn_16_64": (0.0226, 0.1192, 0.1189, 0.2258),
}


# The Table I sets, in the paper's order.
TABLE_I_SETS: tuple[str, ...] = tuple(PAPER)


# Published Table I, "Google" column (Chang and Kamath's LSH-tree coreset): loss AUC.
PAPER_GOOGLE: dict[str, float] = {
    "iris": 0.6892,
    "sklearn_4_4": 0.1305,
    "sklearn_16_4": 0.0979,
    "sklearn_64_4": 0.1289,
    "sklearn_4_16": 0.1395,
    "sklearn_16_16": 0.1596,
    "sklearn_64_16": 0.3872,
    "sklearn_4_64": 0.1090,
    "sklearn_16_64": 0.2258,
}

# The FastLloyd column of the same Table I (the published FastLloyd code under the paper's
# protocol).
PAPER_FASTLLOYD: dict[str, float] = {
    "iris": 0.3979,
    "sklearn_4_4": 0.1777,
    "sklearn_16_4": 0.0990,
    "sklearn_64_4": 0.0818,
    "sklearn_4_16": 0.7110,
    "sklearn_16_16": 0.7160,
    "sklearn_64_16": 0.7631,
    "sklearn_4_64": 1.4623,
    "sklearn_16_64": 1.7475,
}


@dataclass(frozen=True)
class Dataset:
    name: str
    X: np.ndarray
    k: int

    @property
    def delta(self) -> float:
        """The paper's delta = 1 / N^1.1."""
        return float(len(self.X) ** -1.1)


def normalise(X: np.ndarray) -> np.ndarray:
    """Centre by the mean and scale so the largest row norm is 1 (benchmark only)."""
    centred = X - X.mean(axis=0)
    return np.asarray(centred / np.linalg.norm(centred, axis=1).max(), dtype=np.float64)


@lru_cache(maxsize=32)
def load(name: str, n_rows: int = 20_000) -> Dataset:
    """The data set `name`: iris, or sklearn_K_D = make_blobs(n_samples=n_rows, n_features=D,
    centers=K, random_state=1), sklearn defaults otherwise (the paper uses n_rows = 20,000).
    sklearn_K_D_rS is the same with random_state=S (held-out sets: other blob positions)."""
    if name == "iris":
        return Dataset(name, normalise(load_iris().data), 3)
    match = re.fullmatch(r"sklearn_(\d+)_(\d+)(?:_r(\d+))?", name)
    if match is None:
        raise ValueError(f"unknown data set {name!r}")
    k, d = int(match.group(1)), int(match.group(2))
    state = 1 if match.group(3) is None else int(match.group(3))
    X, _ = make_blobs(n_samples=n_rows, n_features=d, centers=k, random_state=state)
    return Dataset(name, normalise(X), k)


def auc(losses: list[float] | np.ndarray, epsilons: tuple[float, ...] = EPSILONS) -> float:
    """Area under the loss-vs-epsilon curve by the trapezoidal rule."""
    values = np.asarray(losses, dtype=np.float64)
    widths = np.diff(np.asarray(epsilons))
    return float(np.sum(widths * (values[1:] + values[:-1]) / 2.0))

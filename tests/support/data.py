"""Seeded data for the tests: rows scattered around centres, and the CSV bytes an upload sends."""

from __future__ import annotations

import numpy as np


def rows_around(centres: np.ndarray, n: int, spread: float, rng: np.random.Generator) -> np.ndarray:
    """n rows, each a centre drawn at random plus Gaussian noise of std `spread` per coordinate."""
    picks = rng.integers(0, len(centres), n)
    return centres[picks] + rng.normal(0.0, spread, (n, centres.shape[1]))


def blobs_and_centres(
    n: int, d: int, k: int, seed: int = 0, *, spread: float = 0.05, half_width: float = 0.6
) -> tuple[np.ndarray, np.ndarray]:
    """n rows around k centres drawn uniformly in [-half_width, half_width]^d, and the centres."""
    rng = np.random.default_rng(seed)
    centres = rng.uniform(-half_width, half_width, (k, d))
    return rows_around(centres, n, spread, rng), centres


def blobs(
    n: int, d: int, k: int, seed: int = 0, *, spread: float = 0.05, half_width: float = 0.6
) -> np.ndarray:
    """The rows of `blobs_and_centres` (by default well inside the unit ball)."""
    return blobs_and_centres(n, d, k, seed, spread=spread, half_width=half_width)[0]


def two_blobs(n: int = 300, d: int = 2, seed: int = 0) -> np.ndarray:
    """n rows around (-3, ..., -3) and (3, ..., 3), std 0.5: the API tests' usual upload."""
    centres = np.array([[-3.0] * d, [3.0] * d])
    return rows_around(centres, n, 0.5, np.random.default_rng(seed))


def csv_bytes(
    rows: np.ndarray, header: list[str] | None = None, digits: int | None = None
) -> bytes:
    """A CSV file: a header (f0, f1, ... by default), then one line a row, each value written
    with `digits` decimals, or exactly (repr) without."""
    header = header or [f"f{i}" for i in range(rows.shape[1])]

    def text(value: float) -> str:
        return repr(float(value)) if digits is None else f"{value:.{digits}f}"

    lines = [",".join(header)] + [",".join(text(v) for v in row) for row in rows]
    return ("\n".join(lines) + "\n").encode()


# The README's customers: four columns in very different units, declared per column, and three
# segments.
CUSTOMER_COLUMNS = ["age", "income_k", "visits", "spend"]
CUSTOMER_LOWER = np.array([0.0, 0.0, 0.0, 0.0])
CUSTOMER_UPPER = np.array([100.0, 200.0, 30.0, 1000.0])
CUSTOMER_SEGMENTS = np.array([[30, 50, 5, 200], [45, 120, 15, 500], [65, 80, 25, 800.0]])


def customers(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n customers around the 3 segments (spread 5% of each column's range), not yet clipped
    into the declared bounds, and each row's segment."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    spread = (CUSTOMER_UPPER - CUSTOMER_LOWER) * 0.05
    return CUSTOMER_SEGMENTS[labels] + rng.normal(size=(n, 4)) * spread, labels

"""Per-column scales: a box domain (declared lower and upper bounds per column) and the public
affine map that puts every column on the same range.

A box's columns may be in very different units (an age in 0-100 next to a spend in 0-1,000):
clustered in the ball around the box, every column would get noise on the scale of the widest.
So a box dataset is clustered in the *scaled space*, where column j is mapped by its declared
bounds onto [0, 1]: z_j = (x_j - lo_j) / (hi_j - lo_j) (a column with lo_j = hi_j maps to 1/2).
The map reads only the declared bounds: it is public and costs no budget. Every row is clipped
into the box itself (per column) before it is mapped, so in the scaled space it lies in the unit
box, inside the ball of radius sqrt(d)/2 around (1/2, ..., 1/2); every method's sensitivity is
stated for that ball, so the guarantee holds unchanged. Centres come back in the columns' own
units (the inverse map: post-processing). The private loss is measured in the scaled space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from privclust.clustering.data.limits import check_box_bounds
from privclust.clustering.errors import ClusteringInputError

# The names of the two spaces a result's loss can be measured in.
ORIGINAL_SPACE = "original"
SCALED_SPACE = "scaled"


@dataclass(frozen=True, eq=False)
class Box:
    """Declared per-column bounds (float64 vectors of d values, lower <= upper, within the
    domain limits of privclust.clustering.data.limits)."""

    lower: np.ndarray
    upper: np.ndarray

    @classmethod
    def of(cls, lower: object, upper: object, n_cols: int | None = None) -> Box:
        """Checked bounds (ClusteringInputError naming `lower` or `upper`)."""
        lo, hi = _vector(lower, "lower"), _vector(upper, "upper")
        check_box_bounds(list(lo), list(hi))
        if n_cols is not None and lo.shape != (n_cols,):
            raise ClusteringInputError(
                "lower",
                f"lower and upper must have {n_cols} values (one per column), got {lo.size}",
            )
        lo.flags.writeable = hi.flags.writeable = False
        return cls(lower=lo, upper=hi)

    @property
    def n_cols(self) -> int:
        return int(self.lower.size)

    @property
    def widths(self) -> np.ndarray:
        """Each column's declared range hi - lo (0 for a constant column)."""
        return self.upper - self.lower

    @property
    def radius(self) -> float:
        """The radius of the ball around the unit box in the scaled space: sqrt(d) / 2."""
        return math.sqrt(self.n_cols) / 2.0

    @property
    def center(self) -> np.ndarray:
        """The centre of the unit box in the scaled space."""
        return np.full(self.n_cols, 0.5)

    def to_scaled(self, block: np.ndarray) -> np.ndarray:
        """Rows (float64, original units) clipped into the box and mapped into the unit box
        [0, 1]^d; a new array. Total: finite rows stay finite, whatever their values."""
        clipped = np.clip(block, self.lower, self.upper)
        widths = self.widths
        safe = np.where(widths > 0, widths, 1.0)
        scaled = np.where(widths > 0, (clipped - self.lower) / safe, 0.5)
        return np.clip(scaled, 0.0, 1.0)

    def to_original(self, scaled: np.ndarray) -> np.ndarray:
        """Points of the scaled space back in the columns' own units (read-only)."""
        points = self.lower + np.asarray(scaled, dtype=np.float64) * self.widths
        points.flags.writeable = False
        return points


def _vector(value: object, field: str) -> np.ndarray:
    try:
        v = np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ClusteringInputError(field, f"{field} must be a vector of numbers") from exc
    if v.ndim != 1 or v.size == 0:
        raise ClusteringInputError(field, f"{field} must be a non-empty vector of numbers")
    return v


def box_keywords(
    keywords: dict[str, Any], lower: object, upper: object, n_cols: int
) -> tuple[Box, dict[str, Any]]:
    """The box of a call with per-column bounds, and its keywords with the scaled ball in place
    of a radius and centre (which such a call must not give)."""
    for name in ("radius", "center"):
        if keywords.get(name) is not None:
            raise ClusteringInputError(
                name, "give either a ball (radius, center) or per-column bounds (lower, upper)"
            )
    box = Box.of(lower, upper, n_cols)
    return box, {**keywords, "radius": box.radius, "center": box.center}

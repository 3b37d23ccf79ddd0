"""The limits of a declared domain, one definition for the library and the service alike.

With every |c_i| + R (a ball) or every |lo_i|, |hi_i| (a box) at most MAX_DOMAIN_ABS, and R
between MIN_RADIUS and MAX_RADIUS, no arithmetic on a row can overflow or lose its scale,
whatever the row: x - c is finite for any finite x (|c_i| <= 1e100 is far below half a unit in
the last place of the largest float, about 1e292), a clipped row's coordinates stay within a few
times 1e100, its squared norm within d * 1e201 (finite for any d below 1e107), and squared
coordinates near MIN_RADIUS (1e-200) are still normal floats. So whether a run fails can never
depend on a row's values, and a row's label is a function of that row alone. Outside them the
summaries' clip becomes 0 or inf and labels stop being a function of their own row, so calls
outside them are refused (ClusteringInputError naming the argument).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from privclust.clustering.errors import ClusteringInputError, check_positive

MAX_DOMAIN_ABS = 1e100
MIN_RADIUS = 1e-100
MAX_RADIUS = 1e100


def check_radius(radius: float) -> float:
    """A declared ball's radius: finite, within [MIN_RADIUS, MAX_RADIUS]."""
    if not math.isfinite(radius) or radius <= 0:
        raise ClusteringInputError("radius", "radius must be a finite number > 0")
    if not MIN_RADIUS <= radius <= MAX_RADIUS:
        raise ClusteringInputError(
            "radius", f"radius must be between {MIN_RADIUS:g} and {MAX_RADIUS:g}, got {radius:g}"
        )
    return radius


def check_ball_centre(center: Sequence[float] | np.ndarray, radius: float) -> None:
    """Every |c_i| + R at most MAX_DOMAIN_ABS (centre values already finite)."""
    if any(abs(float(c)) + radius > MAX_DOMAIN_ABS for c in center):
        raise ClusteringInputError(
            "center",
            f"every |center_i| + radius must be at most {MAX_DOMAIN_ABS:g}, so that no "
            "row's arithmetic can overflow",
        )


def check_box_bounds(lower: Sequence[float], upper: Sequence[float]) -> None:
    """Per-column bounds: as many lower as upper, finite, within +-MAX_DOMAIN_ABS, lower <=
    upper, and an enclosing ball of radius at least MIN_RADIUS."""
    if len(lower) != len(upper):
        raise ClusteringInputError("upper", "lower and upper must have the same length")
    for field, bounds in (("lower", lower), ("upper", upper)):
        if not all(math.isfinite(b) for b in bounds):
            raise ClusteringInputError(field, f"every {field} bound must be finite")
        if any(abs(b) > MAX_DOMAIN_ABS for b in bounds):
            raise ClusteringInputError(
                field,
                f"every {field} bound must be within +-{MAX_DOMAIN_ABS:g}, so that no row's "
                "arithmetic can overflow",
            )
    if any(hi < lo for lo, hi in zip(lower, upper, strict=True)):
        raise ClusteringInputError("upper", "every upper bound must be >= its lower bound")
    radius = enclosing_radius(lower, upper)
    if not radius > 0:
        raise ClusteringInputError("upper", "lower and upper describe an empty domain")
    if radius < MIN_RADIUS:
        raise ClusteringInputError(
            "upper", f"lower and upper describe a domain of radius below {MIN_RADIUS:g}"
        )


def enclosing_radius(lower: Sequence[float], upper: Sequence[float]) -> float:
    """The radius of the ball around a box: half its diagonal (bounds within
    +-MAX_DOMAIN_ABS: no width overflows)."""
    return math.hypot(*[hi - lo for lo, hi in zip(lower, upper, strict=True)]) / 2


def check_ball(radius: object, center: object | None, n_cols: int) -> None:
    """A library call's declared ball against the limits (the radius and the centre as the
    caller gave them; their types and shapes are `prepare_rows`'s to check)."""
    if isinstance(radius, bool) or not isinstance(radius, int | float | np.floating | np.integer):
        return  # not a number: prepare_rows names it
    check_radius(float(radius))
    if center is None:
        return
    try:
        c = np.asarray(center, dtype=np.float64)
    except (TypeError, ValueError):
        return
    if c.shape == (n_cols,) and np.isfinite(c).all():
        check_ball_centre(c, float(radius))


def check_domain(radius: object, center: object | None, n_cols: int) -> None:
    """A call's whole declared ball, checked before anything is drawn: the radius a finite
    number > 0, the centre d finite numbers, both within the limits."""
    R = check_radius(check_positive("radius", radius))
    check_ball_centre(domain_centre(center, n_cols, R), R)


def domain_centre(center: object | None, n_cols: int, radius: float) -> np.ndarray:
    """The declared centre as float64 (the origin when None), checked against the domain."""
    if center is None:
        c = np.zeros(n_cols)
    else:
        try:
            c = np.asarray(center, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise ClusteringInputError("center", "center must be a vector of numbers") from exc
        if c.shape != (n_cols,):
            raise ClusteringInputError(
                "center", f"center must have {n_cols} values (one per column), got shape {c.shape}"
            )
        if not np.isfinite(c).all():
            raise ClusteringInputError("center", "center must be finite")
    if not (np.isfinite(c - radius).all() and np.isfinite(c + radius).all()):
        raise ClusteringInputError("center", "center +- radius must be finite")
    return c

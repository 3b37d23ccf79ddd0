"""Input errors of the clustering library, each naming the offending argument, and the checks
that raise them."""

from __future__ import annotations

import math
import numbers

import numpy as np


class ClusteringInputError(ValueError):
    """An argument of a clustering call is invalid; `field` names it ("X", "k", "radius", ...).

    A `ValueError` so plain callers can catch it generically, with `field` so the API can answer
    with a 422 problem that names the parameter at fault.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def check_integer(field: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """`value` as an int >= minimum (and <= maximum when one is given), or ClusteringInputError
    naming `field`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ClusteringInputError(field, f"{field} must be an integer, got {value!r}")
    result = int(value)
    if result < minimum:
        raise ClusteringInputError(field, f"{field} must be at least {minimum}, got {result}")
    if maximum is not None and result > maximum:
        raise ClusteringInputError(field, f"{field} must be at most {maximum}, got {result}")
    return result


def check_positive(field: str, value: object) -> float:
    """`value` as a finite float > 0, or ClusteringInputError naming `field`."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ClusteringInputError(field, f"{field} must be a number, got {value!r}")
    result = float(value)
    if not math.isfinite(result) or result <= 0.0:
        raise ClusteringInputError(field, f"{field} must be finite and > 0, got {result!r}")
    return result


def check_below_one(field: str, value: object) -> float:
    """`value` as a float strictly between 0 and 1 (a share), or ClusteringInputError."""
    share = check_positive(field, value)
    if not share < 1.0:
        raise ClusteringInputError(field, f"{field} must be below 1, got {share!r}")
    return share


def data_shape(X: object) -> tuple[int, int]:
    """(N, d) of a 2-D array-like, or ClusteringInputError("X")."""
    shape = np.shape(X)  # type: ignore[call-overload]
    if len(shape) != 2:
        raise ClusteringInputError(
            "X", f"X must be a 2-D array (rows x columns), got shape {shape}"
        )
    if shape[0] < 1 or shape[1] < 1:
        raise ClusteringInputError("X", f"X must have at least one row and one column, got {shape}")
    return int(shape[0]), int(shape[1])

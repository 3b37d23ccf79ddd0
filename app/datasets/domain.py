"""A dataset's declared public domain: the form fields that describe it, and its rules.

The domain is declared by the owner, never computed from the data: either a ball (`radius`,
optional `center`) or a box (`lower` and `upper`), which is turned into the ball around it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from app.kit.errors import InvalidParameter

# Bounds on a declared domain. With every |c_i| + R (ball) or every |lo_i|, |hi_i| (box) at most
# MAX_DOMAIN_ABS, and R at least MIN_RADIUS, no arithmetic on a row can overflow or lose its
# scale, whatever the row: x - c is finite for any finite x (|c_i| <= 1e100 is far below half a
# unit in the last place of the largest float, about 1e292), a clipped row's coordinates stay
# within a few times 1e100, its squared norm within d * 1e201 (finite for any d below 1e107),
# and squared coordinates near MIN_RADIUS (1e-200) are still normal floats. So whether a job
# fails can never depend on a row's values: one extreme row cannot change an observable outcome.
MAX_DOMAIN_ABS = 1e100
MIN_RADIUS = 1e-100
MAX_RADIUS = 1e100


@dataclass(frozen=True)
class DomainSpec:
    """The owner's declared public bound, as sent (JSON strings already decoded)."""

    radius: float | None = None
    center: list[float] | None = None
    lower: list[float] | None = None
    upper: list[float] | None = None


def parse_json_vector(raw: str | None, field: str) -> list[float] | None:
    """Decode an optional JSON array of finite numbers sent as a form field."""
    if raw is None or raw == "":
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidParameter(f"{field} must be a JSON array of numbers", field=field) from exc
    if not isinstance(value, list) or not value:
        raise InvalidParameter(f"{field} must be a non-empty JSON array of numbers", field=field)
    out: list[float] = []
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int | float):
            raise InvalidParameter(f"{field} must contain only numbers", field=field)
        if not math.isfinite(item):
            raise InvalidParameter(f"{field} must contain only finite numbers", field=field)
        out.append(float(item))
    return out


def parse_json_names(raw: str | None, field: str = "columns") -> list[str] | None:
    if raw is None or raw == "":
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise InvalidParameter(
            f"{field} must be a JSON array of column names", field=field
        ) from exc
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise InvalidParameter(
            f"{field} must be a non-empty JSON array of column names", field=field
        )
    if len(set(value)) != len(value):
        raise InvalidParameter(f"{field} names a column twice", field=field)
    return list(value)


def check_domain_shape(spec: DomainSpec) -> None:
    """What can be checked before the file is read: exactly one kind of bound, sane values."""
    has_ball = spec.radius is not None
    has_box = spec.lower is not None or spec.upper is not None
    if has_ball == has_box:
        raise InvalidParameter(
            "declare the public domain with either `radius` (and optional `center`) or both "
            "`lower` and `upper`; it is never computed from the data",
            field="radius",
        )
    if has_ball:
        assert spec.radius is not None
        if not math.isfinite(spec.radius) or spec.radius <= 0:
            raise InvalidParameter("radius must be a finite number > 0", field="radius")
        if not MIN_RADIUS <= spec.radius <= MAX_RADIUS:
            raise InvalidParameter(
                f"radius must be between {MIN_RADIUS:g} and {MAX_RADIUS:g}", field="radius"
            )
        if spec.center is not None and any(
            abs(c) + spec.radius > MAX_DOMAIN_ABS for c in spec.center
        ):
            raise InvalidParameter(
                f"every |center_i| + radius must be at most {MAX_DOMAIN_ABS:g}, so that no "
                "row's arithmetic can overflow",
                field="center",
            )
    else:
        if spec.lower is None or spec.upper is None:
            raise InvalidParameter(
                "lower and upper must be given together",
                field="upper" if spec.upper is None else "lower",
            )
        if len(spec.lower) != len(spec.upper):
            raise InvalidParameter("lower and upper must have the same length", field="upper")
        for field, bounds in (("lower", spec.lower), ("upper", spec.upper)):
            if any(abs(b) > MAX_DOMAIN_ABS for b in bounds):
                raise InvalidParameter(
                    f"every {field} bound must be within +-{MAX_DOMAIN_ABS:g}, so that no "
                    "row's arithmetic can overflow",
                    field=field,
                )
        if any(hi < lo for lo, hi in zip(spec.lower, spec.upper, strict=True)):
            raise InvalidParameter("every upper bound must be >= its lower bound", field="upper")


def resolve_domain(spec: DomainSpec, n_cols: int) -> tuple[list[float], float]:
    """Center and radius of the public ball for a dataset with n_cols columns."""
    if spec.radius is not None:
        center = spec.center if spec.center is not None else [0.0] * n_cols
        if len(center) != n_cols:
            raise InvalidParameter(
                f"center has {len(center)} values but the dataset has {n_cols} columns",
                field="center",
            )
        return center, float(spec.radius)
    assert spec.lower is not None and spec.upper is not None
    if len(spec.lower) != n_cols:
        raise InvalidParameter(
            f"lower/upper have {len(spec.lower)} values but the dataset has {n_cols} columns",
            field="lower",
        )
    center = [(lo + hi) / 2 for lo, hi in zip(spec.lower, spec.upper, strict=True)]
    radius = math.hypot(*[(hi - lo) for lo, hi in zip(spec.lower, spec.upper, strict=True)]) / 2
    if not math.isfinite(radius) or radius <= 0:
        raise InvalidParameter("lower and upper describe an empty domain", field="upper")
    if radius < MIN_RADIUS:
        raise InvalidParameter(
            f"lower and upper describe a domain of radius below {MIN_RADIUS:g}", field="upper"
        )
    return center, radius

"""A dataset's declared public domain: the form fields that describe it, and its rules.

The domain is declared by the owner, never computed from the data: either a ball (`radius`,
optional `center`) or a box (`lower` and `upper`), whose jobs cluster in the scaled space where
each column is mapped onto [0, 1] by its bounds (privclust.clustering.data.scaling); a box also
keeps the ball around it. Vector fields take a JSON array or comma-separated values.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from app.kit.errors import InvalidParameter
from app.models import Dataset, DomainKind
from privclust.clustering import clip_into_ball
from privclust.clustering.data.limits import (
    check_ball_centre,
    check_box_bounds,
    check_radius,
)
from privclust.clustering.data.scaling import ORIGINAL_SPACE, SCALED_SPACE, Box
from privclust.clustering.errors import ClusteringInputError
from privclust.clustering.outputs.accuracy import Space


@dataclass(frozen=True)
class DomainSpec:
    """The owner's declared public bound, as sent (JSON strings already decoded)."""

    radius: float | None = None
    center: list[float] | None = None
    lower: list[float] | None = None
    upper: list[float] | None = None


# What a vector form field may hold, stated in the API's schema and checked here with the same
# expressions: a JSON array, or the same values separated by commas (blanks around them
# allowed). A number is a JSON number; a name in a comma list has no comma, quote, bracket or
# control character and does not start with a blank.
_WS = r"[ \t\n\r]*"  # JSON's whitespace only (a regex's \s allows more than json.loads)
_NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
_JSON_NAME = r'"([^"\\\x00-\x1f]|\\["\\/bfnrt])+"'
_PLAIN_NAME = r'[^,\[\]"\x00-\x20]([^,\[\]"\x00-\x1f]*[^,\[\]"\x00-\x20])?'


def _list_of(item: str) -> str:
    return rf"{_WS}{item}({_WS},{_WS}{item})*{_WS}"


NUMBER_LIST = rf"^({_WS}\[{_list_of(_NUMBER)}\]{_WS}|{_list_of(_NUMBER)})$"
NAME_LIST = rf"^({_WS}\[{_list_of(_JSON_NAME)}\]{_WS}|{_list_of(_PLAIN_NAME)})$"
_NUMBER_LIST, _NAME_LIST = re.compile(NUMBER_LIST), re.compile(NAME_LIST)


def _items(raw: str, field: str, what: str, example: str) -> list[object]:
    """A vector form field's items: a JSON array, or values separated by commas. The detail
    of a refusal says what was expected, with an example (never an expression)."""
    form = _NUMBER_LIST if what == "numbers" else _NAME_LIST
    if form.fullmatch(raw) is None:
        raise InvalidParameter(
            f"{field} must be {what} separated by commas or a JSON array of them, e.g. {example}",
            field=field,
        )
    text = raw.strip(" \t\n\r")
    if text.startswith("["):
        value = json.loads(text)  # the expression admits JSON arrays only
        assert isinstance(value, list)
        return value
    return [part.strip(" \t\n\r") for part in text.split(",")]


def parse_json_vector(raw: str | None, field: str) -> list[float] | None:
    """An optional vector of finite numbers sent as a form field: a JSON array ([1, 2.5]) or
    numbers separated by commas (1,2.5)."""
    if raw is None or raw == "":
        return None
    out: list[float] = []
    for item in _items(raw, field, "numbers", "0,0,1.5 or [0, 0, 1.5]"):
        item = float(item) if isinstance(item, str) else item
        assert isinstance(item, int | float) and not isinstance(item, bool)
        if not math.isfinite(item):
            raise InvalidParameter(f"{field} must hold only finite numbers", field=field)
        out.append(float(item))
    return out


def parse_json_names(raw: str | None, field: str = "columns") -> list[str] | None:
    """An optional list of column names: a JSON array of strings (["x", "y"]) or names
    separated by commas (x,y; surrounding blanks are trimmed)."""
    if raw is None or raw == "":
        return None
    value = _items(raw, field, "column names", 'x,y or ["x", "y"]')
    if len(set(value)) != len(value):
        raise InvalidParameter(f"{field} names a column twice", field=field)
    return [str(v) for v in value]


def _refused(exc: ClusteringInputError) -> InvalidParameter:
    return InvalidParameter(str(exc), field=exc.field)


def check_domain_shape(spec: DomainSpec) -> None:
    """What can be checked before the file is read: exactly one kind of bound, within the
    domain limits (privclust.clustering.data.limits, the library's own)."""
    has_ball = spec.radius is not None
    has_box = spec.lower is not None or spec.upper is not None
    if has_ball == has_box:
        raise InvalidParameter(
            "declare the public domain with either `radius` (and optional `center`) or both "
            "`lower` and `upper`; it is never computed from the data",
            field="radius",
        )
    try:
        if has_ball:
            assert spec.radius is not None
            check_radius(spec.radius)
            if spec.center is not None:
                check_ball_centre(spec.center, spec.radius)
            return
        if spec.lower is None or spec.upper is None:
            raise InvalidParameter(
                "lower and upper must be given together",
                field="upper" if spec.upper is None else "lower",
            )
        check_box_bounds(spec.lower, spec.upper)
    except ClusteringInputError as exc:
        raise _refused(exc) from exc


@dataclass(frozen=True)
class ResolvedDomain:
    """A dataset's domain as stored: its kind, the ball its rows lie in (for a box, the ball
    around it) and, for a box, the declared bounds."""

    kind: DomainKind
    center: list[float]
    radius: float
    lower: list[float] | None = None
    upper: list[float] | None = None


def resolve_domain(spec: DomainSpec, n_cols: int) -> ResolvedDomain:
    """The declared domain of a dataset with n_cols columns (after `check_domain_shape`)."""
    if spec.radius is not None:
        center = spec.center if spec.center is not None else [0.0] * n_cols
        if len(center) != n_cols:
            raise InvalidParameter(
                f"center has {len(center)} values but the dataset has {n_cols} columns",
                field="center",
            )
        return ResolvedDomain(DomainKind.BALL, center, float(spec.radius))
    assert spec.lower is not None and spec.upper is not None
    if len(spec.lower) != n_cols:
        raise InvalidParameter(
            f"lower/upper have {len(spec.lower)} values but the dataset has {n_cols} columns",
            field="lower",
        )
    center = [(lo + hi) / 2 for lo, hi in zip(spec.lower, spec.upper, strict=True)]
    radius = math.hypot(*[(hi - lo) for lo, hi in zip(spec.lower, spec.upper, strict=True)]) / 2
    return ResolvedDomain(DomainKind.BOX, center, radius, list(spec.lower), list(spec.upper))


class DomainClip:
    """Clips rows into a declared domain before they are stored (a storage `RowClip`).

    `start` resolves the domain for the dataset's width (InvalidParameter if it does not fit:
    nothing is stored yet); each block is then clipped in place: with a box, first into the box,
    column by column, then (box or ball) x <- c + (x - c) * min(1, R / ||x - c||), the radial
    clip of the clustering library's `clip_into_ball`, which cannot overflow for any finite row,
    a hair inside the sphere. Rows inside are untouched. Nothing is counted: how many rows were
    clipped is never recorded. (The clustering code clips again in centred coordinates; that
    clip is the one its sensitivities rely on.)
    """

    def __init__(self, spec: DomainSpec) -> None:
        self.spec = spec
        self.domain: ResolvedDomain | None = None

    def start(self, n_cols: int) -> None:
        self.domain = resolve_domain(self.spec, n_cols)
        d = self.domain
        self._center = np.asarray(d.center, dtype=np.float64)
        self._box = None
        if d.lower is not None and d.upper is not None:
            self._box = (np.asarray(d.lower, dtype="<f8"), np.asarray(d.upper, dtype="<f8"))

    def __call__(self, block: npt.NDArray[np.float64]) -> None:
        assert self.domain is not None, "start() first"
        if self._box is not None:
            lower, upper = self._box
            if ((block < lower) | (block > upper)).any():
                np.clip(block, lower, upper, out=block)
        clip_into_ball(block, self._center, self.domain.radius)


def is_box(dataset: Dataset) -> bool:
    """Whether a dataset's jobs cluster in the scaled space (declared per-column bounds)."""
    return (
        dataset.domain_kind == DomainKind.BOX
        and dataset.lower is not None
        and dataset.upper is not None
    )


def run_domain(dataset: Dataset) -> dict[str, Any]:
    """The library's domain keywords for a dataset's job, summaries and labels: `lower` and
    `upper` for a box (clustered in the scaled space), else `radius` and `center`."""
    if is_box(dataset):
        return {
            "lower": np.asarray(dataset.lower, dtype=np.float64),
            "upper": np.asarray(dataset.upper, dtype=np.float64),
        }
    return {"radius": dataset.radius, "center": np.asarray(dataset.center, dtype=np.float64)}


def accuracy_space(dataset: Dataset) -> Space:
    """The space a dataset's jobs cluster in, as the accuracy model reads it."""
    if is_box(dataset):
        return Space.box(Box.of(dataset.lower, dataset.upper))
    return Space.ball(dataset.radius, dataset.n_cols)


def loss_space(dataset: Dataset) -> str:
    """Where a dataset's private losses are measured: "scaled" (each column on [0, 1] by its
    declared bounds) for a box, "original" (the columns' own units) for a ball."""
    return SCALED_SPACE if is_box(dataset) else ORIGINAL_SPACE

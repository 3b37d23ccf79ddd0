"""The declared domain: its bounds (422 naming the field) and clipping rows into it as they are
stored."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from privclust.clustering import prepare_rows

from app.datasets.domain import DomainClip, DomainSpec, check_domain_shape, resolve_domain
from app.datasets.storage import NpyRowsWriter
from app.kit.errors import InvalidParameter


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        # The pathological domain: centring a row near +1.5e308 on it overflows.
        (DomainSpec(radius=1.0, center=[-1e308, 0.0]), "center"),
        (DomainSpec(radius=1e90, center=[1e100, 0.0]), "center"),
        (DomainSpec(radius=1e100, center=[0.0, -1e99]), "center"),
        (DomainSpec(radius=1.1e100), "radius"),
        (DomainSpec(radius=1e-101), "radius"),
        (DomainSpec(radius=float("inf")), "radius"),
        (DomainSpec(lower=[-1.1e100, 0.0], upper=[0.0, 1.0]), "lower"),
        (DomainSpec(lower=[0.0, 0.0], upper=[1.0, 1e101]), "upper"),
        (DomainSpec(lower=[0.0, 0.0], upper=[1.0, float("inf")]), "upper"),
    ],
)
def test_domains_that_could_overflow_are_refused_naming_the_field(
    spec: DomainSpec, field: str
) -> None:
    with pytest.raises(InvalidParameter) as caught:
        check_domain_shape(spec)
    assert caught.value.field == field


def test_a_box_narrower_than_the_smallest_radius_is_refused() -> None:
    # Refused before the file is read, by the library's own limits.
    spec = DomainSpec(lower=[0.0, 0.0], upper=[1e-101, 0.0])
    with pytest.raises(InvalidParameter) as caught:
        check_domain_shape(spec)
    assert caught.value.field == "upper"


@pytest.mark.parametrize(
    "spec",
    [
        DomainSpec(radius=1e100),
        DomainSpec(radius=1e-100),
        DomainSpec(radius=5e99, center=[-5e99, 5e99]),
        DomainSpec(lower=[-1e100, -1e100], upper=[1e100, 1e100]),
    ],
)
def test_domains_at_the_limits_are_accepted(spec: DomainSpec) -> None:
    check_domain_shape(spec)
    domain = resolve_domain(spec, 2)
    assert np.isfinite(domain.center).all() and np.isfinite(domain.radius)
    assert (domain.lower is None) == (spec.lower is None)


def _stored(tmp_path: Path, rows: np.ndarray, spec: DomainSpec, block_rows: int = 1000) -> Path:
    """`rows` written as a dataset's rows are, in blocks, clipped into `spec` on the way."""
    writer = NpyRowsWriter(tmp_path, "m", clip=DomainClip(spec))
    writer.start(rows.shape[1])
    for start in range(0, len(rows), block_rows):
        writer.append(np.array(rows[start : start + block_rows], dtype=np.float64))
    writer.commit()
    return writer.path


def test_extreme_rows_are_clipped_so_a_job_cannot_fail_on_them(tmp_path: Path) -> None:
    center, radius = [-5e99, 0.0], 5e99  # the widest ball allowed around this centre
    rows = np.array(
        [[1.5e308, 0.0], [-1.7e308, 1.7e308], [1.7e308, -1.7e308], [-5e99, 1.0], [0.0, 0.0]]
    )
    stored = np.load(_stored(tmp_path, rows, DomainSpec(radius=radius, center=center)))
    assert np.isfinite(stored).all()
    assert np.array_equal(stored[3], rows[3])  # inside: untouched
    # The clustering code's own centring and clipping now succeed on every row.
    centred, _ = prepare_rows(stored, radius, np.asarray(center))
    assert np.isfinite(centred).all()
    assert (np.linalg.norm(centred, axis=1) <= radius).all()


def test_clipping_in_blocks_moves_outside_rows_onto_the_ball_and_leaves_the_rest(
    tmp_path: Path,
) -> None:
    rng = np.random.default_rng(5)
    center, radius = np.array([10.0, -3.0, 0.5]), 2.0
    rows = center + rng.normal(0.0, 1.0, (100, 3)) * rng.choice([0.1, 1.0, 1e6], (100, 1))
    spec = DomainSpec(radius=radius, center=list(center))
    stored = np.load(_stored(tmp_path, rows, spec, block_rows=7))
    distance = np.linalg.norm(rows - center, axis=1)
    inside = distance <= radius
    assert inside.any() and (~inside).any()
    assert np.array_equal(stored[inside], rows[inside])
    new_distance = np.linalg.norm(stored - center, axis=1)
    assert (new_distance <= radius * (1 + 1e-12)).all()
    # An outside row keeps its direction from the centre and lands on the sphere.
    direction = (rows[~inside] - center) / distance[~inside, None]
    np.testing.assert_allclose(stored[~inside], center + radius * direction, rtol=1e-9)

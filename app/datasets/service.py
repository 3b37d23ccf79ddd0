"""Datasets: validated upload into storage, the declared public domain, deletion of rows."""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

import numpy as np
from sqlalchemy.orm import Session

from app.datasets import repository as repo
from app.kit import repository as kit_repo
from app.kit.db.base import utcnow
from app.kit.errors import InvalidParameter, NotFound
from app.ledger import service as ledger
from app.models import Dataset
from privclust.privacy import budget as bmath
from privclust.privacy import gdp, noise

Relation = Literal["add-remove", "replace-one"]

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
# Values per block when clipping a stored matrix (8 MiB of float64): memory stays bounded.
_CLIP_BLOCK_VALUES = 1 << 20


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


def clip_into_domain(path: Path, center: Sequence[float], radius: float) -> None:
    """Clip every row of a stored float64 `.npy` matrix into the ball around `center`, in place.

    x <- c + (x - c) * min(1, R / ||x - c||) (the radial clip of the clustering library's
    `clip_into_ball`, which cannot overflow for any finite row), a hair inside the sphere. The
    file is read and rewritten in blocks through one
    reusable buffer (not memory-mapped, so the process's memory stays at one block whatever the
    file's size), and only blocks that change are written back. Nothing is counted: how many
    rows were clipped is never recorded. (The clustering code clips again in centred
    coordinates; that clip is the one its sensitivities rely on.)
    """
    from privclust.clustering.params import clip_into_ball  # heavy (scikit-learn); uploads only

    c = np.asarray(center, dtype=np.float64)
    changed_any = False
    with open(path, "r+b") as fh:
        n_rows, n_cols, data_start = _npy_matrix_layout(fh)
        block_rows = max(1, _CLIP_BLOCK_VALUES // n_cols)
        buffer = np.empty((block_rows, n_cols), dtype="<f8")
        row_bytes = n_cols * 8
        for start in range(0, n_rows, block_rows):
            m = min(block_rows, n_rows - start)
            block, offset = buffer[:m], data_start + start * row_bytes
            fh.seek(offset)
            if fh.readinto(block.data.cast("B")) != m * row_bytes:
                raise ValueError(f"{path} is shorter than its header says")
            if clip_into_ball(block, c, radius):
                fh.seek(offset)
                fh.write(block.data.cast("B"))
                changed_any = True
        if changed_any:
            fh.flush()
            # The dataset row will point at this file: make the clipped rows durable first.
            os.fsync(fh.fileno())


def _npy_matrix_layout(fh: BinaryIO) -> tuple[int, int, int]:
    """(rows, columns, byte offset of the data) of a C-ordered little-endian float64 .npy."""
    version = np.lib.format.read_magic(fh)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
    else:
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
    if dtype != np.dtype("<f8") or fortran or len(shape) != 2:
        raise ValueError("not a matrix written by ingest_file")
    return int(shape[0]), int(shape[1]), fh.tell()


@dataclass(frozen=True)
class PlanningCount:
    """The row count a dataset's jobs may use, and the neighbouring relation that goes with it."""

    n_rows: int
    relation: Relation


def planning_count(dataset: Dataset) -> PlanningCount:
    """The one place that decides which row count jobs plan with (API and worker alike).

    By default neighbouring datasets differ by adding or removing a row, so the exact N is
    private and jobs use the released N~ (at least 1: a post-processing of N~). When the owner
    declared the count public, N itself is used and jobs are calibrated to replace-one
    neighbours, the relation under which a public N is consistent with the guarantee.
    """
    if dataset.count_public:
        return PlanningCount(n_rows=dataset.n_rows, relation="replace-one")
    return PlanningCount(n_rows=max(dataset.n_rows_dp, 1), relation="add-remove")


def dataset_warnings(dataset: Dataset) -> list[str]:
    """Advice about a dataset's parameters, computed from public values only (N~, delta)."""
    warnings = []
    if dataset.delta > 1.0 / max(dataset.n_rows_dp, 1):
        warnings.append(
            f"delta ({dataset.delta:g}) is above 1/n_rows_dp (n_rows_dp = {dataset.n_rows_dp}); "
            "a delta that large allows mechanisms that publish a few rows outright. The usual "
            "rule of thumb is delta well below 1/n, e.g. 1/n^1.1."
        )
    return warnings


def check_count_options(count_mu: float | None, count_public: bool, mu_cap: float) -> float | None:
    """The GDP cost of the upload's noisy row count: None when the owner declared N public.

    Default: `noise.default_count_mu(mu_cap)`. An owner's `count_mu` must be finite, > 0 and
    strictly below mu_cap (422 `invalid-parameter` naming `count_mu`).
    """
    if count_public:
        if count_mu is not None:
            raise InvalidParameter(
                "count_mu is the cost of the noisy row count; with count_public=true no count is "
                "released, so give one or the other",
                field="count_mu",
            )
        return None
    if count_mu is None:
        chosen, field = noise.default_count_mu(mu_cap), "epsilon"
    else:
        if not math.isfinite(count_mu) or count_mu <= 0.0:
            raise InvalidParameter("count_mu must be a finite number > 0", field="count_mu")
        if count_mu >= mu_cap:
            raise InvalidParameter(
                f"count_mu must be below the dataset's mu_cap ({mu_cap:.6g}), or nothing would "
                "be left for jobs",
                field="count_mu",
            )
        chosen, field = float(count_mu), "count_mu"
    if chosen < 1.0 / noise.MAX_NOISE_STD:
        raise InvalidParameter(
            f"the row count's cost (count_mu={chosen:.3g}) is too small to release: its noise "
            f"would exceed {noise.MAX_NOISE_STD:g}",
            field=field,
        )
    return chosen


def check_budget(epsilon: float, delta: float) -> float:
    """Validate a dataset cap and return mu_cap (errors name the field)."""
    try:
        return bmath.cap_from_epsilon_delta(epsilon, delta)
    except gdp.PrivacyParameterError as exc:
        raise InvalidParameter(str(exc), field=exc.field or "epsilon") from exc


def create_dataset(
    session: Session,
    *,
    tenant: str,
    actor: uuid.UUID,
    name: str,
    src: BinaryIO,
    filename: str | None,
    content_type: str | None,
    storage_dir: Path,
    epsilon: float,
    delta: float,
    domain: DomainSpec,
    columns: list[str] | None,
    max_bytes: int,
    count_mu: float | None = None,
    count_public: bool = False,
) -> Dataset:
    """Check everything, store the matrix, release the noisy row count, and record the dataset
    with its budget's first entries (the cap, then the count's cost).

    The row count N~ = N + round(N(0, 1/count_mu^2)) is released once, here, unless the owner
    declares N public (`count_public`). On any error nothing is left behind: no file, no row,
    no ledger entry.
    """
    from app.datasets.ingest import ingest_file  # heavy (pyarrow); only uploads need it

    name = name.strip()
    if not name or len(name) > 200:
        raise InvalidParameter("name must be 1 to 200 characters", field="name")
    mu_cap = check_budget(epsilon, delta)
    count_cost = check_count_options(count_mu, count_public, mu_cap)
    # The budget the new dataset would show, before a byte is stored: a cap the budget
    # arithmetic cannot represent is refused here, not after the dataset exists.
    ledger.representable_view(
        epsilon,
        delta,
        ledger.LedgerState(
            mu_cap=mu_cap, dataset_releases=[] if count_cost is None else [count_cost]
        ),
    )
    check_domain_shape(domain)
    dataset_id = uuid.uuid4()
    storage_dir.mkdir(parents=True, exist_ok=True)
    matrix = ingest_file(
        src,
        filename=filename,
        content_type=content_type,
        dest_dir=storage_dir,
        columns=columns,
        max_bytes=max_bytes,
        name=dataset_id.hex,
    )
    try:
        center, radius = resolve_domain(domain, matrix.n_cols)
        clip_into_domain(matrix.path, center, radius)
        if count_cost is None:
            n_rows_dp = matrix.n_rows
        else:
            # Stored floored at 0 (post-processing); jobs plan with at least 1.
            n_rows_dp = max(noise.release_count(matrix.n_rows, count_cost), 0)
        dataset = Dataset(
            id=dataset_id,
            tenant=tenant,
            name=name,
            n_rows=matrix.n_rows,
            n_rows_dp=n_rows_dp,
            count_public=count_public,
            count_mu=count_cost,
            n_cols=matrix.n_cols,
            columns=list(matrix.columns),
            center=center,
            radius=radius,
            epsilon=epsilon,
            delta=delta,
            mu_cap=mu_cap,
            storage_path=str(matrix.path),
            created_by=actor,
        )
        kit_repo.add(session, dataset)
        ledger.open_dataset_budget(session, dataset, actor)
    except BaseException:
        matrix.path.unlink(missing_ok=True)
        raise
    return dataset


def stored_file_names(session: Session) -> set[str]:
    """The names of the files that datasets (deleted ones included) were stored in."""
    return {Path(p).name for p in repo.dataset_storage_paths(session)}


def get_dataset(session: Session, dataset_id: uuid.UUID, tenant: str) -> Dataset:
    dataset = repo.dataset_for_tenant(session, dataset_id, tenant)
    if dataset is None:
        raise NotFound("no such dataset", code="dataset-not-found")
    return dataset


def delete_rows(session: Session, dataset: Dataset) -> Path | None:
    """Mark the stored rows deleted; metadata, ledger and released results stay for the audit
    trail. Returns the file to remove with `remove_stored_rows` once this is committed (so a
    request that fails before its commit leaves the rows where the database says they are)."""
    path = Path(dataset.storage_path) if dataset.storage_path else None
    dataset.storage_path = None
    if dataset.deleted_at is None:
        dataset.deleted_at = utcnow()
    session.flush()
    return path


def remove_stored_rows(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)

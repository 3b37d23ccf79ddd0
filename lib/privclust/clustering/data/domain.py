"""The declared domain, a ball of radius R around a centre c: the rows a run reads, validated,
clipped into the ball and centred, and points (centres, mutants) kept inside it.

The domain is the data owner's declaration, never computed from the rows; every row is clipped
into it (x <- c + (x - c) min(1, R / ||x - c||)), which bounds what one row can change.
"""

from __future__ import annotations

import mmap
from typing import TYPE_CHECKING, Any

import numpy as np

from privclust.clustering.data.limits import domain_centre
from privclust.clustering.errors import ClusteringInputError, check_positive, data_shape

if TYPE_CHECKING:
    from privclust.clustering.data.scaling import Box

_SHRINK = 1.0 - 4.0 * float(np.finfo(np.float64).eps)
# A float32 working copy is used only for radii in this range (a public choice): beyond it a
# clipped row could overflow float32 (max 3.4e38) or lose its digits below float32's normal
# range (1.2e-38), while the declared domain allows radii from 1e-100 to 1e100.
FLOAT32_RADII = (1e-30, 1e30)
# Values per block when reading the rows (bounds the float64 copy of a block).
_BLOCK_VALUES = 1 << 20


def clip_into_ball(block: np.ndarray, c: np.ndarray, radius: float) -> bool:
    """Clip the rows of `block` (original coordinates, any finite values) into the ball, in place:
    x <- c + (x - c) * min(1, R / ||x - c||), a hair inside the sphere. Whether any row changed.

    Total: the difference is formed at half scale (x/2 - c/2 cannot overflow), and a row found
    outside is divided by its largest coordinate before its norm is taken, so nothing overflows
    or vanishes for any finite row, centre and radius; rows inside are not touched at all.
    """
    with np.errstate(over="ignore"):  # a far-out row's scaled norm may be inf: still outside
        half = block * 0.5 - c * 0.5
        scaled = half / (radius * 0.5)
        outside = np.sqrt(np.einsum("ij,ij->i", scaled, scaled)) > 1.0
    if not outside.any():
        return False
    u = half[outside]
    u /= np.abs(u).max(axis=1)[:, None]
    factor = radius / np.sqrt(np.einsum("ij,ij->i", u, u)) * _SHRINK
    block[outside] = u * factor[:, None] + c
    return True


def project_into_ball(points: np.ndarray, radius: float) -> np.ndarray:
    """Rescale (in place) every row whose norm exceeds `radius` onto the sphere of that radius."""
    norms = np.sqrt(np.einsum("ij,ij->i", points, points))
    outside = norms > radius
    if outside.any():
        points[outside] *= (radius / norms[outside])[:, None]
    return points


def prepare_rows(
    X: object,
    radius: object,
    center: object | None,
    *,
    dtype: type[np.floating[Any]] = np.float64,
    box: Box | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(rows centred on c and clipped into the ball of radius R, c): the rows as `dtype`
    (clipped in float64 first; float64 whatever `dtype` when R is outside FLOAT32_RADII, so
    that no row in the domain overflows or underflows), c as float64.

    X is read in blocks and never written (it may be a read-only memmap); the result is the one
    N x d working copy. Rows farther than R from c are clipped radially onto the sphere
    (`clip_into_ball`, which cannot overflow), then centred, a hair inside so that rounding can
    never leave a norm above R (the sensitivity of HDPE's noisy sums). The only data-dependent
    error is a non-finite value, which an ingested dataset never has.

    With a `box` (privclust.clustering.data.scaling), each block is first clipped into the box and
    mapped into the scaled space, where `radius` and `center` are the ball around the unit box.
    """
    n_rows, n_cols = data_shape(X)
    source = X if isinstance(X, np.ndarray) else np.asarray(X)
    if source.dtype == np.bool_ or not (
        np.issubdtype(source.dtype, np.integer) or np.issubdtype(source.dtype, np.floating)
    ):
        raise ClusteringInputError("X", f"X must hold real numbers, got dtype {source.dtype}")
    R = check_positive("radius", radius)
    c = domain_centre(center, n_cols, R)
    if not FLOAT32_RADII[0] <= R <= FLOAT32_RADII[1]:
        dtype = np.float64
    out = np.empty((n_rows, n_cols), dtype=dtype)
    block_rows = max(1, _BLOCK_VALUES // n_cols)
    for start in range(0, n_rows, block_rows):
        block = np.array(source[start : start + block_rows], dtype=np.float64)
        release_pages(source, start, start + block_rows)
        if box is not None:
            _check_finite(block, start)
            block = box.to_scaled(block)
        out[start : start + block_rows] = _centred_in_ball(block, start, c, R)
    return out, c


def _centred_in_ball(block: np.ndarray, start: int, c: np.ndarray, radius: float) -> np.ndarray:
    """A float64 block of rows (a copy, changed in place; its first row is row `start` of X)
    clipped into the ball and centred on c."""
    _check_finite(block, start)
    clip_into_ball(block, c, radius)
    block -= c  # finite: every row is now within R of c, and c +- R is finite
    # Centring rounds at the scale of |c|: put any row it left a hair outside back in.
    scaled = block / radius
    norms = np.sqrt(np.einsum("ij,ij->i", scaled, scaled)) * radius
    outside = norms > radius
    if outside.any():
        block[outside] *= (radius / norms[outside] * _SHRINK)[:, None]
    return block


def _check_finite(block: np.ndarray, start: int) -> None:
    if not np.isfinite(block).all():
        row, col = np.argwhere(~np.isfinite(block))[0]
        raise ClusteringInputError(
            "X", f"X has a non-finite value at row {start + row}, column {col}"
        )


def release_pages(source: np.ndarray, start: int, stop: int) -> None:
    """Drop rows start..stop of a memory-mapped `source` from this process's resident set.

    Reading a memory-mapped dataset maps its pages into the process, where they count as
    resident until unmapped; a job reads each row once into its working copy, so dropping the
    pages behind it keeps the peak resident size near the working copy alone (the kernel keeps
    them in its page cache). A no-op for anything that is not a read-only file mapping."""
    if not isinstance(source, np.memmap) or source.flags.writeable:
        return
    mapping = getattr(source, "_mmap", None)
    if mapping is None or not hasattr(mapping, "madvise") or not source.flags.c_contiguous:
        return
    row_bytes = source.strides[0]
    base = np.frombuffer(mapping, dtype=np.uint8).ctypes.data
    first = source.ctypes.data - base + start * row_bytes
    last = source.ctypes.data - base + min(stop, source.shape[0]) * row_bytes
    page = mmap.PAGESIZE
    first = (first + page - 1) // page * page  # whole pages only: never a neighbour's row
    last = last // page * page
    if last > first:
        mapping.madvise(mmap.MADV_DONTNEED, first, last - first)

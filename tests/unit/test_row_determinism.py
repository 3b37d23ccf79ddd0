"""Each row's projection (HDPE) and SimHash code (LSH coreset) is a function of that row alone.

Differential privacy counts on it: a neighbouring dataset (one row more or less) may change
that row's contribution only. A BLAS product would not do: its kernel and summation order
depend on the block's shape and a row's place in it, so other rows' low bits (and with them a
vote or a hash bit near a tie) could change. These tests compute the same rows alone, in blocks
of several sizes at every position, in the whole set and with a row removed, and compare bits.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from privclust.clustering.evolution.kernels import ordered_products
from privclust.clustering.mechanisms.lsh_tree import hash_codes
from privclust.clustering.mechanisms.projection import project_rows

# The modules (the package exports functions of the same names).
projection = importlib.import_module("privclust.clustering.mechanisms.projection")
lsh_coreset = importlib.import_module("privclust.clustering.mechanisms.lsh_tree")

BLOCK_SIZES = (2, 3, 17)


def _sequential(rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """rows @ weights as a plain numpy chain over the coordinates, in order: each product and
    each sum rounded on its own (numpy's elementwise multiply and add are)."""
    wide = rows.astype(np.float64)
    acc = np.multiply(wide[:, :1], weights[0])
    for k in range(1, rows.shape[1]):
        acc = np.add(acc, np.multiply(wide[:, k : k + 1], weights[k]))
    return acc


def _bits(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)


def _blockings(X: np.ndarray, i: int) -> Iterator[tuple[np.ndarray, int]]:
    """(block of rows holding row i, i's index in it): alone, then every block of each size
    in BLOCK_SIZES that holds it."""
    yield X[i : i + 1], 0
    for size in BLOCK_SIZES:
        for offset in range(size):
            start = i - offset
            if start >= 0 and start + size <= len(X):
                yield X[start : start + size], offset


def _rows_are_their_own(
    function: Callable[[np.ndarray], np.ndarray],
    X: np.ndarray,
    rows: np.ndarray,
    as_bits: Callable[[np.ndarray], np.ndarray],
) -> None:
    full = as_bits(function(X))
    for i in rows:
        for block, at in _blockings(X, int(i)):
            assert np.array_equal(as_bits(function(block))[at], full[i]), (i, len(block), at)
    # A neighbouring dataset: removing a row leaves every other row's result as it was.
    for removed in (0, len(X) // 2, len(X) - 1):
        assert np.array_equal(
            as_bits(function(np.delete(X, removed, axis=0))), np.delete(full, removed, axis=0)
        )


def _near_hyperplanes(rng: np.random.Generator, normals: np.ndarray, n: int) -> np.ndarray:
    """Rows within rounding of one of the hyperplanes <x, normal_j> = 0: x minus its component
    along normal_j, plus an offset of 0 or +-1e-18 .. 1e-15 along it."""
    x = rng.normal(size=(n, normals.shape[1])) * 0.3
    normal = normals[np.arange(n) % len(normals)]
    unit = normal / np.linalg.norm(normal, axis=1, keepdims=True)
    offsets = rng.choice([0.0, 1e-18, -1e-18, 1e-16, -1e-16, 1e-15, -1e-15], size=(n, 1))
    return x - np.einsum("ij,ij->i", x, unit)[:, None] * unit + offsets * unit


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_ordered_products_is_a_sequential_sum_bit_for_bit(dtype: type[np.floating]) -> None:
    rng = np.random.default_rng(80)
    rows = rng.normal(size=(50, 37)) * 10.0 ** rng.integers(-4, 5, size=(50, 1))
    rows = rows.astype(dtype)
    weights = rng.normal(size=(37, 21))
    out = np.empty((50, 21))
    ordered_products(rows, weights, out)
    expected = _sequential(rows, weights)
    assert np.array_equal(_bits(out), _bits(expected))
    # BLAS rounds differently somewhere (else this test would not tell the two apart).
    assert not np.array_equal(_bits(rows.astype(np.float64) @ weights), _bits(expected))
    # Strided (non-contiguous, Fortran-ordered) rows give the same bits.
    fortran = np.asfortranarray(np.repeat(rows, 2, axis=0)[::2])
    ordered_products(fortran, weights, out)
    assert np.array_equal(_bits(out), _bits(expected))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(("n_cols", "p"), [(64, 16), (7, 16), (33, 5)])
def test_a_rows_projection_does_not_depend_on_the_other_rows(
    dtype: type[np.floating], n_cols: int, p: int
) -> None:
    rng = np.random.default_rng(81 + n_cols)
    X = rng.normal(size=(200, n_cols)).astype(dtype)
    matrix = rng.standard_normal(size=(p, n_cols))
    projected = project_rows(X, matrix)
    assert projected.dtype == np.float64 and projected.shape == (200, p)
    expected = _sequential(X, np.ascontiguousarray(matrix.T / np.sqrt(p)))
    assert np.array_equal(_bits(projected), _bits(expected))
    _rows_are_their_own(
        lambda rows: project_rows(rows, matrix), X, rng.choice(200, 25, replace=False), _bits
    )


def test_projections_do_not_depend_on_project_rows_own_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(82)
    X = rng.normal(size=(100, 64))
    matrix = rng.standard_normal(size=(16, 64))
    whole = project_rows(X, matrix)
    monkeypatch.setattr(projection, "_BLOCK_ELEMENTS", 64 * 7)  # blocks of 7 rows, the last of 2
    assert np.array_equal(_bits(project_rows(X, matrix)), _bits(whole))


def test_a_rows_code_does_not_depend_on_the_other_rows_even_on_a_hyperplane() -> None:
    rng = np.random.default_rng(83)
    n_bits, n_cols = 21, 16
    normals = rng.standard_normal(size=(n_bits, n_cols))
    X = np.concatenate([_near_hyperplanes(rng, normals, 600), rng.normal(size=(100, n_cols)) * 0.3])
    X = X[rng.permutation(len(X))]
    products = _sequential(X, np.ascontiguousarray(normals.T))
    # The constructed rows are within rounding of a hyperplane (of both signs and exactly on
    # one): the case where a differently rounded product flips a bit.
    near = np.abs(products).min(axis=1) < 1e-14
    assert near.sum() >= 500
    codes = hash_codes(X, normals)
    weights = np.left_shift(np.int64(1), np.arange(n_bits - 1, -1, -1, dtype=np.int64))
    assert np.array_equal(codes, (products >= 0.0) @ weights)
    _rows_are_their_own(
        lambda rows: hash_codes(rows, normals), X, np.flatnonzero(near)[:150], np.asarray
    )


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_codes_do_not_depend_on_hash_codes_own_blocks(
    monkeypatch: pytest.MonkeyPatch, dtype: type[np.floating]
) -> None:
    rng = np.random.default_rng(84)
    normals = rng.standard_normal(size=(21, 16))
    X = _near_hyperplanes(rng, normals, 100).astype(dtype)
    _rows_are_their_own(lambda rows: hash_codes(rows, normals), X, np.arange(0, 100, 9), np.asarray)
    whole = hash_codes(X, normals)
    monkeypatch.setattr(lsh_coreset, "_BLOCK_ELEMENTS", 21 * 7)  # blocks of 7 rows, the last 2
    assert np.array_equal(hash_codes(X, normals), whole)


def test_warm_up_compiles_every_kernel() -> None:
    # The worker calls warm_up() before it forks a process per job: a kernel it missed would
    # be compiled (or loaded) again in every job.
    from privclust.clustering.evolution import kernels

    found = [value for value in vars(kernels).values() if isinstance(value, kernels._Kernel)]
    assert len(found) >= 4
    for kernel in found:  # as in a fresh worker (earlier tests may have compiled some)
        kernel._compiled = None
    kernels.warm_up()
    assert all(kernel._compiled is not None for kernel in found)

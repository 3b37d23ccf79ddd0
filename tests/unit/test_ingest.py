"""Unit tests of dataset ingestion: formats, exact error locations, limits and cleanup."""

from __future__ import annotations

import io
import tempfile
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.datasets.ingest import IngestedMatrix, ingest_file, ingest_rows
from app.datasets.ingest.early import EarlyIngest
from app.datasets.ingest.multipart import StreamedFile
from app.datasets.ingest.reader import RowSink
from app.datasets.ingest.spool import GrowingSpool, SpoolReader, SpoolStopped
from app.datasets.storage import open_rows as open_matrix
from app.kit.errors import UploadError


def ingest(data: bytes, dest: Path, **kwargs: Any) -> IngestedMatrix:
    kwargs.setdefault("filename", None)
    kwargs.setdefault("content_type", None)
    return ingest_file(io.BytesIO(data), dest_dir=dest, **kwargs)


def rejected(data: bytes, dest: Path, **kwargs: Any) -> UploadError:
    """Ingest `data`, expecting an UploadError, and check that nothing was left behind."""
    with pytest.raises(UploadError) as caught:
        ingest(data, dest, **kwargs)
    assert list(dest.iterdir()) == []
    return caught.value


def only_output(dest: Path, result: IngestedMatrix) -> np.ndarray:
    assert list(dest.iterdir()) == [result.path]
    return open_matrix(result.path)


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def parquet_bytes(table: pa.Table, row_group_size: int | None = None) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=row_group_size)
    return buffer.getvalue()


class _Unseekable(io.RawIOBase):
    """A stream that can only be read forward, like a socket."""

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self._inner = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readinto(self, buffer: Any) -> int:
        return self._inner.readinto(buffer)


# ------------------------------------------------------------------------------------ CSV


def test_csv_values_round_trip_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    expected = rng.normal(0, 1e3, size=(50, 3))
    expected[0] = [1e300, -5e-324, 0.0]  # extremes are stored, not clipped
    expected[1] = [12, -7, 3]
    lines = ["alpha,beta,gamma"] + [",".join(repr(float(v)) for v in row) for row in expected]
    result = ingest("\n".join(lines).encode() + b"\n", tmp_path, name="ds1")

    assert result.path == tmp_path / "ds1.npy"
    assert (result.n_rows, result.n_cols, result.columns) == (50, 3, ["alpha", "beta", "gamma"])
    matrix = only_output(tmp_path, result)
    assert matrix.dtype == np.float64 and matrix.shape == (50, 3)
    np.testing.assert_array_equal(matrix, expected)
    with pytest.raises(ValueError):
        matrix[0, 0] = 1.0  # the worker gets a read-only map


def test_csv_number_notations(tmp_path: Path) -> None:
    data = b'a,b,c\n1,-2.5,1e3\n+4,.5,-1.25E-2\n" 7 ","8.",0\n'
    matrix = only_output(tmp_path, ingest(data, tmp_path))
    np.testing.assert_array_equal(matrix, [[1, -2.5, 1000], [4, 0.5, -0.0125], [7, 8, 0]])


@pytest.mark.parametrize(
    "data",
    [
        b"a,b\n1,2\n3,4\n",
        b"a,b\n1,2\n3,4",  # no final newline
        b"\xef\xbb\xbfa,b\n1,2\n3,4\n",  # UTF-8 BOM
        b"a,b\r\n1,2\r\n3,4\r\n",  # CRLF
        b"a,b\r1,2\r3,4\r",  # CR only
        b'"a","b"\n"1","2"\n3,"4"\n',  # quoted names and values
        b"a,b\n1,2\n3,4\n\n\n",  # blank trailing lines
        b"\xef\xbb\xbfa,b\r\n1,2\r\n3,4\r\n\r\n\r\n",
    ],
    ids=["plain", "no-final-newline", "bom", "crlf", "cr", "quoted", "blank-tail", "all"],
)
def test_csv_dialect_variants_give_the_same_matrix(tmp_path: Path, data: bytes) -> None:
    result = ingest(data, tmp_path)
    assert result.columns == ["a", "b"]
    np.testing.assert_array_equal(only_output(tmp_path, result), [[1, 2], [3, 4]])


def test_csv_quoted_header_with_comma_and_unicode(tmp_path: Path) -> None:
    result = ingest('"size, cm",größe\n1,2\n'.encode(), tmp_path)
    assert result.columns == ["size, cm", "größe"]


@pytest.mark.parametrize(
    ("data", "code", "row", "column"),
    [
        (b"a,b\n1,2\n3,abc\n", "non-numeric-value", 2, "b"),
        (b"a,b\n1,2\n,4\n", "non-numeric-value", 2, "a"),
        (b'a,b\n1,""\n', "non-numeric-value", 1, "b"),
        (b"a,b\n1,1_000\n", "non-numeric-value", 1, "b"),
        (b"a,b\n1,0x10\n", "non-numeric-value", 1, "b"),
        (b"a,b\n1,2\n3,nan\n", "non-finite-value", 2, "b"),
        (b"a,b\nNaN,2\n", "non-finite-value", 1, "a"),
        (b"a,b\n1,2\n3,4\n5,inf\n", "non-finite-value", 3, "b"),
        (b"a,b\n-Infinity,2\n", "non-finite-value", 1, "a"),
        (b'a,b\n1,"-INF"\n', "non-finite-value", 1, "b"),
        (b"a,b\n1,1e999\n", "non-finite-value", 1, "b"),
        (b"a,b\n1,2\n3\n", "ragged-row", 2, "b"),
        (b"a,b,c\n1,2,3\n4,5,6,7\n", "ragged-row", 2, None),
        (b"a,b\n1,2\n\n3,4\n5,x\n", "non-numeric-value", 3, "b"),  # blank lines not counted
        (b"a,b\n1,\xff\xfe\n", "invalid-file", 1, "b"),
        (b'a,b\n1,"2"x\n', "invalid-file", 1, None),
    ],
)
def test_csv_value_errors_name_row_and_column(
    tmp_path: Path, data: bytes, code: str, row: int, column: str | None
) -> None:
    error = rejected(data, tmp_path)
    assert error.code == code and error.status == 400
    assert error.extra.get("row") == row
    assert error.extra.get("column") == column
    assert f"row {row} " in error.detail and "after the header" in error.detail


def test_csv_first_error_in_reading_order_wins(tmp_path: Path) -> None:
    error = rejected(b"a,b,c\n1,2,3\n4,nan,x\n7,8,y\n", tmp_path)
    assert (error.code, error.extra) == ("non-finite-value", {"row": 2, "column": "b"})


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"", "empty-dataset"),
        (b"\n\n", "empty-dataset"),
        (b"a,b\n", "empty-dataset"),
        (b"a,b", "empty-dataset"),
        (b"a,b\r\n\r\n", "empty-dataset"),
        (b"1.5,2\n3,4\n", "invalid-file"),  # no header row
        (b"3,5,0\n3,4,1\n", "invalid-file"),
        (b"a,a\n1,2\n", "invalid-file"),  # duplicate names
        (b"a,\n1,2\n", "invalid-file"),  # unnamed column
        (b"\xff\xfeab\n1\n", "invalid-file"),  # header not UTF-8
        (b'"a,b\n1,2\n', "invalid-file"),  # unterminated quote in the header
        (bytes(range(256)) * 8, "invalid-file"),  # binary garbage
        ("a,b\n1,2\n".encode("utf-16"), "invalid-file"),
        (b"PK\x03\x04rest-of-a-zip", "invalid-file"),
    ],
)
def test_csv_file_level_errors(tmp_path: Path, data: bytes, code: str) -> None:
    error = rejected(data, tmp_path)
    assert error.code == code and error.status == 400


@pytest.mark.parametrize("header", [b"0,1,2", b"1,2,3"])
def test_csv_numbered_header_is_a_header(tmp_path: Path, header: bytes) -> None:
    result = ingest(header + b"\n4,5,6\n", tmp_path)
    assert result.columns == header.decode().split(",") and result.n_rows == 1


def test_csv_duplicate_column_is_named(tmp_path: Path) -> None:
    assert rejected(b"a,b,a\n1,2,3\n", tmp_path).extra == {"column": "a"}


def _large_csv(n_rows: int, bad_row: int | None, bad_value: str) -> bytes:
    """About 25 bytes a row, so a few tens of thousands of rows span several parse blocks."""
    rows = [f"{i}.25,{-i}.5,{i % 97}e-3" for i in range(1, n_rows + 1)]
    if bad_row is not None:
        rows[bad_row - 1] = f"{bad_row}.25,{bad_value},1"
    # Blank lines early on must not shift the row numbers reported later.
    return ("x,y,z\n\n" + "\n".join(rows[:10]) + "\n\n" + "\n".join(rows[10:]) + "\n").encode()


@pytest.mark.parametrize(
    ("bad_value", "code"),
    [("oops", "non-numeric-value"), ("nan", "non-finite-value"), ("", "non-numeric-value")],
)
def test_csv_error_far_into_a_large_file_is_located_exactly(
    tmp_path: Path, bad_value: str, code: str
) -> None:
    data = _large_csv(120_000, bad_row=117_345, bad_value=bad_value)
    assert len(data) > 2 * 2**20  # the error lies past the first 1 MiB parse blocks
    error = rejected(data, tmp_path)
    assert (error.code, error.extra) == (code, {"row": 117_345, "column": "y"})


def test_csv_large_file_round_trips(tmp_path: Path) -> None:
    result = ingest(_large_csv(120_000, None, ""), tmp_path)
    matrix = only_output(tmp_path, result)
    assert matrix.shape == (120_000, 3)
    i = np.arange(1, 120_001)
    np.testing.assert_array_equal(matrix[:, 0], i + 0.25)
    np.testing.assert_array_equal(matrix[:, 1], -(i + 0.5))
    np.testing.assert_array_equal(matrix[:, 2], (i % 97) / 1000)


def test_spooled_upload_file_as_the_api_passes_it(tmp_path: Path) -> None:
    data = _large_csv(60_000, bad_row=59_999, bad_value="?")
    with tempfile.SpooledTemporaryFile(max_size=2**20) as upload:  # rolls over to disk
        upload.write(data)
        upload.seek(0)
        with pytest.raises(UploadError) as caught:
            ingest_file(upload, filename="d.csv", content_type="text/csv", dest_dir=tmp_path)
    assert caught.value.extra == {"row": 59_999, "column": "y"}
    assert list(tmp_path.iterdir()) == []


def test_unseekable_source_still_locates_errors(tmp_path: Path) -> None:
    data = _large_csv(60_000, bad_row=59_999, bad_value="?")
    with pytest.raises(UploadError) as caught:
        ingest_file(
            io.BufferedReader(_Unseekable(data)),
            filename="d.csv",
            content_type="text/csv",
            dest_dir=tmp_path,
        )
    assert caught.value.extra == {"row": 59_999, "column": "y"}
    assert list(tmp_path.iterdir()) == []
    good = ingest_file(
        io.BufferedReader(_Unseekable(b"a\n1\n2\n")),
        filename=None,
        content_type=None,
        dest_dir=tmp_path,
    )
    np.testing.assert_array_equal(open_matrix(good.path), [[1], [2]])


# -------------------------------------------------------------------------- column subsets


def test_columns_subset_selects_and_orders(tmp_path: Path) -> None:
    data = b"a,b,c\n1,2,3\n4,5,6\n"
    result = ingest(data, tmp_path, columns=["c", "a"])
    assert (result.n_cols, result.columns) == (2, ["c", "a"])
    np.testing.assert_array_equal(only_output(tmp_path, result), [[3, 1], [6, 4]])


def test_values_of_dropped_columns_are_not_validated(tmp_path: Path) -> None:
    data = b"id,x,note\nabc,1.5,\ndef,2.5,nan\n"
    result = ingest(data, tmp_path, columns=["x"])
    np.testing.assert_array_equal(only_output(tmp_path, result), [[1.5], [2.5]])


def test_dropped_columns_still_count_for_ragged_rows(tmp_path: Path) -> None:
    error = rejected(b"a,b,c\n1,2,3\n4,5\n", tmp_path, columns=["a"])
    assert (error.code, error.extra) == ("ragged-row", {"row": 2, "column": "c"})


@pytest.mark.parametrize(
    ("columns", "code", "column"),
    [
        (["a", "zz"], "invalid-file", "zz"),
        (["a", "a"], "invalid-file", "a"),
        ([], "empty-dataset", None),
    ],
)
def test_bad_column_selection(
    tmp_path: Path, columns: list[str], code: str, column: str | None
) -> None:
    error = rejected(b"a,b\n1,2\n", tmp_path, columns=columns)
    assert error.code == code and error.extra.get("column") == column
    if column == "zz":
        assert "'zz'" in error.detail and "'a', 'b'" in error.detail


# ----------------------------------------------------------------------------- size limit


def test_max_bytes_exceeded_is_413_and_leaves_nothing(tmp_path: Path) -> None:
    data = _large_csv(5_000, None, "")
    error = rejected(data, tmp_path, max_bytes=len(data) - 1)
    assert (error.code, error.status) == ("too-large", 413)
    assert ingest(data, tmp_path, max_bytes=len(data)).n_rows == 5_000


@pytest.mark.parametrize("fmt", ["npy", "parquet"])
def test_max_bytes_applies_to_binary_formats(tmp_path: Path, fmt: str) -> None:
    array = np.arange(2_000.0).reshape(1_000, 2)
    if fmt == "npy":
        data = npy_bytes(array)
    else:
        data = parquet_bytes(pa.table({"a": array[:, 0], "b": array[:, 1]}))
    error = rejected(data, tmp_path, max_bytes=len(data) // 2)
    assert (error.code, error.status) == ("too-large", 413)


# ------------------------------------------------------------------------------------ .npy


def test_npy_float_round_trip(tmp_path: Path) -> None:
    expected = np.random.default_rng(3).normal(size=(40, 5))
    result = ingest(npy_bytes(expected), tmp_path, filename="data.npy")
    assert (result.n_rows, result.n_cols) == (40, 5)
    assert result.columns == ["x0", "x1", "x2", "x3", "x4"]
    np.testing.assert_array_equal(only_output(tmp_path, result), expected)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.int64).reshape(4, 3) - 5,
        np.arange(12, dtype=np.uint8).reshape(4, 3),
        np.arange(12, dtype=np.float32).reshape(4, 3) / 4,
        np.arange(12, dtype=">f8").reshape(4, 3),
        np.asfortranarray(np.arange(12.0).reshape(4, 3)),
    ],
    ids=["int64", "uint8", "float32", "big-endian", "fortran"],
)
def test_npy_numeric_dtypes_convert_to_float64(tmp_path: Path, array: np.ndarray) -> None:
    matrix = only_output(tmp_path, ingest(npy_bytes(array), tmp_path))
    assert matrix.dtype == np.float64
    np.testing.assert_array_equal(matrix, array.astype(np.float64))


def test_npy_columns_subset(tmp_path: Path) -> None:
    array = np.arange(12.0).reshape(4, 3)
    for fortran in (False, True):
        data = npy_bytes(np.asfortranarray(array) if fortran else array)
        result = ingest(data, tmp_path, columns=["x2", "x0"], name=f"f{int(fortran)}")
        assert result.columns == ["x2", "x0"]
        np.testing.assert_array_equal(open_matrix(result.path), array[:, [2, 0]])


@pytest.mark.parametrize(
    ("array", "code"),
    [
        (np.arange(5.0), "invalid-file"),  # 1-D
        (np.zeros((2, 2, 2)), "invalid-file"),
        (np.zeros((3, 2), dtype=bool), "invalid-file"),
        (np.zeros((3, 2), dtype=complex), "invalid-file"),
        (np.array([["a", "b"]]), "invalid-file"),
        (np.zeros((0, 3)), "empty-dataset"),
        (np.zeros((3, 0)), "empty-dataset"),
    ],
    ids=["1d", "3d", "bool", "complex", "str", "no-rows", "no-cols"],
)
def test_npy_rejections(tmp_path: Path, array: np.ndarray, code: str) -> None:
    assert rejected(npy_bytes(array), tmp_path).code == code


def test_npy_object_array_rejected(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    np.save(buffer, np.array([[1, None]], dtype=object), allow_pickle=True)
    assert rejected(buffer.getvalue(), tmp_path).code == "invalid-file"


@pytest.mark.parametrize("fortran", [False, True])
def test_npy_non_finite_located(tmp_path: Path, fortran: bool) -> None:
    array = np.ones((300_000, 4))  # several conversion blocks
    array[250_001, 2] = -np.inf
    array[250_002, 0] = np.nan
    data = npy_bytes(np.asfortranarray(array) if fortran else array)
    error = rejected(data, tmp_path)
    assert (error.code, error.extra) == ("non-finite-value", {"row": 250_002, "column": "x2"})


def test_npy_truncated_or_declared_but_not_npy(tmp_path: Path) -> None:
    data = npy_bytes(np.ones((10, 3)))
    assert "truncated" in rejected(data[:-5], tmp_path).detail
    assert rejected(b"\x93NUMPY\x01\x00garbage", tmp_path).code == "invalid-file"
    assert rejected(b"a,b\n1,2\n", tmp_path, filename="x.npy").code == "invalid-file"


# --------------------------------------------------------------------------------- Parquet


def test_parquet_round_trip_over_row_groups(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    table = pa.table(
        {
            "f64": rng.normal(size=1_000),
            "i32": pa.array(rng.integers(-50, 50, size=1_000), type=pa.int32()),
            "f32": pa.array(rng.normal(size=1_000), type=pa.float32()),
        }
    )
    result = ingest(parquet_bytes(table, row_group_size=300), tmp_path, filename="t.parquet")
    assert (result.n_rows, result.columns) == (1_000, ["f64", "i32", "f32"])
    expected = np.column_stack(
        [table.column(c).to_numpy().astype(np.float64) for c in result.columns]
    )
    np.testing.assert_array_equal(only_output(tmp_path, result), expected)


def test_parquet_string_column(tmp_path: Path) -> None:
    data = parquet_bytes(pa.table({"a": [1.0, 2.0], "label": ["x", "y"]}))
    error = rejected(data, tmp_path)
    assert (error.code, error.extra) == ("non-numeric-value", {"column": "label"})
    result = ingest(data, tmp_path, columns=["a"])
    np.testing.assert_array_equal(open_matrix(result.path), [[1.0], [2.0]])


def test_parquet_decimal_is_numeric_bool_is_not(tmp_path: Path) -> None:
    amounts = pa.array([Decimal("1.25"), Decimal("-3.50")], type=pa.decimal128(10, 2))
    data = parquet_bytes(pa.table({"amount": amounts, "flag": [True, False]}))
    error = rejected(data, tmp_path)
    assert (error.code, error.extra) == ("non-numeric-value", {"column": "flag"})
    result = ingest(data, tmp_path, columns=["amount"])
    np.testing.assert_array_equal(open_matrix(result.path), [[1.25], [-3.5]])


def test_parquet_nulls_and_non_finite_located(tmp_path: Path) -> None:
    a = list(range(1_000))
    b: list[float | None] = [float(v) for v in range(1_000)]
    b[700] = None
    table = pa.table({"a": a, "b": b})
    error = rejected(parquet_bytes(table, row_group_size=256), tmp_path)
    assert (error.code, error.extra) == ("non-numeric-value", {"row": 701, "column": "b"})

    b[700] = 1.0
    b[650] = float("inf")
    error = rejected(parquet_bytes(pa.table({"a": a, "b": b}), row_group_size=256), tmp_path)
    assert (error.code, error.extra) == ("non-finite-value", {"row": 651, "column": "b"})


def test_parquet_empty_and_garbage(tmp_path: Path) -> None:
    empty = pa.table({"a": pa.array([], type=pa.float64())})
    assert rejected(parquet_bytes(empty), tmp_path).code == "empty-dataset"
    assert rejected(b"PAR1 not really parquet", tmp_path).code == "invalid-file"


# ----------------------------------------------------------------------------- the output


def test_output_is_named_and_never_overwritten(tmp_path: Path) -> None:
    first = ingest(b"a\n1\n", tmp_path, name="dataset-1")
    assert first.path.name == "dataset-1.npy"
    with pytest.raises(FileExistsError):
        ingest(b"a\n2\n", tmp_path, name="dataset-1")
    np.testing.assert_array_equal(open_matrix(first.path), [[1.0]])
    with pytest.raises(ValueError):
        ingest(b"a\n1\n", tmp_path, name="../escape")


def test_default_names_are_unique(tmp_path: Path) -> None:
    paths = {ingest(b"a\n1\n", tmp_path).path for _ in range(3)}
    assert len(paths) == 3 and set(tmp_path.iterdir()) == paths


def test_open_matrix_refuses_other_files(tmp_path: Path) -> None:
    other = tmp_path / "ints.npy"
    np.save(other, np.arange(4).reshape(2, 2))
    with pytest.raises(ValueError):
        open_matrix(other)


_LONG = b"0." + b"0" * 60_000 + b"1"  # a finite number of 60,002 characters


@pytest.mark.parametrize(
    "data",
    [
        # Rows longer than pyarrow's block (1 MiB) send the upload down the exact path, where
        # 1e999 used to parse to inf and be stored: 20 very long numbers in a row...
        b",".join(f"c{i}".encode() for i in range(20))
        + b"\n"
        + b",".join([_LONG] * 20)
        + b"\n"
        + b",".join(b"1e999" if i == 7 else b"0" for i in range(20))
        + b"\n",
        # ...or a very wide row.
        b",".join(f"c{i}".encode() for i in range(140_000))
        + b"\n"
        + b",".join(b"1e999" if i == 7 else b"0.0000001" for i in range(140_000))
        + b"\n",
    ],
    ids=["long-numbers", "wide"],
)
def test_csv_exact_path_refuses_numbers_that_overflow_to_infinity(
    tmp_path: Path, data: bytes
) -> None:
    error = rejected(data, tmp_path)
    assert error.code == "non-finite-value" and error.status == 400
    assert error.extra.get("column") == "c7"
    assert error.extra.get("row") in (1, 2)


# ------------------------------------------------------- the early ingest of a streamed upload


def _streamed(
    data: bytes,
    scratch: Path,
    *,
    chunk: int = 1000,
    give_way: Callable[[], bool] = lambda: False,
    fail_at: int | None = None,
    held: threading.Event | None = None,
    rows_held: threading.Event | None = None,
    **early: Any,
) -> StreamedFile:
    """`data` arriving in chunks (a writer thread) while its early ingest runs (another thread),
    as the upload route receives a file part; returned once the data has arrived and (unless
    `rows_held`: its rows wait for that event) the early ingest is done. With `held`, the rest
    of the data waits after the first chunk until that event is set."""
    spool = GrowingSpool(scratch)
    params = {"filename": None, "content_type": None, "max_bytes": None, **early}
    started = EarlyIngest(spool, scratch_dir=scratch, give_way=give_way, **params)
    file = StreamedFile(spool, started)

    def arrive() -> None:
        for at in range(0, len(data), chunk):
            if fail_at is not None and at >= fail_at:
                spool.fail(ConnectionError("cut off"))
                return
            spool.append(data[at : at + chunk])
            if held is not None:
                held.wait(10)
            time.sleep(0.0005)
        spool.finish()

    class HeldSink:
        def __init__(self, sink: RowSink, until: threading.Event) -> None:
            self.sink, self.until, self.n_rows = sink, until, 0

        def start(self, n_cols: int) -> None:
            self.sink.start(n_cols)

        def append(self, block: np.ndarray) -> None:
            self.until.wait(10)
            self.sink.append(block)
            self.n_rows += len(block)

    def ingest(src: IO[bytes], sink: RowSink) -> list[str]:
        into = sink if rows_held is None else HeldSink(sink, rows_held)
        return ingest_rows(src, dest_dir=scratch, columns=None, writer=into, **params)

    arriving = threading.Thread(target=arrive)
    ingesting = threading.Thread(target=started.run, args=(ingest,), daemon=True)
    arriving.start()
    ingesting.start()
    arriving.join()
    if rows_held is None:
        ingesting.join()
    spool.release()  # the receiver's own hold
    return file


def _csv_table(n_rows: int = 3000) -> tuple[bytes, np.ndarray]:
    values = np.random.default_rng(3).normal(0, 50, size=(n_rows, 4))
    lines = ["a,b,c,d"] + [",".join(repr(float(v)) for v in row) for row in values]
    return ("\n".join(lines) + "\n").encode(), values


def test_the_early_rows_are_the_rows_and_the_file_is_not_read_again(tmp_path: Path) -> None:
    data, values = _csv_table()
    with _streamed(data, tmp_path / "scratch") as file:
        result = ingest_file(file, filename=None, content_type=None, dest_dir=tmp_path / "out")
        assert file.tell() == 0  # adopted: the endpoint's ingest did not parse the file again
    assert result.columns == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(only_output(tmp_path / "out", result), values)
    assert list((tmp_path / "scratch").iterdir()) == []


def test_the_early_rows_serve_a_column_choice_sent_after_the_file(tmp_path: Path) -> None:
    data, values = _csv_table()
    with _streamed(data, tmp_path / "scratch") as file:
        out = tmp_path / "out"
        result = ingest_file(
            file, filename=None, content_type=None, dest_dir=out, columns=["d", "b"]
        )
        assert file.tell() == 0 and result.columns == ["d", "b"]
    np.testing.assert_array_equal(only_output(out, result), values[:, [3, 1]])


def rejected_from(src: IO[bytes], dest: Path, **kwargs: Any) -> UploadError:
    with pytest.raises(UploadError) as caught:
        ingest_file(src, filename=None, content_type=None, dest_dir=dest, **kwargs)
    assert not dest.exists() or list(dest.iterdir()) == []
    return caught.value


@pytest.mark.parametrize("columns", [None, ["a"]])
def test_an_early_data_error_is_the_ingest_error(tmp_path: Path, columns: list[str] | None) -> None:
    data, _ = _csv_table()
    lines = data.split(b"\n")
    lines[2000] = b"1,2,oops,4"
    with _streamed(b"\n".join(lines), tmp_path / "scratch") as file:
        out = tmp_path / "out"
        if columns is None:
            error = rejected_from(file, out)
            where = (error.code, error.extra.get("row"), error.extra.get("column"))
            assert where == ("non-numeric-value", 2000, "c")
        else:  # the bad value is in a column that is not kept: the file is ingested again
            result = ingest_file(
                file, filename=None, content_type=None, dest_dir=out, columns=columns
            )
            assert result.n_rows == 3000 and file.tell() > 0


def test_other_parameters_than_the_early_ingest_had_mean_a_fresh_ingest(tmp_path: Path) -> None:
    data, _ = _csv_table()
    with _streamed(data, tmp_path / "scratch") as file:
        error = rejected_from(file, tmp_path / "out", max_bytes=1000)
    assert error.code == "too-large" and error.status == 413


def test_an_early_ingest_that_gave_way_leaves_the_ingest_to_the_endpoint(tmp_path: Path) -> None:
    data, values = _csv_table()
    waiting = threading.Event()

    def others_wait() -> bool:  # asked once the early ingest has read the first chunk
        waiting.set()
        return True

    with _streamed(data, tmp_path / "scratch", give_way=others_wait, held=waiting) as file:
        result = ingest_file(file, filename=None, content_type=None, dest_dir=tmp_path / "out")
        assert file.tell() > 0  # nothing to adopt: the file was parsed once it had arrived
    np.testing.assert_array_equal(only_output(tmp_path / "out", result), values)


def test_a_cut_off_upload_stops_its_early_ingest_and_leaves_nothing(tmp_path: Path) -> None:
    data, _ = _csv_table()
    with _streamed(data, tmp_path / "scratch", fail_at=len(data) // 2) as file:
        assert file.early is not None and not file.early.running
        with pytest.raises(SpoolStopped):
            file.read()
    assert list((tmp_path / "scratch").iterdir()) == []


def test_rows_are_adopted_while_the_early_ingest_still_parses(tmp_path: Path) -> None:
    data, values = _csv_table()
    rows_held = threading.Event()
    with _streamed(data, tmp_path / "scratch", rows_held=rows_held) as file:
        assert file.early is not None and file.early.running
        threading.Timer(0.2, rows_held.set).start()  # while the endpoint's ingest waits
        result = ingest_file(file, filename=None, content_type=None, dest_dir=tmp_path / "out")
        assert file.tell() == 0
    np.testing.assert_array_equal(only_output(tmp_path / "out", result), values)


def test_a_spool_reader_waits_for_bytes_and_rereads_them(tmp_path: Path) -> None:
    spool = GrowingSpool(tmp_path)
    got: list[bytes] = []
    with SpoolReader(spool) as reader:
        spool.append(b"abc")
        waiting = threading.Thread(target=lambda: got.append(reader.read(10) + reader.read(10)))
        waiting.start()
        time.sleep(0.05)
        spool.append(b"def")
        spool.finish()
        waiting.join()
        assert got == [b"abcdef"] and reader.read(5) == b""
        reader.seek(1)
        assert reader.read() == b"bcdef"
    spool.release()
    assert list(tmp_path.iterdir()) == []

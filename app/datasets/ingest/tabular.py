"""Tables with gaps, categories or a privacy unit: read with their text columns, shaped by the
declared `privclust.tabular.TableSpec` (privclust.tabular_rows) and stored.

A plain table (numbers only, nothing missing, a row is the unit) never comes here: it takes the
formats' own streaming path. Here CSV and Parquet are read as Arrow batches (numbers as float64
with the missing markers as nulls, categorical and unit columns as text); a .npy array may hold
NaN for a missing value (it has no text columns). With a privacy unit the shaped rows are held
until the end, when each unit keeps at most m of them, chosen with the secure generator.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.csv as pa_csv

from app.datasets.domain import DomainSpec
from app.datasets.ingest.checks import binary_row, select_columns
from app.datasets.ingest.csv import read_csv_header
from app.datasets.ingest.parquet import check_numeric, open_parquet
from app.datasets.ingest.reader import RowSink, Upload
from app.datasets.ingest.source import SourceFile, opened_source
from app.kit.errors import InvalidParameter, UploadError
from privclust.privacy.noise import secure_generator
from privclust.tabular import TableError, TableSpec, check_columns
from privclust.tabular_rows import Block, ShapeCounts, TableShaper, bound_units, check_rows_left

# What a table may write for a missing value (besides a Parquet null and a .npy NaN).
MISSING_MARKERS = ["", "NA", "N/A", "NaN", "nan", "null", "NULL", "None"]
_BATCH_ROWS = 65_536
_ARROW_COLUMN = re.compile(r"CSV column #(\d+)")


@dataclass
class TableIngest:
    """A table's declared shaping, its declared domain, and (after the ingest) the owner-only
    counts of what the policy did."""

    spec: TableSpec
    domain: DomainSpec
    counts: ShapeCounts = field(default_factory=ShapeCounts)


def table_error(exc: TableError) -> UploadError | InvalidParameter:
    """The 422 of a table the declared policy refuses, naming the field (and the cell)."""
    if exc.code == "invalid-parameter":
        return InvalidParameter(str(exc), field=exc.field, column=exc.column)
    return UploadError(
        str(exc), code=exc.code, status=422, row=exc.row, column=exc.column, field=exc.field
    )


class _Shaping:
    """The writer's side of a table ingest: shapes blocks, bounds units, writes rows."""

    def __init__(self, writer: RowSink, table: TableIngest) -> None:
        self.writer, self.table = writer, table
        self.shaper: TableShaper | None = None
        self._held: list[npt.NDArray[np.float64]] = []
        self._units: list[npt.NDArray[np.object_]] = []

    def begin(self, numeric: list[str], where: object = binary_row) -> list[str]:
        centre = numeric_centre(self.table.domain, numeric, self.table.spec)
        self.shaper = TableShaper(self.table.spec, numeric, centre, where)
        self.table.counts = self.shaper.counts
        self.writer.start(self.shaper.width)
        return numeric + self.table.spec.one_hot_columns()

    def put(self, block: Block) -> None:
        assert self.shaper is not None
        rows, units = self.shaper.shape(block)
        if units is not None:
            self._held.append(rows)
            self._units.append(units)
        elif rows.shape[0]:
            self.writer.append(rows)

    def finish(self) -> None:
        spec = self.table.spec
        if self._held:
            rows, units = np.concatenate(self._held), np.concatenate(self._units)
            self._held, self._units = [], []
            keep = bound_units(units, spec.contribution_bound, secure_generator())
            self.table.counts.rows_dropped_unit_bound = int((~keep).sum())
            if keep.any():
                self.writer.append(np.ascontiguousarray(rows[keep]))
        check_rows_left(self.writer.n_rows, spec)


def numeric_centre(domain: DomainSpec, numeric: list[str], spec: TableSpec) -> list[float]:
    """Each numeric column's default fill, the centre of its declared domain; a declared fill
    outside the domain is refused (422 naming `fill`)."""
    p = len(numeric)
    if domain.lower is not None and domain.upper is not None:
        if len(domain.lower) != p:
            raise InvalidParameter(
                f"lower/upper have {len(domain.lower)} values but the table has {p} numeric "
                f"columns ({', '.join(numeric)}); categorical and unit columns take no bounds",
                field="lower",
            )
        bounds = list(zip(domain.lower, domain.upper, strict=True))
        centre = [(lo + hi) / 2 for lo, hi in bounds]
        inside = [(lo, hi) for lo, hi in bounds]
    else:
        assert domain.radius is not None
        centre = list(domain.center) if domain.center is not None else [0.0] * p
        if len(centre) != p:
            raise InvalidParameter(
                f"center has {len(centre)} values but the table has {p} numeric columns",
                field="center",
            )
        inside = [(c - domain.radius, c + domain.radius) for c in centre]
    for j, column in enumerate(numeric):
        value = spec.fill.get(column)
        if value is not None and not inside[j][0] <= float(value) <= inside[j][1]:
            raise InvalidParameter(
                f"fill for {column!r} ({value}) is outside its declared domain "
                f"[{inside[j][0]:g}, {inside[j][1]:g}]",
                field="fill",
            )
    return centre


def ingest_table(
    upload: Upload, fmt: str, wanted: list[str] | None, table: TableIngest, writer: RowSink
) -> list[str]:
    """Read, shape and store a table by its declared spec; return the stored columns' names."""
    shaping = _Shaping(writer, table)
    try:
        if fmt == "npy":
            stored = _npy(upload, wanted, shaping)
        elif fmt == "csv":
            stored = _csv(upload, wanted, shaping)
        else:
            stored = _parquet(upload, wanted, shaping)
        shaping.finish()
    except TableError as exc:
        raise table_error(exc) from None
    return stored


def _roles(spec: TableSpec, names: list[str], wanted: list[str] | None) -> tuple[list[str], ...]:
    """(numeric, text, every column read) of a table with columns `names`."""
    data = select_columns(
        [n for n in names if n != spec.privacy_unit] if wanted is None else names, wanted
    )
    numeric = check_columns(spec, names, data)
    text = [c for c in data if c in spec.categories]
    unit = [] if spec.privacy_unit is None else [spec.privacy_unit]
    return numeric, text, numeric + text + unit


def _block(
    batch: pa.RecordBatch, numeric: list[str], text: list[str], unit: str | None, first: int
) -> Block:
    values = np.empty((batch.num_rows, len(numeric)), dtype=np.float64)
    for j, column in enumerate(numeric):
        converted = batch.column(column).cast(pa.float64(), safe=False)
        values[:, j] = converted.fill_null(float("nan")).to_numpy(zero_copy_only=False)
    strings = {c: _text(batch.column(c)) for c in text}
    units = None if unit is None else _text(batch.column(unit))
    return Block(values, strings, units, first)


def _text(column: pa.Array) -> npt.NDArray[np.object_]:
    as_text = column if pa.types.is_string(column.type) else column.cast(pa.string())
    return np.asarray(as_text.to_numpy(zero_copy_only=False), dtype=object)


def _csv(upload: Upload, wanted: list[str] | None, shaping: _Shaping) -> list[str]:
    names = read_csv_header(upload.reader)
    numeric, text, read = _roles(shaping.table.spec, names, wanted)
    stored = shaping.begin(numeric, csv_row)
    types = {c: (pa.float64() if c in numeric else pa.string()) for c in read}
    _put_all(_csv_batches(upload, names, types, read), shaping, numeric, text)
    return stored


def _csv_batches(
    upload: Upload, names: list[str], types: dict[str, pa.DataType], read: list[str]
) -> Iterator[pa.RecordBatch]:
    """The CSV's batches; what pyarrow refuses (at the first block or a later one) is an
    UploadError naming the column where it says which."""
    try:
        yield from pa_csv.open_csv(
            upload.reader,
            read_options=pa_csv.ReadOptions(column_names=names, block_size=1 << 20),
            parse_options=pa_csv.ParseOptions(newlines_in_values=True, ignore_empty_lines=True),
            convert_options=pa_csv.ConvertOptions(
                column_types=types,
                include_columns=read,
                null_values=MISSING_MARKERS,
                strings_can_be_null=True,
                quoted_strings_can_be_null=True,
            ),
        )
    except pa.ArrowException as exc:
        found = _ARROW_COLUMN.search(str(exc))
        column = names[int(found.group(1))] if found and int(found.group(1)) < len(names) else None
        converting = "conversion error" in str(exc)
        raise UploadError(
            f"The table cannot be read: {str(exc)[:300]}",
            code="non-numeric-value" if converting else "invalid-file",
            column=column,
        ) from None


def _put_all(
    batches: Iterator[pa.RecordBatch], shaping: _Shaping, numeric: list[str], text: list[str]
) -> None:
    unit = shaping.table.spec.privacy_unit
    first = 1
    for batch in batches:
        shaping.put(_block(batch, numeric, text, unit, first))
        first += batch.num_rows


def _parquet(upload: Upload, wanted: list[str] | None, shaping: _Shaping) -> list[str]:
    parquet, schema, _ = open_parquet(upload.spool())
    numeric, text, read = _roles(shaping.table.spec, list(schema.names), wanted)
    check_numeric(schema, numeric)
    stored = shaping.begin(numeric)
    try:
        batches = parquet.iter_batches(batch_size=_BATCH_ROWS, columns=read)
        _put_all(iter(batches), shaping, numeric, text)
    except (pa.ArrowException, OSError) as exc:
        raise UploadError(f"The Parquet file cannot be read ({exc}).") from None
    return stored


def _npy(upload: Upload, wanted: list[str] | None, shaping: _Shaping) -> list[str]:
    from app.datasets.ingest.npy import ingest_npy

    spec = shaping.table.spec
    if spec.categories or spec.privacy_unit is not None:
        field_name = "categories" if spec.categories else "privacy_unit"
        raise InvalidParameter(
            "a .npy array has no named text columns: categories and privacy_unit need a CSV or "
            "Parquet file",
            field=field_name,
        )
    sink = _NpySink(shaping, wanted)
    ingest_npy(upload, wanted, sink, gaps=True)
    return sink.stored


class _NpySink:
    """A .npy ingest's rows (NaN: missing) handed to the shaping."""

    def __init__(self, shaping: _Shaping, wanted: list[str] | None) -> None:
        self.shaping, self.wanted = shaping, wanted
        self.stored: list[str] = []
        self.first = 1

    @property
    def n_rows(self) -> int:
        return self.shaping.writer.n_rows

    @n_rows.setter
    def n_rows(self, value: int) -> None:
        raise AttributeError("the rows are counted by the writer")

    def start(self, n_cols: int) -> None:
        names = self.wanted if self.wanted is not None else [f"x{j}" for j in range(n_cols)]
        self.stored = self.shaping.begin(list(names))

    def append(self, block: npt.NDArray[np.float64]) -> None:
        self.shaping.put(Block(block, {}, None, self.first))
        self.first += block.shape[0]


def import_table(
    files: list[SourceFile],
    wanted: list[str] | None,
    table: TableIngest,
    writer: RowSink,
    progress: Callable[[float], None],
    check_file: Callable[[str], None],
) -> list[str]:
    """An import's Parquet files read, shaped and stored as `ingest_table` does an upload's
    (rows counted from 1 across the source's files); return the stored columns' names."""
    shaping = _Shaping(writer, table)
    stored: list[str] | None = None
    total, done = sum(f.size for f in files) or 1, 0
    first = 1
    try:
        for file in files:
            check_file(file.url)
            with opened_source(file) as parquet:
                numeric, text, read = _roles(table.spec, list(parquet.schema_arrow.names), wanted)
                check_numeric(parquet.schema_arrow, numeric, f"In {file.name}: ")
                if stored is None:
                    stored = shaping.begin(numeric)
                for batch in parquet.iter_batches(batch_size=_BATCH_ROWS, columns=read):
                    shaping.put(_block(batch, numeric, text, table.spec.privacy_unit, first))
                    first += batch.num_rows
            done += file.size
            progress(done / total)
        shaping.finish()
    except TableError as exc:
        raise table_error(exc) from None
    except pa.ArrowException as exc:
        raise UploadError(f"The source cannot be read ({type(exc).__name__}).") from None
    if stored is None:
        raise UploadError("The source has no rows.", code="empty-dataset")
    return stored


def csv_row(row: int) -> str:
    return f"Data row {row} (rows are counted from 1 after the header row)"

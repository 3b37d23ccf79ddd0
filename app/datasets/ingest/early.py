"""The ingest of an upload started while its file part is still arriving, kept only if it fits.

Parsing is the slow part of an upload; run after the body had arrived, it made the client wait
for the transfer and the parse one after the other. The early ingest parses the spool
(app.datasets.ingest.spool) as it grows, in a thread of the upload gate (PRIVCLUST_UPLOAD_THREADS),
into scratch rows (checked float64, in a growing spool of their own), before the form's other
fields are known: a client may send them after the file. The endpoint's `ingest_file` then
adopts those rows (`adopt_early_rows`) when the request's own parameters give the same result:
its writer receives them block by block, as from any format, while the early ingest may still
be parsing the end of the file. Otherwise (the early ingest was never started, gave way, failed
for another reason than the data, or the parameters differ) the endpoint ingests the spooled
file as before, so every error is still found, and worded, by the one ingest path; a data error
the early ingest found is the one that ingest would raise, in the same order against the
writer's own checks.

An early ingest gives way rather than hold the gate while it waits for the network: when it has
to wait for bytes and another upload is waiting for the gate, it stops for good, and its upload
is ingested after its body has arrived, as it always was.
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import numpy as np
import numpy.typing as npt

from app.datasets.ingest.checks import select_columns
from app.datasets.ingest.reader import RowSink
from app.datasets.ingest.spool import GrowingSpool, SpoolReader, SpoolStopped
from app.kit.errors import UploadError

# Most values handed to the request's writer at once when it adopts the rows (512 KiB, about
# what a CSV batch holds: the writer's clip makes temporaries of a block's size).
_REPLAY_VALUES = 1 << 16
_WIDTH_BYTES = 8
# How often a waiting early ingest asks whether another upload waits for the gate.
GIVE_WAY_SECONDS = 0.1

# (the upload as a readable file, where its rows go) -> the kept columns' names
IngestRows = Callable[[IO[bytes], RowSink], list[str]]


class _ScratchRows:
    """Where the early ingest puts checked rows: a spool holding the width (8 bytes, once the
    format knows it), then the rows as row-major little-endian float64."""

    def __init__(self, spool: GrowingSpool) -> None:
        self.spool = spool
        self.n_rows = 0

    def start(self, n_cols: int) -> None:
        self.spool.append(n_cols.to_bytes(_WIDTH_BYTES, "little"))

    def append(self, block: npt.NDArray[np.float64]) -> None:
        data = np.ascontiguousarray(block, dtype="<f8")
        self.spool.append(data.data.cast("B"))
        self.n_rows += data.shape[0]


class _State(enum.Enum):
    PENDING = "pending"  # not started; the endpoint may take over
    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"  # will not run, or its rows will not be used


@dataclass(frozen=True)
class _Outcome:
    columns: list[str] | None = None  # the kept columns' names, when every row was written
    failure: Exception | None = None  # else why not


class EarlyIngest:
    """One upload's early ingest: `run` it in a gate thread; then `adopt_early_rows` takes its
    rows or `cancel` drops them."""

    def __init__(
        self,
        spool: GrowingSpool,
        *,
        filename: str | None,
        content_type: str | None,
        scratch_dir: Path,
        max_bytes: int | None,
        give_way: Callable[[], bool],
    ) -> None:
        self.filename = filename
        self.content_type = content_type
        self.max_bytes = max_bytes
        self._spool = spool
        spool.retain()  # released once it has run, or will not run
        self._rows = GrowingSpool(scratch_dir)  # held until taken or cancelled
        self._give_way = give_way
        self._gave_way = False
        self._asked = -GIVE_WAY_SECONDS
        self._state = _State.PENDING
        self._outcome: _Outcome | None = None
        self._rows_taken = False
        self._changed = threading.Condition()

    @property
    def running(self) -> bool:
        return self._state is _State.RUNNING

    def _stopped(self) -> bool:
        return self._state is _State.CANCELLED or self._gave_way

    def _giving_way(self) -> bool:
        """Asked while waiting for bytes: stop for good if another upload waits for the gate.
        The question goes to the event loop at most every GIVE_WAY_SECONDS: a parse that keeps
        up with the network waits at every write of the spool."""
        now = time.monotonic()
        if not self._gave_way and now - self._asked >= GIVE_WAY_SECONDS:
            self._asked = now
            self._gave_way = self._give_way()
        return self._gave_way

    def run(self, ingest_rows: IngestRows) -> None:
        """Ingest the spool into the scratch rows. Never raises: how it ended is its outcome."""
        with self._changed:
            if self._state is not _State.PENDING:
                return
            self._state = _State.RUNNING
            self._rows.retain()
        try:
            with SpoolReader(self._spool, self._stopped, self._giving_way) as reader:
                columns = ingest_rows(cast(IO[bytes], reader), _ScratchRows(self._rows))
            self._rows.finish()
            outcome = _Outcome(columns=columns)
        except Exception as exc:
            self._rows.fail(exc)
            outcome = _Outcome(failure=exc)
        finally:
            self._spool.release()
            self._rows.release()
        with self._changed:
            self._outcome = outcome
            if self._state is _State.RUNNING:
                self._state = _State.DONE
            self._changed.notify_all()

    def _take(self, *, finished: bool) -> tuple[GrowingSpool, _Outcome | None] | None:
        """The scratch rows (the caller's to release) and the outcome if there is one yet (with
        `finished`: once the ingest has ended). None when there will be no rows to use: the
        ingest never started (and now never will), gave way, or failed for another reason
        than the data. Rows are taken once; the ingest is not stopped by taking them."""
        with self._changed:
            if self._state is _State.PENDING:
                self._state = _State.CANCELLED
                self._spool.release()
            while self._state is _State.RUNNING and (finished or self._gave_way):
                self._changed.wait()
            if self._rows_taken:
                return None
            self._rows_taken = True
            outcome = self._outcome
            failure = None if outcome is None else outcome.failure
            usable = (self._state is _State.RUNNING or outcome is not None) and (
                failure is None or isinstance(failure, UploadError)
            )
        if not usable:
            self._rows.release()
            return None
        return self._rows, outcome

    def _ended(self) -> _Outcome:
        """The outcome, once the ingest has ended (it is running or done)."""
        with self._changed:
            while self._outcome is None:
                self._changed.wait()
            return self._outcome

    def cancel(self) -> None:
        """Stop (a running ingest stops at its next read) and drop the rows unless they were
        taken; never waits."""
        with self._changed:
            if self._state is _State.PENDING:
                self._spool.release()
            self._state = _State.CANCELLED
            release = not self._rows_taken
            self._rows_taken = True
            self._changed.notify_all()
        if release:
            self._rows.release()


def adopt_early_rows(
    src: object,
    *,
    filename: str | None,
    content_type: str | None,
    columns: list[str] | None,
    max_bytes: int | None,
    writer: RowSink,
) -> list[str] | None:
    """Give `writer` the rows an early ingest of `src` made and return the kept columns' names,
    when that is what ingesting `src` with these parameters gives; else None, and the caller
    ingests `src` itself. Raises what that ingest would raise, in the same order: starting
    `writer` (e.g. a domain that does not fit the width) before the data error the early ingest
    found, which is the ingest's own when every column is kept (the same bytes give the same
    error). With every column kept the rows are handed over while the early ingest still runs.
    """
    early = getattr(src, "early", None)
    if not isinstance(early, EarlyIngest):
        return None
    if (early.filename, early.content_type, early.max_bytes) != (filename, content_type, max_bytes):
        early.cancel()
        return None
    taken = early._take(finished=columns is not None)
    if taken is None:
        return None
    rows, outcome = taken
    try:
        with SpoolReader(rows) as reader:
            if columns is None:
                return _replay_all(early, reader, writer, outcome)
            assert outcome is not None  # taken once finished
            if outcome.columns is None:
                return None  # the data error may be in a column that is not kept
            return _replay_selected(reader, outcome.columns, columns, writer)
    finally:
        rows.release()


def _replay_all(
    early: EarlyIngest, reader: SpoolReader, writer: RowSink, outcome: _Outcome | None
) -> list[str]:
    """Every column, block by block as the early ingest writes them (none after a data error
    it has already found: only the writer's start comes first); then its outcome."""
    try:
        width = _width(reader)
        if width is not None:
            writer.start(width)
            if outcome is None or outcome.failure is None:
                for block in _row_blocks(reader, width):
                    writer.append(block)
    except SpoolStopped:
        pass  # the early ingest failed: its outcome says why
    outcome = early._ended()
    if outcome.failure is not None:
        raise outcome.failure
    assert outcome.columns is not None
    return outcome.columns


def _replay_selected(
    reader: SpoolReader, names: list[str], columns: list[str], writer: RowSink
) -> list[str]:
    """The chosen columns, in the chosen order, of a finished early ingest's rows."""
    selected = select_columns(names, columns)
    width = _width(reader)
    assert width == len(names)
    index = {name: i for i, name in enumerate(names)}
    picks = [index[name] for name in selected]
    writer.start(len(selected))
    for block in _row_blocks(reader, width):
        writer.append(block[:, picks])
    return selected


def _width(reader: SpoolReader) -> int | None:
    """The width the format started the rows with, or None when it failed before that."""
    head = bytearray()
    while len(head) < _WIDTH_BYTES and (chunk := reader.read(_WIDTH_BYTES - len(head))):
        head += chunk
    return int.from_bytes(head, "little") if len(head) == _WIDTH_BYTES else None


def _row_blocks(reader: SpoolReader, width: int) -> Iterator[npt.NDArray[np.float64]]:
    """Blocks of whole rows as they become readable (waiting for more). Each block is writable
    and is overwritten by the next one: a writer stores what `append` gives it at once."""
    rows = max(1, _REPLAY_VALUES // width)
    buffer = np.empty((rows, width), dtype="<f8")
    view = buffer.data.cast("B")
    row_bytes = 8 * width
    filled = 0
    while count := reader.readinto(view[filled:]):
        filled += count
        whole = filled // row_bytes
        if whole:
            yield buffer[:whole]
            rest = filled - whole * row_bytes
            view[:rest] = view[whole * row_bytes : filled]
            filled = rest
    if filled:
        raise OSError("the early ingest's rows end inside a row")

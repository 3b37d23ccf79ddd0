"""The ingest of an upload started while its file part is still arriving, kept only if it fits.

Parsing is the slow part of an upload; run after the body had arrived, it made the client wait
for the transfer and the parse one after the other. The early ingest parses the spool
(app.datasets.ingest.spool) as it grows, in a thread of the upload gate (PRIVCLUST_UPLOAD_THREADS),
into an anonymous scratch file of checked float64 rows, before the form's other fields are
known (a client may send them after the file). The endpoint's `ingest_file` then adopts those
rows (`adopt_early_rows`) when the request's own parameters give the same result: its writer
receives them block by block, as from any format. Otherwise (the early ingest failed, was
never started, or the parameters differ) the endpoint ingests the spooled file as before, so
every error is still found, and worded, by the one ingest path.

An early ingest gives way rather than hold the gate while it waits for the network: when it has
to wait for bytes and another upload is waiting for the gate, it stops, and its upload is
ingested after its body has arrived, as it always was.
"""

from __future__ import annotations

import enum
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, cast

import numpy as np
import numpy.typing as npt

from app.datasets import storage
from app.datasets.ingest.checks import select_columns
from app.datasets.ingest.reader import RowSink
from app.datasets.ingest.spool import GrowingSpool, SpoolReader
from app.kit.errors import UploadError

# Rows handed to the request's writer at a time when it adopts the early rows (8 MiB at d=16).
_REPLAY_VALUES = 1 << 20


# (the upload as a readable file, where its rows go) -> the kept columns' names
IngestRows = Callable[[IO[bytes], RowSink], list[str]]


class _ScratchRows:
    """Checked rows in an anonymous scratch file (removed when closed, even if the process
    dies), until the request's writer takes them."""

    def __init__(self, directory: Path) -> None:
        self._file = storage.spool_file(directory)
        self.n_rows = 0
        self.n_cols = 0

    def start(self, n_cols: int) -> None:
        self.n_cols = n_cols

    def append(self, block: npt.NDArray[np.float64]) -> None:
        data = np.ascontiguousarray(block, dtype="<f8")
        self._file.write(data.data.cast("B"))
        self.n_rows += data.shape[0]

    def replay(self, picks: list[int] | None, writer: RowSink) -> None:
        """Hand every row (only the columns `picks`, in that order, if given) to `writer`."""
        self._file.flush()
        fd = self._file.fileno()
        width = self.n_cols
        step = max(1, _REPLAY_VALUES // max(width, 1))
        for first in range(0, self.n_rows, step):
            count = min(step, self.n_rows - first)
            block = np.empty((count, width), dtype="<f8")
            got = os.preadv(fd, [block.data.cast("B")], first * width * 8)
            if got != block.nbytes:
                raise OSError("the scratch rows were cut short")
            writer.append(block if picks is None else block[:, picks])

    def close(self) -> None:
        self._file.close()


class _State(enum.Enum):
    PENDING = "pending"  # not started yet; the endpoint may take over
    RUNNING = "running"
    DONE = "done"  # finished, its outcome not taken yet
    CANCELLED = "cancelled"  # will not run, or its outcome will not be used


@dataclass(frozen=True)
class _Outcome:
    """A finished early ingest: its rows and columns' names, or the data error it found."""

    rows: _ScratchRows | None = None
    columns: list[str] | None = None
    error: UploadError | None = None

    def close(self) -> None:
        if self.rows is not None:
            self.rows.close()


class EarlyIngest:
    """One upload's early ingest: `run` it in a gate thread; then `take` or `cancel` it."""

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
        spool.retain()  # released when it has run, or will not run
        self._scratch_dir = scratch_dir
        self._give_way = give_way
        self._gave_way = False
        self._state = _State.PENDING
        self._outcome: _Outcome | None = None
        self._changed = threading.Condition()

    @property
    def running(self) -> bool:
        return self._state is _State.RUNNING

    def _stopped(self) -> bool:
        return self._state is _State.CANCELLED or self._gave_way

    def _giving_way(self) -> bool:
        """Asked while waiting for bytes: stop for good if another upload waits for the gate."""
        self._gave_way = self._gave_way or self._give_way()
        return self._gave_way

    def run(self, ingest_rows: IngestRows) -> None:
        """Ingest the spool into scratch rows. Never raises: an early ingest that fails for
        any reason but the data (stopped, cut off, no disk) only leaves no outcome."""
        with self._changed:
            if self._state is not _State.PENDING:
                return
            self._state = _State.RUNNING
        outcome = None
        scratch = None
        try:
            scratch = _ScratchRows(self._scratch_dir)
            with SpoolReader(self._spool, self._stopped, self._giving_way) as reader:
                columns = ingest_rows(cast(IO[bytes], reader), scratch)
            outcome = _Outcome(rows=scratch, columns=columns)
        except UploadError as exc:
            outcome = _Outcome(error=exc)
        except Exception:  # the endpoint's own ingest of the spool finds and reports it
            pass
        finally:
            self._spool.release()
            with self._changed:
                kept = self._state is _State.RUNNING
                if kept:
                    self._state = _State.DONE
                    self._outcome = outcome
                self._changed.notify_all()
            if outcome is not None and not kept:
                outcome.close()  # cancelled meanwhile
            if scratch is not None and (outcome is None or outcome.rows is not scratch):
                scratch.close()

    def take(self) -> _Outcome | None:
        """The outcome, once (waiting for a running ingest); None when there is none, and
        then there never will be (a pending ingest is cancelled)."""
        with self._changed:
            if self._state is _State.PENDING:
                self._spool.release()
            while self._state is _State.RUNNING:
                self._changed.wait()
            outcome, self._outcome = self._outcome, None
            self._state = _State.CANCELLED
            return outcome

    def cancel(self) -> None:
        """Stop (a running ingest stops at its next read) and drop the outcome; never waits."""
        with self._changed:
            if self._state is _State.PENDING:
                self._spool.release()
            self._state = _State.CANCELLED
            outcome, self._outcome = self._outcome, None
            self._changed.notify_all()
        if outcome is not None:
            outcome.close()


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
    ingests `src` itself. Raises what that ingest would raise: the early ingest's data error
    (when all columns are kept: the same bytes give the same error), or what selecting
    `columns` or starting `writer` raises.
    """
    early = getattr(src, "early", None)
    if not isinstance(early, EarlyIngest):
        return None
    outcome = early.take()
    if outcome is None:
        return None
    try:
        same = (early.filename, early.content_type, early.max_bytes) == (
            filename,
            content_type,
            max_bytes,
        )
        if not same:
            return None
        if outcome.error is not None:
            if columns is None:
                raise outcome.error
            return None  # the error may be in a column that is not kept
        assert outcome.rows is not None and outcome.columns is not None
        selected = select_columns(outcome.columns, columns)
        picks = None
        if selected != outcome.columns:
            index = {name: i for i, name in enumerate(outcome.columns)}
            picks = [index[name] for name in selected]
        writer.start(len(selected))
        outcome.rows.replay(picks, writer)
        return selected
    finally:
        outcome.close()

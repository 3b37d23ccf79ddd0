"""The upload as the ingest reads it: a counted, peekable stream, and a spool when needed.

Every format reads the upload through `UploadReader`, which counts the bytes against the
upload limit (413 `too-large` as soon as it is passed, whatever the format) and lets the format
sniffing peek at the first bytes without consuming them. `Upload` adds the one-off copy to a
scratch file for formats that need random access (Parquet's footer, a Fortran-ordered .npy,
a CSV re-scan of a source that cannot seek). `RowSink` is the other end: what a format hands
the checked rows to.
"""

from __future__ import annotations

import io
import threading
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Protocol

import numpy as np
import numpy.typing as npt

from app.datasets import storage
from app.kit.errors import UploadError

READ_CHUNK = 1 << 20


class RowSink(Protocol):
    """Where a format's ingest puts the checked rows: the new dataset's
    `app.datasets.storage.RowsWriter`, or an early ingest's scratch (app.datasets.ingest.early)."""

    n_rows: int

    def start(self, n_cols: int) -> None: ...

    def append(self, block: npt.NDArray[np.float64]) -> None: ...


class UploadReader(io.RawIOBase):
    """Reads `src` in chunks, counting bytes against `max_bytes`; supports peek and unread."""

    def __init__(self, src: IO[bytes], max_bytes: int | None) -> None:
        super().__init__()
        self._src = src
        self._max_bytes = max_bytes
        self._pending = b""
        self.bytes_from_src = 0
        self.position = 0  # bytes handed to the consumer, net of unread()
        # pyarrow reads from its own threads; the lock lets `detach` wait out a read in flight.
        self._lock = threading.Lock()
        self._detached = False

    def readable(self) -> bool:
        return True

    def detach(self) -> None:
        """Stop reading `src` (later reads see end of input) so its owner may seek it."""
        with self._lock:
            self._detached = True

    def _fetch(self, size: int) -> bytes:
        with self._lock:
            if self._detached:
                return b""
            data = self._src.read(size)
        if not data:
            return b""
        self.bytes_from_src += len(data)
        if self._max_bytes is not None and self.bytes_from_src > self._max_bytes:
            raise UploadError(
                f"The upload is larger than the limit of {self._max_bytes} bytes.",
                code="too-large",
                status=413,
                max_bytes=self._max_bytes,
            )
        return bytes(data)

    def read(self, size: int | None = -1) -> bytes:
        if size is None or size < 0:
            parts = [self._pending]
            self._pending = b""
            while chunk := self._fetch(READ_CHUNK):
                parts.append(chunk)
            data = b"".join(parts)
        elif self._pending:
            data, self._pending = self._pending[:size], self._pending[size:]
        else:
            data = self._fetch(size)
        self.position += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        data = self.read(len(view))
        view[: len(data)] = data
        return len(data)

    def peek(self, size: int) -> bytes:
        """Return up to `size` bytes from the front without consuming them (short at EOF)."""
        while len(self._pending) < size:
            chunk = self._fetch(size - len(self._pending))
            if not chunk:
                break
            self._pending += chunk
        return self._pending[:size]

    def unread(self, data: bytes) -> None:
        self._pending = data + self._pending
        self.position -= len(data)


def is_seekable(src: IO[bytes]) -> bool:
    try:
        return bool(src.seekable())
    except (AttributeError, ValueError, OSError):
        return False


def copy_stream(reader: UploadReader, dest: IO[bytes]) -> None:
    while chunk := reader.read(READ_CHUNK):
        dest.write(chunk)
    dest.flush()


class Upload:
    """The upload being ingested: its source, a counted reader over it, and (on demand) a spool
    of the rest of it, closed (and so removed) when the ingest is done with it."""

    def __init__(self, src: IO[bytes], max_bytes: int | None, spool_dir: Path) -> None:
        self.src = src
        self.max_bytes = max_bytes
        # Where the source can be rewound to for a second pass (None: it cannot seek).
        self.start = src.tell() if is_seekable(src) else None
        self.reader = UploadReader(src, max_bytes)
        self._spool_dir = spool_dir
        self._spools: list[IO[bytes]] = []

    def spool(self) -> IO[bytes]:
        """The rest of the upload copied to an anonymous scratch file, positioned at its start."""
        spool = storage.spool_file(self._spool_dir)
        self._spools.append(spool)
        copy_stream(self.reader, spool)
        spool.seek(0)
        return spool

    def __enter__(self) -> Upload:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        for spool in self._spools:
            spool.close()


def read_exactly(reader: UploadReader, size: int) -> bytes | None:
    """`size` bytes, or None when the input ends first."""
    parts: list[bytes] = []
    missing = size
    while missing > 0:
        chunk = reader.read(missing)
        if not chunk:
            return None
        parts.append(chunk)
        missing -= len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def discard_exactly(reader: UploadReader, count: int) -> None:
    while count > 0:
        chunk = reader.read(min(count, READ_CHUNK))
        if not chunk:
            raise UploadError("The file changed while it was being read.")
        count -= len(chunk)

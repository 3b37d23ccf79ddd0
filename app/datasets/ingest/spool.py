"""A scratch file that is read while it is still being written: one writer, readers at once.

The request appends an uploaded file part's bytes to one (an anonymous `storage.spool_file`:
removed by the OS when closed, even if the process dies) while an early ingest already reads
it (app.datasets.ingest.early), and the early ingest's checked rows go to another, which the
endpoint reads while they are written. A read of bytes that have not been written yet waits for
them. Once complete, a spool is an ordinary seekable file: what the endpoint's ingest reads if
the early one could not be used.
"""

from __future__ import annotations

import io
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.datasets import storage

# How long a waiting reader sleeps before it asks `should_stop` again.
_RECHECK_SECONDS = 0.25
_HAS_PREADV = hasattr(os, "preadv")  # not on every macOS build: then pread and a copy


class SpoolStopped(Exception):
    """A reader gave up waiting: its ingest was stopped (see `GrowingSpool.read_at`)."""


class GrowingSpool:
    """A scratch file that the request appends to while readers read it (thread-safe).

    Readers block until the bytes they ask for have arrived, the part is complete (end of
    input) or has failed (the failure is raised in the reader). The file is closed once the
    request and every reader have released it (`retain` / `release`).
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self._file = storage.spool_file(directory)
        self._fd = self._file.fileno()
        self._size = 0
        self._complete = False
        self._failure: BaseException | None = None
        self._users = 1  # the request
        self._changed = threading.Condition()

    @property
    def size(self) -> int:
        return self._size

    def append(self, data: bytes | bytearray | memoryview) -> None:
        """Write `data` at the end (from one thread at a time), then wake the readers."""
        view = memoryview(data)
        at = self._size
        while view:
            written = os.pwrite(self._fd, view, at)
            view = view[written:]
            at += written
        with self._changed:
            self._size = at
            self._changed.notify_all()

    def finish(self) -> None:
        """The part is complete: readers see the end of input after its last byte."""
        with self._changed:
            self._complete = True
            self._changed.notify_all()

    def fail(self, failure: BaseException) -> None:
        """The spool will never be complete (the body was cut off or refused, or the early
        ingest writing it failed)."""
        with self._changed:
            if not self._complete:
                self._failure = failure
            self._changed.notify_all()

    def available(self, position: int, should_stop: Callable[[], bool] | None = None) -> int:
        """Bytes readable at `position` now, waiting until there is at least one; 0 at the end.
        Where a failed spool's bytes stop, SpoolStopped is raised instead (from the failure).

        While it waits, `should_stop` is asked (at once, then every quarter second) whether
        the reader should give up instead: it then raises SpoolStopped.
        """
        with self._changed:
            while True:
                if position < self._size or self._complete:
                    return max(self._size - position, 0)
                if self._failure is not None:
                    raise SpoolStopped("the spool was not written whole") from self._failure
                if should_stop is not None:
                    self._changed.release()
                    try:
                        stop = should_stop()
                    finally:
                        self._changed.acquire()
                    if stop:
                        raise SpoolStopped("the reader was stopped")
                    if position < self._size or self._complete or self._failure is not None:
                        continue
                self._changed.wait(_RECHECK_SECONDS)

    def read_at(
        self, position: int, size: int, should_stop: Callable[[], bool] | None = None
    ) -> bytes:
        """Up to `size` bytes at `position` (short only at the end), waiting as `available`."""
        count = min(size, self.available(position, should_stop))
        return os.pread(self._fd, count, position) if count > 0 else b""

    def read_into(
        self, position: int, view: memoryview, should_stop: Callable[[], bool] | None = None
    ) -> int:
        """`read_at` into `view` (a byte view): how many bytes were read."""
        count = min(len(view), self.available(position, should_stop))
        if count <= 0:
            return 0
        if _HAS_PREADV:
            return os.preadv(self._fd, [view[:count]], position)
        data = os.pread(self._fd, count, position)
        view[: len(data)] = data
        return len(data)

    def retain(self) -> None:
        with self._changed:
            if self._users == 0:
                raise ValueError("the spool is closed")
            self._users += 1

    def release(self) -> None:
        """One user is done with the spool; the last one closes (and so removes) the file."""
        with self._changed:
            self._users -= 1
            last = self._users == 0
        if last:
            self._file.close()


class SpoolReader(io.RawIOBase):
    """A seekable reader of a `GrowingSpool` at its own position (its own user of the spool).

    An early ingest reads with two questions: `stopped` (cheap) is asked before every read
    and while a read waits, `give_way` only while a read waits for bytes that have not
    arrived; a yes makes the read raise SpoolStopped.
    """

    def __init__(
        self,
        spool: GrowingSpool,
        stopped: Callable[[], bool] | None = None,
        give_way: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__()
        spool.retain()
        self._spool = spool
        self._stopped = stopped
        self._give_way = give_way
        self._position = 0

    def _stop_waiting(self) -> bool:
        return bool(
            (self._stopped is not None and self._stopped())
            or (self._give_way is not None and self._give_way())
        )

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._position
        elif whence == io.SEEK_END:
            while self._spool.available(self._spool.size, self._stop_waiting):
                pass  # waits for the end
            offset += self._spool.size
        if offset < 0:
            raise ValueError("negative seek position")
        self._position = offset
        return offset

    def read(self, size: int | None = -1) -> bytes:
        if self._stopped is not None and self._stopped():
            raise SpoolStopped("the reader was stopped")
        if size is None or size < 0:
            parts = []
            while chunk := self.read(1 << 20):
                parts.append(chunk)
            return b"".join(parts)
        data = self._spool.read_at(self._position, size, self._stop_waiting)
        self._position += len(data)
        return data

    def readinto(self, buffer: Any) -> int:
        if self._stopped is not None and self._stopped():
            raise SpoolStopped("the reader was stopped")
        view = memoryview(buffer).cast("B")
        count = self._spool.read_into(self._position, view, self._stop_waiting)
        self._position += count
        return count

    def close(self) -> None:
        if not self.closed:
            self._spool.release()
        super().close()

"""The upload's multipart body, parsed as it streams in: fields kept, the file part spooled, and
its ingest started while it still arrives.

Starlette's form parser wrote the file part through a SpooledTemporaryFile with a thread hop per
network chunk (about 64 KiB), and the ingest only began once the whole body was in: the client
waited for the transfer, then for the parse. Here the file part goes to a `GrowingSpool` in
1 MiB writes, and the first part named `file` starts an `EarlyIngest` on the upload gate as soon
as its headers are read (when the gate has a free thread). The form FastAPI validates is the
same as before: text fields as strings, each file part an UploadFile (its `file` a
`StreamedFile` over the complete spool), the same limits, and a malformed body is the same
400. `ingest_file` adopts the early rows when they fit (app.datasets.ingest.early).

`StreamedUploadRequest` is the request the upload route hands FastAPI; the route calls its
`finish` once the endpoint has run, which stops an early ingest that was not adopted.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, BinaryIO, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.lowlevel import EventLoopToken
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.datastructures import FormData, Headers, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request

from app.datasets.ingest import ingest_rows
from app.datasets.ingest.early import EarlyIngest, RowSink
from app.datasets.ingest.spool import GrowingSpool, SpoolReader
from app.kit.config import Settings
from app.kit.deps import upload_gate

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks

# File bytes gathered before one write to the spool (one thread hop each).
SPOOL_WRITE_BYTES = 1 << 20
# The file part whose ingest may start early: the upload form's `file` field.
_FILE_FIELD = "file"


class StreamedFile(SpoolReader):
    """A file part as the endpoint receives it: a seekable reader of its spool, which may carry
    the part's early ingest (`early`)."""

    def __init__(self, spool: GrowingSpool, early: EarlyIngest | None) -> None:
        super().__init__(spool)
        self.early = early

    def close(self) -> None:
        if self.early is not None:
            self.early.cancel()
        super().close()


@dataclass
class _Part:
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    disposition: bytes = b""
    name: str = ""
    data: bytearray = field(default_factory=bytearray)  # a text field's value
    spool: GrowingSpool | None = None  # a file part's
    upload: UploadFile | None = None


@dataclass
class _Limits:
    max_files: int | float
    max_fields: int | float
    max_part_size: int


def _decode(value: bytes, charset: str) -> str:
    try:
        return value.decode(charset)
    except (UnicodeDecodeError, LookupError):
        return value.decode("latin-1")


class _FormReceiver:
    """Feeds the body to python-multipart and acts on its callbacks: text fields gathered in
    memory (at most `max_part_size` bytes each), file parts written to spools."""

    def __init__(self, charset: str, limits: _Limits, settings: Settings) -> None:
        self._charset = charset
        self._limits = limits
        self._settings = settings
        self.items: list[tuple[str, UploadFile | str]] = []
        self.early: EarlyIngest | None = None
        self.early_task: asyncio.Task[None] | None = None
        self._part = _Part()
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._fields = 0
        self._uploads: list[UploadFile] = []
        self._spools: list[GrowingSpool] = []  # each still held by this receiver
        self._pending: list[tuple[GrowingSpool, bytearray]] = []  # file bytes not written yet
        self._pending_bytes = 0
        self._ended: list[_Part] = []  # file parts whose last byte has been seen

    # --- python-multipart's callbacks (synchronous, inside parser.write) -------------------

    def _on_part_begin(self) -> None:
        self._part = _Part()

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]

    def _on_header_end(self) -> None:
        name, value = bytes(self._header_name).lower(), bytes(self._header_value)
        if name == b"content-disposition":
            self._part.disposition = value
        self._part.headers.append((name, value))
        self._header_name.clear()
        self._header_value.clear()

    def _on_headers_finished(self) -> None:
        _, options = parse_options_header(self._part.disposition)
        if b"name" not in options:
            raise HTTPException(400, 'A multipart part has no Content-Disposition "name".')
        part = self._part
        part.name = _decode(options[b"name"], self._charset)
        if b"filename" not in options:
            self._fields += 1
            if self._fields > self._limits.max_fields:
                raise HTTPException(400, f"Too many fields (at most {self._limits.max_fields}).")
            return
        if len(self._uploads) >= self._limits.max_files:
            raise HTTPException(400, f"Too many files (at most {self._limits.max_files}).")
        part.spool = GrowingSpool(self._settings.datasets_dir)
        self._spools.append(part.spool)
        filename = _decode(options[b"filename"], self._charset)
        headers = Headers(raw=part.headers)
        early = None
        if part.name == _FILE_FIELD and self.early is None:
            early = self._start_early(part.spool, filename, headers.get("content-type"))
        file = StreamedFile(part.spool, early)
        part.upload = UploadFile(cast(BinaryIO, file), size=0, filename=filename, headers=headers)
        self._uploads.append(part.upload)

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._part
        if part.spool is None:
            if len(part.data) + end - start > self._limits.max_part_size:
                raise HTTPException(
                    400, f"A form field is longer than {self._limits.max_part_size} bytes."
                )
            part.data += data[start:end]
            return
        chunk = memoryview(data)[start:end]
        if self._pending and self._pending[-1][0] is part.spool:
            self._pending[-1][1].extend(chunk)
        else:
            self._pending.append((part.spool, bytearray(chunk)))
        self._pending_bytes += end - start

    def _on_part_end(self) -> None:
        part = self._part
        if part.upload is None:
            self.items.append((part.name, _decode(bytes(part.data), self._charset)))
            return
        self.items.append((part.name, part.upload))
        self._ended.append(part)

    def callbacks(self) -> MultipartCallbacks:
        return {
            "on_part_begin": self._on_part_begin,
            "on_part_data": self._on_part_data,
            "on_part_end": self._on_part_end,
            "on_header_field": self._on_header_field,
            "on_header_value": self._on_header_value,
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
        }

    # --- the spools --------------------------------------------------------------------

    def _start_early(
        self, spool: GrowingSpool, filename: str, content_type: str | None
    ) -> EarlyIngest | None:
        """An early ingest of this part, when the upload gate has a thread free right now."""
        gate = upload_gate()
        if gate.available_tokens < 1 or gate.statistics().tasks_waiting > 0:
            return None
        scratch_dir, max_bytes = self._settings.datasets_dir, self._settings.max_upload_bytes
        early = EarlyIngest(
            spool,
            filename=filename,
            content_type=content_type,
            scratch_dir=scratch_dir,
            max_bytes=max_bytes,
            give_way=_others_waiting_for(gate, anyio.lowlevel.current_token()),
        )

        def ingest(src: IO[bytes], sink: RowSink) -> list[str]:
            return ingest_rows(
                src,
                filename=filename,
                content_type=content_type,
                dest_dir=scratch_dir,
                columns=None,
                max_bytes=max_bytes,
                writer=sink,
            )

        self.early = early
        self.early_task = asyncio.get_running_loop().create_task(
            anyio.to_thread.run_sync(early.run, ingest, limiter=gate)
        )
        return early

    async def flush(self, at_least: int = SPOOL_WRITE_BYTES) -> None:
        """Write the gathered file bytes once there are `at_least` of them (or a file part
        ended), then complete the spools of the parts that ended."""
        if self._pending_bytes < max(at_least, 1) and not self._ended:
            return
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        for spool, data in pending:
            await anyio.to_thread.run_sync(spool.append, data)
        for part in self._ended:
            assert part.spool is not None and part.upload is not None
            part.spool.finish()
            part.upload.size = part.spool.size
        self._ended.clear()

    def release(self, failure: BaseException | None) -> None:
        """Drop this receiver's hold on every spool, once the body has ended (a part cut off
        by the end of the body ends there, as Starlette's parser leaves it) or failed (the
        unfinished spools fail, and every file part is closed, which stops an early ingest)."""
        for spool in self._spools:
            if failure is None:
                spool.finish()
            else:
                spool.fail(failure)
            spool.release()
        self._spools.clear()
        if failure is not None:
            for upload in self._uploads:
                upload.file.close()


def _others_waiting_for(gate: anyio.CapacityLimiter, token: EventLoopToken) -> Callable[[], bool]:
    """Whether another upload waits for the gate (asked from any thread; True once the event
    loop is gone)."""

    def waiting() -> bool:
        return gate.statistics().tasks_waiting > 0

    def ask() -> bool:
        try:
            return anyio.from_thread.run_sync(waiting, token=token)
        except RuntimeError:
            return True

    return ask


class StreamedUploadRequest(Request):
    """The upload's request: its multipart form is parsed by `_FormReceiver` (other content
    types as Starlette parses them)."""

    _receiver: _FormReceiver | None = None

    async def _get_form(
        self,
        *,
        max_files: int | float = 1000,
        max_fields: int | float = 1000,
        max_part_size: int = 1024 * 1024,
    ) -> FormData:
        content_type, params = parse_options_header(self.headers.get("content-type"))
        if content_type != b"multipart/form-data":
            return await super()._get_form(
                max_files=max_files, max_fields=max_fields, max_part_size=max_part_size
            )
        if self._receiver is not None:
            return FormData(self._receiver.items)
        boundary = params.get(b"boundary")
        if not boundary:
            raise HTTPException(400, "The multipart body has no boundary.")
        charset = params.get(b"charset", b"utf-8").decode("latin-1")
        try:
            charset = codecs.lookup(charset).name
        except LookupError:
            charset = "latin-1"
        settings: Settings = self.app.state.settings
        limits = _Limits(max_files, max_fields, max_part_size)
        receiver = self._receiver = _FormReceiver(charset, limits, settings)
        await _receive(receiver, boundary, self)
        return FormData(receiver.items)

    async def finish(self) -> None:
        """Stop an early ingest the endpoint did not adopt, and wait until its thread is done."""
        receiver = self._receiver
        if receiver is None or receiver.early is None or receiver.early_task is None:
            return
        receiver.early.cancel()  # a running one stops at its next read
        task = receiver.early_task
        task.cancel()  # one still waiting for a thread never starts; a thread is waited for
        with anyio.CancelScope(shield=True), contextlib.suppress(asyncio.CancelledError):
            await task


async def _receive(receiver: _FormReceiver, boundary: bytes, request: Request) -> None:
    parser = MultipartParser(boundary, receiver.callbacks())
    failure: BaseException | None = None
    try:
        async for chunk in request.stream():
            parser.write(chunk)
            await receiver.flush()
        parser.finalize()
        await receiver.flush(at_least=0)
    except FormParserError as exc:
        failure = exc
        raise HTTPException(400, "The multipart body is malformed.") from None
    except BaseException as exc:
        failure = exc
        raise
    finally:
        receiver.release(failure)

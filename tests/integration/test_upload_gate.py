"""Uploads are refused before they are spooled: no key, a wrong role, or too many bytes.

Real chunked bodies (no Content-Length) are streamed over a socket to a real uvicorn process;
the test counts how much the server read before it answered, which bounds what it spooled.
"""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pytest

from app.kit.config import Settings
from tests.support.db import make_key
from tests.support.services import running_api

pytestmark = pytest.mark.integration

LIMIT = 200_000
SLACK = 1024 * 1024  # the gate's allowance for multipart framing
CHUNK = 64 * 1024
TOTAL = 150 * 1024 * 1024


def _stream_upload(base: str, key: str | None) -> tuple[int, int]:
    """POST a 150 MiB chunked multipart body; (status, bytes sent before the answer came)."""
    host, port = base.removeprefix("http://").split(":")
    boundary = uuid.uuid4().hex
    head = (
        f"POST /v1/datasets HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        + (f"Authorization: Bearer {key}\r\n" if key else "")
        + "\r\n"
    ).encode()
    part = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="x.csv"\r\n'
        "Content-Type: text/csv\r\n\r\na,b\r\n"
    ).encode()
    row = b"1.0,2.0\r\n" * (CHUNK // 9)
    sent = 0
    with socket.create_connection((host, int(port)), timeout=30) as conn:
        conn.sendall(head)
        conn.setblocking(False)
        answer = b""
        payloads = [part] + [row] * (TOTAL // len(row))
        deadline = time.monotonic() + 120
        for payload in payloads:
            try:
                answer += conn.recv(65536)
            except BlockingIOError:
                pass
            except ConnectionError:
                break
            if answer:
                break
            frame = f"{len(payload):x}\r\n".encode() + payload + b"\r\n"
            view = memoryview(frame)
            try:
                while view:
                    try:
                        view = view[conn.send(view) :]
                    except BlockingIOError:
                        time.sleep(0.001)
                        assert time.monotonic() < deadline
            except ConnectionError:
                break
            sent += len(payload)
        conn.setblocking(True)
        conn.settimeout(30)
        while b"\r\n" not in answer:
            data = conn.recv(65536)
            if not data:
                break
            answer += data
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1") else 0
    return status, sent


@pytest.fixture
def limited_api(settings: Settings, tmp_path: Path) -> str:
    with running_api(tmp_path, PRIVCLUST_MAX_UPLOAD_BYTES=str(LIMIT)) as api:
        yield api.base_url  # type: ignore[misc]


@pytest.mark.parametrize("who", ["owner", "analyst", "nobody"])
def test_a_chunked_upload_is_refused_before_it_is_spooled(
    settings: Settings, limited_api: str, who: str
) -> None:
    key = None if who == "nobody" else make_key(settings.resolved_database_url, "acme", who)
    status, sent = _stream_upload(limited_api, key)
    assert status == {"owner": 413, "analyst": 403, "nobody": 401}[who]
    # The server stopped reading within the limit plus the framing allowance plus what the
    # socket buffers held (a few MiB at most), never the 150 MiB that was on offer.
    assert sent < LIMIT + SLACK + 8 * 1024 * 1024, sent
    if who != "owner":
        assert sent < 8 * 1024 * 1024, sent  # refused before any body was read

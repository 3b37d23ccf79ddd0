"""An S3 endpoint for tests: moto's threaded server, a real HTTP endpoint on 127.0.0.1.

It is a FAKE S3: moto emulates the S3 API in memory, inside this test process, so it proves that
privclust speaks S3 over HTTP through the standard AWS_* variables (s3fs, botocore), not how a
real store behaves under load, eventual consistency or its own limits. Processes started by a
test reach it through the same `env`. `stop()` makes it unreachable (a store that is down),
so a test can watch what an outage does. moto keeps one store per process, shared by every
server it starts: each `fake_s3` gets a bucket of its own, emptied and removed at exit.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.support.processes import free_port


@dataclass
class FakeS3:
    """A running fake S3: its endpoint, a bucket made for the test, and the AWS_* variables
    that point botocore (and so s3fs) at it."""

    endpoint: str
    bucket: str
    env: dict[str, str]
    server: Any = field(repr=False)

    def url(self, *parts: str) -> str:
        """`s3://<bucket>/<parts...>`."""
        return "/".join([f"s3://{self.bucket}", *parts])

    def client(self) -> Any:
        """A botocore S3 client of this endpoint (to look at what was stored)."""
        import botocore.session

        session = botocore.session.get_session()
        return session.create_client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=self.env["AWS_DEFAULT_REGION"],
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.env["AWS_SECRET_ACCESS_KEY"],
        )

    def object_keys(self, prefix: str = "") -> list[str]:
        """Every object key under `prefix` in the test's bucket."""
        listing = self.client().list_objects_v2(Bucket=self.bucket, Prefix=prefix)
        return sorted(o["Key"] for o in listing.get("Contents", []))

    def stop(self) -> None:
        """Take the endpoint down: from now on connections to it are refused."""
        self.server.stop()

    def restart(self) -> None:
        """Bring a stopped endpoint back on its port, with what it held (moto keeps its store
        in this process, not in the server)."""
        from moto.server import ThreadedMotoServer

        port = int(self.endpoint.rsplit(":", 1)[1])
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server.start()


@contextlib.contextmanager
def fake_s3(bucket: str | None = None) -> Iterator[FakeS3]:
    """Start moto's S3 server on a free port of 127.0.0.1, create `bucket` (default: a fresh
    name), and yield it; stopped at exit. Export `env` (e.g. with monkeypatch.setenv) for
    privclust to use it."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "fake-s3-key",
        "AWS_SECRET_ACCESS_KEY": "fake-s3-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    s3 = FakeS3(endpoint, bucket or f"privclust-test-{uuid.uuid4().hex[:12]}", env, server)
    try:
        s3.client().create_bucket(Bucket=s3.bucket)
        yield s3
    finally:
        with contextlib.suppress(Exception):  # unless the test stopped the server
            client = s3.client()
            for key in s3.object_keys():
                client.delete_object(Bucket=s3.bucket, Key=key)
            client.delete_bucket(Bucket=s3.bucket)
        with contextlib.suppress(Exception):
            server.stop()

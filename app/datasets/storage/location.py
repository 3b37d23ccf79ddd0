"""Where stored rows live: a local path or an object-store URL, and the filesystem behind it.

Object storage is reached through fsspec (s3fs for `s3://`), whose endpoint and credentials come
only from the standard variables botocore reads (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, or an instance role), so any S3-compatible store
works. What is fixed here is how long to wait: a store that cannot be reached is reported
within seconds (`StorageUnavailable`), not after botocore's minutes of retries.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.implementations.local import LocalFileSystem

from app.kit.errors import StorageUnavailable

REMOTE_SCHEMES = ("s3://",)
# botocore: a refused or silent endpoint fails after about 3 x 5 s instead of minutes.
# AWS_MAX_ATTEMPTS and AWS_RETRY_MODE, when set, choose the retries instead.
_TIMEOUTS = {"connect_timeout": 5, "read_timeout": 60}
_RETRIES = {"max_attempts": 3, "mode": "standard"}
_S3FS_RETRIES = 1  # s3fs calls once: botocore already retries (above)
# The variables that decide which store and which account: a change starts a new client.
_AWS_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_DEFAULT_REGION",
    "AWS_REGION",
    "AWS_PROFILE",
    "AWS_MAX_ATTEMPTS",
    "AWS_RETRY_MODE",
)

_filesystems: dict[tuple[Any, ...], AbstractFileSystem] = {}
_lock = threading.Lock()


def is_remote(url: str) -> bool:
    """Whether `url` names object storage (anything else is a local path)."""
    return url.startswith(REMOTE_SCHEMES)


def join(url: str, *names: str) -> str:
    """`url` with path components appended ("/"-separated, for local paths and URLs alike)."""
    return "/".join([url.rstrip("/"), *names])


def filesystem(url: str) -> AbstractFileSystem:
    """The fsspec filesystem that serves `url`: one client per process and AWS_* settings."""
    if not is_remote(url):
        return LocalFileSystem()
    key = (os.getpid(), *(os.environ.get(name) for name in _AWS_ENV))
    with _lock:
        fs = _filesystems.get(key)
        if fs is None:
            from s3fs import S3FileSystem  # heavy (botocore): only remote storage needs it

            config: dict[str, Any] = dict(_TIMEOUTS)
            if not (os.environ.get("AWS_MAX_ATTEMPTS") or os.environ.get("AWS_RETRY_MODE")):
                config["retries"] = _RETRIES
            # No listings cache: other processes write and delete under the same prefixes.
            fs = S3FileSystem(
                skip_instance_cache=True, use_listings_cache=False, config_kwargs=config
            )
            fs.retries = _S3FS_RETRIES
            _filesystems[key] = fs
    return fs


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a store that cannot be reached (or refuses us) raises, beyond OSError."""
    errors: list[type[BaseException]] = []
    with contextlib.suppress(ImportError):
        from botocore.exceptions import BotoCoreError, ClientError

        errors += [BotoCoreError, ClientError]
    with contextlib.suppress(ImportError):
        from aiohttp import ClientError as HttpClientError

        errors.append(HttpClientError)
    return tuple(errors)


@contextlib.contextmanager
def reaching(url: str, doing: str, *, answered_missing: bool = False) -> Iterator[None]:
    """Report any failure to reach object storage while `doing` as StorageUnavailable (503);
    a local path's errors pass through unchanged, and so does FileNotFoundError when
    `answered_missing` (the store answered: what was asked for is not there)."""
    if not is_remote(url):
        yield
        return
    unreachable: tuple[type[BaseException], ...] = (OSError, TimeoutError, *_transport_errors())
    try:
        yield
    except StorageUnavailable:
        raise
    except unreachable as exc:
        if answered_missing and isinstance(exc, FileNotFoundError):
            raise
        raise StorageUnavailable(
            f"the datasets' object storage could not be reached while {doing} "
            f"({type(exc).__name__}); nothing was stored or charged"
        ) from exc

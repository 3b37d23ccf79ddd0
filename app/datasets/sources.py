"""Which sources an import by reference may read: the operator's allow-list, checked strictly.

`PRIVCLUST_IMPORT_SOURCES` lists prefixes (`s3://bucket/folder`, `/mnt/lake`); an import's
`source` must be one of them or lie below one, counted in whole path segments
(`s3://lake/exports` allows `s3://lake/exports/2026/` but not `s3://lake/exports-secret`).
Refused with nothing created:
- anything but an `s3://` URL or an absolute local path, a `.` or `..` segment, an empty
  segment, a control character (422 `invalid-parameter` naming `source`);
- a source outside every prefix, a local path whose symlinks resolve outside them, and the
  service's own data (its datasets' storage and its data directory, or a folder holding
  them), whatever the list says (403 `import-source-forbidden`); with no prefixes, imports are
  off (403).
Local paths are compared after resolving symlinks (`os.path.realpath`), the source's and the
prefixes' alike; the worker checks again, file by file, when it reads (`check_readable`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from app.kit.config import Settings
from app.kit.errors import ImportSourceForbidden, InvalidParameter

S3 = "s3://"
MAX_SOURCE_LENGTH = 2000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


@dataclass(frozen=True)
class Source:
    """A source that passed the checks: `url` is normalised (an `s3://bucket/key` URL without
    a trailing slash, or a local path with its symlinks resolved)."""

    url: str

    @property
    def remote(self) -> bool:
        return self.url.startswith(S3)


def _invalid(detail: str) -> InvalidParameter:
    return InvalidParameter(detail, field="source")


def normalise(raw: str) -> str:
    """`raw` as one canonical string (InvalidParameter if it is not a source at all)."""
    text = raw.strip()
    if not text or len(text) > MAX_SOURCE_LENGTH:
        raise _invalid(f"source must be 1 to {MAX_SOURCE_LENGTH} characters")
    if _CONTROL.search(text):
        raise _invalid("source may not contain control characters")
    if text.startswith(S3):
        segments = text[len(S3) :].rstrip("/").split("/")
        _check_segments(segments)
        return S3 + "/".join(segments)
    if _SCHEME.match(text):
        raise _invalid("source must be an s3:// URL or an absolute local path")
    if not text.startswith("/"):
        raise _invalid("a local source must be an absolute path")
    segments = [s for s in text.split("/") if s != ""]  # a local path may repeat slashes
    _check_segments(segments, local=True)
    return os.path.realpath("/" + "/".join(segments))


def _check_segments(segments: list[str], local: bool = False) -> None:
    if not local and (not segments or segments[0] == ""):
        raise _invalid("an s3:// source needs a bucket: s3://bucket/folder")
    for segment in segments:
        if segment in (".", ".."):
            raise _invalid("source may not contain '.' or '..' segments")
        if segment == "":
            raise _invalid("source may not contain empty segments ('//')")


def is_under(path: str, prefix: str) -> bool:
    """Whether normalised `path` is `prefix` or lies below it (whole segments)."""
    if path == prefix:
        return True
    return path.startswith(prefix if prefix.endswith("/") else prefix + "/")


def _allowed(settings: Settings) -> list[str]:
    prefixes = []
    for raw in settings.import_sources:
        try:
            prefixes.append(normalise(raw))
        except InvalidParameter:
            continue  # an unusable entry allows nothing
    return prefixes


def own_data(settings: Settings) -> list[str]:
    """The service's own data, never importable: its datasets' store and its data directory."""
    own = [os.path.realpath(settings.resolved_data_dir), os.path.realpath(settings.datasets_dir)]
    storage = settings.resolved_storage_url
    own.append(normalise(storage) if storage.startswith(S3) else os.path.realpath(storage))
    return own


def check_source(raw: str, settings: Settings) -> Source:
    """The import source `raw`, if the operator allows it (see the module's docstring)."""
    url = normalise(raw)
    check_readable(url, settings)
    return Source(url)


def check_readable(url: str, settings: Settings) -> None:
    """ImportSourceForbidden unless normalised `url` is under an allowed prefix and apart from
    the service's own data (either way round: a folder that holds the store is refused too).
    For a local path, its symlinks are resolved first."""
    prefixes = _allowed(settings)
    if not prefixes:
        raise ImportSourceForbidden(
            "imports by reference are off on this server (PRIVCLUST_IMPORT_SOURCES is empty); "
            "upload the file instead"
        )
    resolved = url if url.startswith(S3) else os.path.realpath(url)
    for own in own_data(settings):
        if is_under(resolved, own) or is_under(own, resolved):
            raise ImportSourceForbidden("the service's own data cannot be imported")
    if not any(is_under(resolved, prefix) for prefix in prefixes):
        raise ImportSourceForbidden(
            "source is not under any of the prefixes this server allows imports from "
            "(PRIVCLUST_IMPORT_SOURCES)"
        )

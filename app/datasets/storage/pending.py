"""Rows in object storage that their own writer failed to delete, recorded for the orphan sweep.

An upload cut by the store's outage discards what it wrote, but the store that failed the
upload usually fails that delete too. The writer then leaves a small marker in the scratch
folder (`.delete-<name>.url`, holding the rows' URL); the API's sweep (`remove_abandoned_rows`,
at start-up and every 10 minutes) deletes the rows as soon as the store answers again, without
waiting for them to age, and then the marker. The rows' name is a fresh dataset id that no
dataset was ever committed with; the sweep still asks the database before deleting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

PENDING_GLOB = ".delete-*.url"


def _marker(scratch: Path, stored: str) -> Path:
    return scratch / f".delete-{stored.rstrip('/').rsplit('/', 1)[-1]}.url"


def remember(scratch: Path, stored: str) -> None:
    """Record that the rows at `stored` must be deleted once the store can be reached."""
    scratch.mkdir(parents=True, exist_ok=True)
    _marker(scratch, stored).write_text(stored)


def pending(scratch: Path) -> list[tuple[Path, str]]:
    """(marker, rows' URL) of every deletion still to do."""
    if not scratch.is_dir():
        return []
    return [(marker, marker.read_text().strip()) for marker in sorted(scratch.glob(PENDING_GLOB))]


def settle(
    scratch: Path,
    referenced: Callable[[], Iterable[str]],
    delete: Callable[[str], bool],
) -> list[str]:
    """Delete the pending rows that no dataset refers to (`delete`: True once they are gone)
    and drop their markers; the URLs deleted. A marker whose rows a dataset names is dropped
    without deleting anything: those rows are in use."""
    found = pending(scratch)
    if not found:
        return []
    known = set(referenced())
    done = []
    for marker, url in found:
        name = url.rstrip("/").rsplit("/", 1)[-1]
        if name in known:
            marker.unlink(missing_ok=True)
        elif delete(url):
            marker.unlink(missing_ok=True)
            done.append(url)
    return done

"""The engine that runs a job's passes over the rows: this process, or the operator's Dask
cluster (PRIVCLUST_DASK_SCHEDULER), whose client each process opens once and keeps.

Exact, non-private statistics cross the wire to and from the cluster: docs/self-hosting.md says
how to run it with TLS (the client takes Dask's own `DASK_DISTRIBUTED__COMM__TLS__*` settings).
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from app.kit.config import Settings
from privclust.clustering.data.rows import Engine, InProcess

_lock = threading.Lock()
_clients: dict[str, Any] = {}


class ClusterUnreachable(RuntimeError):
    """The Dask scheduler did not answer in time."""


def dask_client(settings: Settings) -> Any:
    """This process's client of the configured scheduler, connected now if it is not (within
    `dask_connect_seconds`, else ClusterUnreachable)."""
    address = settings.dask_scheduler
    assert address is not None
    with _lock:
        client = _clients.get(address)
        if client is not None and client.status == "running":
            return client
        if client is not None:
            _close_quietly(client)
        from dask.distributed import Client

        try:
            client = Client(
                address,
                timeout=settings.dask_connect_seconds,
                set_as_default=False,
                name="privclust",
            )
        except (OSError, TimeoutError) as exc:
            raise ClusterUnreachable(
                f"the Dask scheduler at {address} did not answer within "
                f"{settings.dask_connect_seconds:g} s: {exc}"
            ) from exc
        _clients[address] = client
        return client


def row_engine(settings: Settings) -> Engine:
    """The engine for a job's passes: the Dask cluster's when one is configured (connected now,
    ClusterUnreachable if it cannot be), else this process's."""
    if settings.dask_scheduler is None:
        return InProcess()
    from privclust.distributed import DaskEngine

    return DaskEngine(dask_client(settings), cache_bytes=settings.dask_cache_mb << 20)


def close_engine(engine: Engine) -> None:
    """Drop what the engine kept for its runs (a cluster's cached partitions); a cluster that is
    gone by now has nothing to drop."""
    close = getattr(engine, "close", None)
    if close is None:
        return
    with contextlib.suppress(Exception):  # the job's outcome is already decided
        close()


def _close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):  # replacing a broken client
        client.close(timeout=2)

"""The RQ task of an import by reference: copy the source's rows, then release the count
(app.datasets.imports has the order and why a count is drawn at most once).

It runs in the worker process itself, not the job process: it reads and writes in batches
with bounded memory and draws one noisy count, so it needs neither the job process's compiled
kernels nor its crash isolation. While it runs it keeps the worker's RQ heartbeats going.
"""

from __future__ import annotations

import uuid

from app.datasets import imports
from app.kit.config import get_settings
from app.kit.db.session import session_factory
from worker import runner


def run_import(dataset_id: str) -> str:
    """The RQ entry point. Returns the dataset's status after the run (RQ keeps no result)."""
    settings = get_settings()
    job_runner = runner.current()

    def keepalive() -> None:
        if job_runner is not None and job_runner.keepalive is not None:
            job_runner.keepalive()

    sessions = session_factory(settings.resolved_database_url)
    return imports.run_import(settings, sessions, uuid.UUID(dataset_id), keepalive)

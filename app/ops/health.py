"""Health checks: /healthz (process up) and /readyz (database and Redis reachable, a worker
able to take a job, and the Dask cluster, when jobs run on one, able to run a task)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy import text

from app.kit import queue
from app.kit.cluster import CLUSTER_PROBE_SECONDS, cluster_view
from app.kit.config import Settings
from app.kit.problems import problem_response, responses

router = APIRouter(tags=["health"])


class Health(BaseModel):
    status: str


@router.get("/healthz", response_model=Health, operation_id="health_live")
def health_live() -> Health:
    """Liveness: the API process answers."""
    return Health(status="ok")


@router.get(
    "/readyz",
    response_model=Health,
    operation_id="health_ready",
    responses=responses(503, validation=False),
)
def health_ready(request: Request) -> Health | JSONResponse:
    """Readiness: a job submitted now can run. The database and Redis are reachable, a live
    worker is registered on the job queue, and the Dask cluster (when one is configured) has a
    running worker (503 names the one that is not)."""
    settings = request.app.state.settings
    failing = []
    try:
        with request.app.state.sessionmaker() as session:
            session.execute(text("SELECT 1"))
    except Exception as exc:
        failing.append(f"database: {type(exc).__name__}")
    try:
        connection = queue.redis_connection(queue.resolve_redis_url(settings))
        connection.ping()
    except Exception as exc:
        failing.append(f"redis: {type(exc).__name__}: {exc}"[:200])
    else:
        if queue.live_workers(settings, connection) == 0:
            failing.append("worker: no live worker is registered on the job queue")
    if settings.dask_scheduler is not None:
        failing.extend(_cluster_failing(settings))
    if failing:
        return problem_response(
            503,
            "not-ready",
            "Not ready",
            "; ".join(failing),
            failing=[f.split(":")[0] for f in failing],
        )
    return Health(status="ready")


def _cluster_failing(settings: Settings) -> list[str]:
    """Why the Dask cluster cannot take work now ([] when a worker runs)."""
    try:
        view = cluster_view(settings, CLUSTER_PROBE_SECONDS)
    except Exception as exc:
        return [f"dask: the scheduler does not answer ({type(exc).__name__})"]
    why = view.why_blocked() or "has no running worker"
    return [] if view.running else [f"dask: the cluster {why}"]

"""Domain exceptions (no HTTP types in them) and the one RFC 9457 problem+json handler.

Services and pure code raise `PrivclustError` subclasses; the HTTP layer (app.kit.problems)
turns each into an `application/problem+json` response with a stable machine-readable `code`.
"""

from __future__ import annotations

from typing import Any


class PrivclustError(Exception):
    """Base class of every error that reaches a client as a problem document."""

    status: int = 400
    code: str = "error"
    title: str = "Bad request"

    def __init_subclass__(
        cls, *, status: int | None = None, code: str | None = None, title: str | None = None
    ) -> None:
        """A subclass states its problem in its header: `class NotFound(PrivclustError,
        status=404, code="not-found", title="Not found")`; what it leaves out it inherits."""
        super().__init_subclass__()
        if status is not None:
            cls.status = status
        if code is not None:
            cls.code = code
        if title is not None:
            cls.title = title

    def __init__(
        self, detail: str, *, code: str | None = None, status: int | None = None, **extra: Any
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        # Extra members of the problem document (e.g. row/column, mu_remaining).
        self.extra = {k: v for k, v in extra.items() if v is not None}
        # Response headers that go with the problem (e.g. Retry-After).
        self.headers: dict[str, str] = {}


class UploadError(PrivclustError, status=400, code="invalid-file", title="Invalid dataset file"):
    """A dataset file that cannot be accepted; names the row and column at fault when known."""


class InvalidParameter(
    PrivclustError, status=422, code="invalid-parameter", title="Invalid parameter"
):
    """A request parameter that is invalid for this resource (422 `invalid-parameter`)."""

    def __init__(self, detail: str, *, field: str | None = None, **extra: Any) -> None:
        super().__init__(detail, field=field, **extra)
        self.field = field


class NotFound(PrivclustError, status=404, code="not-found", title="Not found"):
    """No such object for this tenant (or one the key may not see)."""


class Forbidden(PrivclustError, status=403, code="forbidden", title="Forbidden"):
    """The key's role may not do this."""


class Unauthorized(PrivclustError, status=401, code="unauthorized", title="Unauthorized"):
    """No key, or a key that is unknown or revoked."""


class Conflict(PrivclustError, status=409, code="conflict", title="Conflict"):
    """The request contradicts the object's state (or an idempotency key's first use)."""


class Gone(PrivclustError, status=410, code="gone", title="Gone"):
    """The object existed but what the request needs is gone (a dataset's deleted rows)."""


class BudgetExceeded(Conflict, code="budget-exceeded", title="Privacy budget exceeded"):
    """The job would overshoot the dataset's privacy budget; nothing was charged."""


class KeyBudgetExceeded(
    BudgetExceeded, code="key-budget-exceeded", title="Key's privacy budget exceeded"
):
    """The job would overshoot the owner's cap on what its API key may spend of the dataset;
    nothing was charged."""


class PaceExceeded(BudgetExceeded, code="pace-exceeded", title="Pace exceeded"):
    """The job would overshoot this period's pace (the dataset's or the key's): a rate limit
    under the lifetime cap; `renews_at` says when the next period starts. Nothing charged."""


class ServiceUnavailable(
    PrivclustError, status=503, code="service-unavailable", title="Service unavailable"
):
    """A dependency (the queue, the database) cannot take the request now."""


class TooManyQueuedJobs(
    PrivclustError, status=429, code="too-many-queued-jobs", title="Too many queued jobs"
):
    """The operator's cap on queued jobs (per tenant or per key) is reached: 429, with a
    Retry-After; nothing was charged."""

    def __init__(self, detail: str, *, retry_after: int, **extra: Any) -> None:
        super().__init__(detail, retry_after=retry_after, **extra)
        self.headers["Retry-After"] = str(retry_after)


class StorageUnavailable(
    ServiceUnavailable, code="storage-unavailable", title="Object storage unavailable"
):
    """The datasets' store (object storage) could not be reached; nothing was created or
    charged."""


class DatasetNotReady(Conflict, code="dataset-not-ready", title="Dataset not ready"):
    """The dataset is still importing, or its import failed: it has no rows to run on yet."""


class ImportSourceForbidden(
    Forbidden, code="import-source-forbidden", title="Import source not allowed"
):
    """An import's source is not under the operator's allowed prefixes (or imports are off);
    nothing was created."""

"""What each problem `code` means: the page its `type` URI (/problems/{code}) serves.

Every problem document the API sends has `type` = /problems/<code>, relative to the API's own
address (RFC 9457 3.1.1), so the link a client finds in an error opens on the service it came
from. A test checks that every code the code base can send has an entry here.
"""

from __future__ import annotations

from dataclasses import dataclass

TYPE_PATH = "/problems/"


@dataclass(frozen=True)
class ProblemType:
    title: str
    description: str


_NOTHING = "Nothing was created or charged."

PROBLEM_TYPES: dict[str, ProblemType] = {
    "bad-request": ProblemType("Bad request", "The request could not be understood."),
    "error": ProblemType(
        "Error", "An HTTP error with no more specific code; the detail says what failed."
    ),
    "invalid-file": ProblemType(
        "Invalid dataset file",
        "The uploaded file cannot be read as a table (CSV with a header row, .npy or "
        f"Parquet); `row` and `column` name the place when known. {_NOTHING}",
    ),
    "empty-dataset": ProblemType(
        "Empty dataset",
        f"The file has no data rows, no numeric column, or no row left after the declared "
        f"missing-value policy. {_NOTHING}",
    ),
    "ragged-row": ProblemType(
        "Ragged row", f"A CSV row has more or fewer fields than the header. {_NOTHING}"
    ),
    "non-numeric-value": ProblemType(
        "Non-numeric value",
        f"A cell of a numeric column is not a number (and not a declared category). {_NOTHING}",
    ),
    "non-finite-value": ProblemType(
        "Non-finite value", f"A cell is NaN or infinite where a number is needed. {_NOTHING}"
    ),
    "missing-value": ProblemType(
        "Missing value",
        "A cell is missing and the declared policy for missing values refuses the table. "
        f"{_NOTHING}",
    ),
    "undeclared-category": ProblemType(
        "Undeclared category",
        f"A categorical column holds a value its declared categories do not list. {_NOTHING}",
    ),
    "unauthorized": ProblemType("Unauthorized", "No API key, or one that is not valid."),
    "missing-api-key": ProblemType(
        "Missing API key", "Send the key as `Authorization: Bearer <key>`."
    ),
    "invalid-api-key": ProblemType("Invalid API key", "The key is unknown or was revoked."),
    "forbidden": ProblemType("Forbidden", "The key may not do this."),
    "forbidden-role": ProblemType(
        "Forbidden for this role", "The key's role (admin, owner, analyst) may not do this."
    ),
    "import-source-forbidden": ProblemType(
        "Import source not allowed",
        "An import's source is not under a prefix the operator allows (PRIVCLUST_IMPORT_SOURCES),"
        f" or imports are off. {_NOTHING}",
    ),
    "not-found": ProblemType(
        "Not found", "No such object for this tenant (another tenant's is not found either)."
    ),
    "dataset-not-found": ProblemType("Dataset not found", "No such dataset for this key."),
    "job-not-found": ProblemType("Job not found", "No such job for this key."),
    "sweep-not-found": ProblemType("Sweep not found", "No such sweep for this key."),
    "key-not-found": ProblemType("API key not found", "No such API key in this tenant."),
    "key-cap-not-found": ProblemType(
        "Key cap not found", "This API key has no cap on this dataset."
    ),
    "method-not-allowed": ProblemType(
        "Method not allowed", "The path does not serve this method; `Allow` lists those it does."
    ),
    "conflict": ProblemType("Conflict", "The request contradicts the object's state."),
    "budget-exceeded": ProblemType(
        "Privacy budget exceeded",
        "The job would overshoot the dataset's privacy budget; the document says what it needs "
        "and what remains, in mu and epsilon. Nothing was charged.",
    ),
    "key-budget-exceeded": ProblemType(
        "Key's privacy budget exceeded",
        "The job would overshoot the cap the dataset's owner set on this API key. Nothing was "
        "charged.",
    ),
    "pace-exceeded": ProblemType(
        "Pace exceeded",
        "The job would overshoot this period's pace (the dataset's or the key's); `renews_at` "
        "says when the next period starts. Nothing was charged.",
    ),
    "dataset-not-ready": ProblemType(
        "Dataset not ready",
        "The dataset is still importing, or its import failed: it has no rows to run on yet.",
    ),
    "dataset-deleted": ProblemType(
        "Dataset deleted", "The dataset's rows were deleted: no job can run on it."
    ),
    "idempotency-key-reused": ProblemType(
        "Idempotency key reused",
        "This Idempotency-Key was first used with a different request. Nothing was charged.",
    ),
    "job-finished": ProblemType("Job finished", "The job has already finished."),
    "job-not-succeeded": ProblemType(
        "Job not succeeded", "The job has no result: it has not succeeded (yet)."
    ),
    "sweep-finished": ProblemType("Sweep finished", "The sweep has already finished."),
    "gone": ProblemType("Gone", "The object existed, but what the request needs is gone."),
    "rows-deleted": ProblemType(
        "Rows deleted", "The dataset's rows were deleted, so labels cannot be computed."
    ),
    "too-large": ProblemType(
        "Upload too large", "The upload exceeds the operator's limit (the detail says it)."
    ),
    "unsupported-media-type": ProblemType(
        "Unsupported media type",
        "Upload a dataset as multipart/form-data with a `file` part (or a `source`).",
    ),
    "invalid-parameter": ProblemType(
        "Invalid parameter",
        "A parameter is missing or invalid; `field` names it and `errors` lists every one. "
        f"{_NOTHING}",
    ),
    "too-many-queued-jobs": ProblemType(
        "Too many queued jobs",
        "The operator's cap on queued jobs (per tenant or per key) is reached; retry after "
        "`Retry-After` seconds. Nothing was charged.",
    ),
    "internal-error": ProblemType(
        "Internal server error", "An unexpected error; the server logged it."
    ),
    "service-unavailable": ProblemType(
        "Service unavailable", "A dependency cannot take the request now; retry later."
    ),
    "database-unavailable": ProblemType(
        "Database unavailable",
        f"The database could not be reached (or stayed locked); retry later. {_NOTHING}",
    ),
    "queue-unavailable": ProblemType(
        "Job queue unavailable",
        f"The job queue (Redis) could not be reached; retry later. {_NOTHING}",
    ),
    "storage-unavailable": ProblemType(
        "Object storage unavailable",
        f"The datasets' object storage could not be reached; retry later. {_NOTHING}",
    ),
    "not-ready": ProblemType(
        "Not ready",
        "GET /readyz: something a job needs is not there yet (the database, Redis, a live "
        "worker, or the Dask cluster); `failing` names which.",
    ),
    # A federation: a coordinator's calls to a member, and the member's answers.
    "member-refused": ProblemType(
        "Member refused",
        "A member of the federated dataset refused (no room in its own budget, a revoked key, "
        "another domain); the detail names the member. Nothing was charged anywhere.",
    ),
    "member-failed": ProblemType(
        "Member failed",
        "A member failed or could not be reached after the members had charged the release; "
        "the detail names it, and the charge stays, as for a central job that failed mid-run.",
    ),
    "federated-dataset": ProblemType(
        "Federated dataset",
        "The operation needs rows on this server, and a federated dataset keeps none (its "
        "labels are computed on each member, for that member's rows).",
    ),
    "domain-mismatch": ProblemType(
        "Domain mismatch",
        "The federation's declared domain, columns or table terms differ from this member's "
        f"dataset. {_NOTHING}",
    ),
    "member-job-conflict": ProblemType(
        "Federated job conflict",
        "This member already joined that federated job with another plan. Nothing was charged.",
    ),
    "member-job-not-found": ProblemType(
        "Federated job not found", "This member key joined no federated job with that id."
    ),
    "member-job-finished": ProblemType(
        "Federated job finished", "The federated job has ended; it answers no more releases."
    ),
    "member-budget-spent": ProblemType(
        "Member's charge spent",
        "The release would take the federated job past the mu this member charged for it; the "
        "member answers no release beyond its charge.",
    ),
    "candidates-differ": ProblemType(
        "Vote candidates differ",
        "The member drew a vote's candidates again from their recipe and they differ from the "
        "coordinator's digest (another numpy build or processor rounds a draw differently); "
        "the coordinator sends the candidates whole instead. Nothing was charged.",
    ),
    "release-in-progress": ProblemType(
        "Release in progress",
        "The member is computing that release; ask again to get its stored answer.",
    ),
    "release-taken": ProblemType(
        "Release taken",
        "That release index was answered for another request; a release is answered once.",
    ),
}

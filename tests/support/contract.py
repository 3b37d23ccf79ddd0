"""Schemathesis hooks for the contract run (tests/e2e/test_contract_fuzz.py), loaded by the
schemathesis CLI through tests/e2e/schemathesis.toml (`hooks = "tests.support.contract"`).

- `map_case` points half of the schema-valid cases at real rows (a dataset with a job and a
  sweep, a spare key), so the fuzzer reaches more than the 404 of a random id. The ids come from
  PRIVCLUST_FUZZ_ROWS (JSON), written by the test once it has made the rows.
- `request_validation_accepts_valid_data`, an extra check: a schema-valid request may be refused
  for what depends on the dataset (the service's 422 `invalid-parameter`), never by request
  validation, whose 422 carries an `errors` list: that would mean the schema allows what the
  server does not take.
- `filter_failure` drops two kinds of failure that are not the API's:
  - the documented 503 `database-unavailable` (every operation lists it), which SQLite answers
    when a write cannot take its single write lock, as the three roles' concurrent requests and
    the worker's progress writes sometimes make it: nothing was changed, the client may retry.
    Any other 5xx still fails the run;
  - a stateful step whose path carries a null that an inferred link copied from an answer (a
    ledger entry's `sweep_id` is null for a job no sweep admitted): `/v1/sweeps/None` is not an
    id the document ever gives, and its 422 is right.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

import schemathesis
from schemathesis.generation.meta import TestPhase

ROWS_ENV = "PRIVCLUST_FUZZ_ROWS"
# (where, parameter name, key in the rows document)
_REAL_IDS = (
    ("path_parameters", "dataset_id", "dataset_id"),
    ("path_parameters", "job_id", "job_id"),
    ("path_parameters", "sweep_id", "sweep_id"),
    ("path_parameters", "key_id", "key_id"),
    ("query", "dataset_id", "dataset_id"),
)


def _rows() -> dict[str, Any]:
    return json.loads(os.environ.get(ROWS_ENV) or "{}")


def _coin(value: object) -> int:
    """0 or 1 from a generated value, the same in every run (unlike hash() of a str)."""
    return zlib.crc32(str(value).encode("utf-8", "surrogatepass")) % 2


def _positive(case: Any) -> bool:
    meta = case.meta
    return meta is None or meta.generation.mode.is_positive


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    # The stateful phase follows the API's own answers (a created dataset's id): leave it.
    if not _positive(case) or (case.meta and case.meta.phase.name == TestPhase.STATEFUL):
        return case
    rows = _rows()
    for where, name, key in _REAL_IDS:
        params = getattr(case, where)
        if params and name in params and key in rows and _coin(params[name]) == 0:
            params[name] = rows[key]
    # A cursor that no list issued is a position all the same; half of them are real ones.
    cursor = rows.get("cursors", {}).get(case.operation.path)
    if case.query and "cursor" in case.query and cursor and _coin(case.query["cursor"]) == 0:
        case.query["cursor"] = cursor
    return case


@schemathesis.check
def request_validation_accepts_valid_data(ctx: Any, response: Any, case: Any) -> bool | None:
    if _positive(case) and case.meta is not None and response.status_code == 422:
        try:
            problem = response.json()
        except ValueError:
            return None
        if isinstance(problem, dict) and "errors" in problem:
            raise AssertionError(
                f"request validation refused schema-valid data: {response.text[:500]}"
            )
    return None


def _documented_503(response: Any) -> bool:
    if response is None or response.status_code != 503:
        return False
    try:
        problem = response.json()
    except ValueError:
        return False
    return isinstance(problem, dict) and problem.get("code") == "database-unavailable"


def _null_from_a_link(case: Any) -> bool:
    stateful = case.meta is not None and case.meta.phase.name == TestPhase.STATEFUL
    return stateful and any(str(v) == "None" for v in (case.path_parameters or {}).values())


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but the two kinds above."""
    return not (_documented_503(response) or _null_from_a_link(case))

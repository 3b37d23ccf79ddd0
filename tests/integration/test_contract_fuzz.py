"""The published contract, fuzzed: schemathesis sends schema-valid and schema-invalid requests
to every operation of /openapi.json as an admin, an owner and an analyst, against the real app
on the test database (SQLite in `make test`, Postgres in CI's second pass).

Every answer must be documented (status code and content type), conform to its response
schema, and never be a server error; schema-valid data must be accepted and invalid data
refused, except where a check cannot hold for an operation (listed in EXCLUDED, with why).
Bounded: EXAMPLES cases per operation, mode and role, derandomized so a run is repeatable.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import CheckFunction
from schemathesis.core.parameters import ParameterLocation
from schemathesis.specs.openapi import checks as oas_checks

from app.kit.config import Settings
from tests.support.api import auth, uploaded
from tests.support.data import csv_bytes, two_blobs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = 25


def request_validation_accepts_valid_data(ctx: Any, response: Any, case: Any) -> bool | None:
    """Schema-valid data may be refused for what depends on the dataset (the service's 422
    `invalid-parameter`, 400 for the file), never by request validation, whose 422 carries
    the `errors` list: that would mean the schema promises more than the server takes."""
    positive = case.meta is not None and case.meta.generation.mode.is_positive
    if positive and response.status_code == 422 and "errors" in response.json():
        raise AssertionError(f"request validation refused schema-valid data: {response.text}")
    return None


# What depends on the dataset cannot be in a schema: k at most n_rows_dp and a population that
# fits, epsilon or mu (exactly one) giving a noise scale that can be drawn, a cap not below what
# is spent, and an upload's file that parses with as many columns as center/lower/upper say.
# For these operations positive_data_acceptance (which takes any 422 for a schema-valid request
# as a failure) cannot hold; the contract (docs/api.md) answers such parameters with 422
# `invalid-parameter`. request_validation_accepts_valid_data, which every operation runs,
# still checks that none of them is refused by request validation.
_DATASET_DEPENDENT = (
    "dataset-dependent validity: see the comment above; request_validation_accepts_valid_data "
    "still applies"
)
EXCLUDED: dict[str, dict[CheckFunction, str]] = {
    label: {oas_checks.positive_data_acceptance: _DATASET_DEPENDENT}
    for label in (
        "POST /v1/datasets",
        "PATCH /v1/datasets/{dataset_id}/budget",
        "POST /v1/datasets/{dataset_id}/jobs",
        "POST /v1/datasets/{dataset_id}/jobs/estimate",
        "POST /v1/datasets/{dataset_id}/sweeps",
        "POST /v1/datasets/{dataset_id}/sweeps/estimate",
    )
}


def _coin(value: object) -> int:
    """0 or 1 from a generated value, the same in every run (unlike hash() of a str)."""
    return zlib.crc32(str(value).encode("utf-8", "surrogatepass")) % 2


class RealRows:
    """Real rows for the fuzzer to find: a dataset with a job, and a spare key to revoke."""

    def __init__(self, client: TestClient, keys: dict[str, str]) -> None:
        self.dataset_id = uploaded(
            client, keys["owner"], csv_bytes(two_blobs(300)), name="fuzz", filename="d.csv",
            epsilon="50", delta="1e-6",
        )["id"]  # fmt: skip
        job = client.post(
            f"/v1/datasets/{self.dataset_id}/jobs",
            headers=auth(keys["analyst"]),
            json={"k": 2, "epsilon": 0.5},
        )
        assert job.status_code == 202, job.text
        self.job_id = job.json()["id"]
        spare = client.post(
            "/v1/api-keys", headers=auth(keys["admin"]), json={"tenant": "acme", "role": "analyst"}
        )
        self.spare_key_id = spare.json()["id"]
        self.cursors = {}
        for path, role in (
            ("/v1/datasets", "owner"),
            ("/v1/jobs", "analyst"),
            ("/v1/api-keys", "admin"),
        ):
            page = client.get(path, headers=auth(keys[role]), params={"limit": 1}).json()
            self.cursors[path] = page["next_cursor"]

    def point_at_real_rows(self, case: Any) -> None:
        """Half of the positive cases (decided by the generated id itself, so a run is
        repeatable) address the real rows instead of random ids that are all 404s."""
        for params, name, value in (
            (case.path_parameters, "dataset_id", self.dataset_id),
            (case.path_parameters, "job_id", self.job_id),
            (case.path_parameters, "key_id", self.spare_key_id),
            (case.query, "dataset_id", self.dataset_id),
        ):
            if params and name in params and _coin(params[name]) == 0:
                params[name] = value
        # A cursor is opaque: only one this API issued is valid, so positive cases use one.
        if case.query and "cursor" in case.query:
            cursor = self.cursors.get(case.operation.path)
            if cursor is None or _coin(case.query["cursor"]):
                del case.query["cursor"]
            else:
                case.query["cursor"] = cursor


def _run_operation(
    operation: Any, mode: GenerationMode, call: Callable[[Any], None], examples: int
) -> None:
    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate),  # no shrinking: bounded time
    )
    def run(case: Any) -> None:
        call(case)

    try:
        run()
    except Unsatisfiable:
        # Nothing to make invalid (e.g. /healthz takes no input): no negative cases exist.
        assert mode is GenerationMode.NEGATIVE


@pytest.mark.parametrize("role", ["admin", "owner", "analyst"])
def test_the_contract_holds_for_every_role(settings: Settings, keys, role: str) -> None:
    from app.main import create_app

    app = create_app(settings)
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    requests: Counter[str] = Counter()
    statuses: Counter[int] = Counter()
    failures: list[str] = []
    with TestClient(app) as client:
        rows = RealRows(client, keys)
        headers = auth(keys[role])

        def call(case: Any) -> None:
            if case.meta is None or case.meta.generation.mode.is_positive:
                rows.point_at_real_rows(case)
            header_mode = case.meta.components.get(ParameterLocation.HEADER) if case.meta else None
            if header_mode is None or header_mode.mode.is_positive:
                case.headers = {**(case.headers or {}), **headers}
            # else: the case's own (missing or malformed) Authorization is what is under test.
            excluded = list(EXCLUDED.get(case.operation.label, {}))
            requests[case.operation.label] += 1
            try:
                response = case.call_and_validate(
                    excluded_checks=excluded,
                    additional_checks=[request_validation_accepts_valid_data],
                )
            except (Exception, BaseExceptionGroup) as exc:
                mode = case.meta.generation.mode if case.meta else ""
                failures.append(
                    f"{case.operation.label} [{mode}]: {exc}"[:1500]
                    + "\n"
                    + case.as_curl_command()[:600]
                )
                return
            statuses[response.status_code] += 1

        for result in schema.get_all_operations():
            operation = result.ok()
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                _run_operation(operation, mode, call, EXAMPLES)
    total = sum(requests.values())
    print(f"\n{role}: {total} requests over {len(requests)} operations; statuses {dict(statuses)}")
    assert not failures, f"{len(failures)} failures:\n" + "\n----\n".join(failures[:40])
    assert len(requests) >= 12
